-- For each active roadmap row, the newest current measurement it is judged on,
-- with what validity needs (preflight, timing, count, agreement, the bench job's
-- own verdict on the run), the series it belongs to, and for ratio thresholds the
-- peer engine's value measured beside it in the same run (never a peer measured in
-- another run: only engines of one run saw the same host at the same time), with the
-- peer's series so its figure can be checked against the peer's own history.
-- (The chosen metric is joined from the tables, not the view: joining the view
-- makes SQLite materialize all of it.)
SELECT
    rr.id AS roadmap_row_id,
    m.id AS metric_id,
    r.id AS run_id,
    r.status AS run_status,
    r.fingerprint,
    COALESCE(m.series, 'run:' || r.fingerprint || ':' || m.engine) AS series,
    r.started_at,
    r.finished_at,
    r.preflight_status,
    r.validity,
    m.value,
    m.count,
    (SELECT a.value FROM v_metric_history a
      WHERE a.run_id = r.id AND a.engine = m.engine AND a.metric = 'agreement'
      ORDER BY a.metric_id DESC LIMIT 1) AS agreement,
    (SELECT p.value FROM v_metric_history p
      WHERE p.run_id = r.id AND p.engine = rr.peer_engine AND p.metric = rr.metric
      ORDER BY p.metric_id DESC LIMIT 1) AS peer_value,
    (SELECT p.series FROM v_metric_history p
      WHERE p.run_id = r.id AND p.engine = rr.peer_engine AND p.metric = rr.metric
      ORDER BY p.metric_id DESC LIMIT 1) AS peer_series
FROM roadmap_rows rr
LEFT JOIN metrics m ON m.id = (
    SELECT l.metric_id FROM v_metric_history l
    WHERE l.workload = rr.workload
      AND l.hardware_class = rr.hardware_class
      AND l.engine = rr.engine
      AND l.metric = rr.metric
    ORDER BY l.started_at DESC, l.metric_id DESC LIMIT 1)
LEFT JOIN runs r ON r.id = m.run_id
WHERE rr.retired_at IS NULL
