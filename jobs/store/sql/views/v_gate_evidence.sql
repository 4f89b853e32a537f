-- For each active roadmap row, the newest current measurement it is judged on,
-- with what validity needs (preflight, timing, count, agreement) and the peer
-- engine's value on the same fingerprint for ratio thresholds.
SELECT
    rr.id AS roadmap_row_id,
    h.metric_id,
    h.run_id,
    h.run_status,
    h.fingerprint,
    h.started_at,
    h.finished_at,
    h.preflight_status,
    h.value,
    h.count,
    (SELECT a.value FROM v_metric_history a
      WHERE a.run_id = h.run_id AND a.engine = h.engine AND a.metric = 'agreement'
      ORDER BY a.metric_id DESC LIMIT 1) AS agreement,
    (SELECT p.value FROM v_metric_history p
      WHERE p.fingerprint = h.fingerprint AND p.engine = rr.peer_engine AND p.metric = rr.metric
      ORDER BY p.started_at DESC, p.metric_id DESC LIMIT 1) AS peer_value
FROM roadmap_rows rr
LEFT JOIN v_metric_history h ON h.metric_id = (
    SELECT l.metric_id FROM v_metric_history l
    WHERE l.workload = rr.workload
      AND l.hardware_class = rr.hardware_class
      AND l.engine = rr.engine
      AND l.metric = rr.metric
    ORDER BY l.started_at DESC, l.metric_id DESC LIMIT 1)
WHERE rr.retired_at IS NULL
