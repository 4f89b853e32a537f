-- Every current measurement each active roadmap row is judged on, over time, with its
-- series and the target it had at that point: the threshold, or for a ratio row the
-- threshold times the peer engine's value in the same run (the rule v_gate_evidence
-- applies to the newest point; a run without the peer has no target).
SELECT
    rr.id AS roadmap_row_id,
    m.metric_id,
    m.run_id,
    m.fingerprint,
    m.series,
    m.started_at,
    m.finished_at,
    m.run_status,
    m.preflight_status,
    m.git_sha,
    m.unit,
    m.value,
    CASE WHEN rr.peer_engine IS NULL THEN rr.threshold
         ELSE rr.threshold * (
             SELECT p.value FROM v_metric_history p
             WHERE p.run_id = m.run_id AND p.engine = rr.peer_engine AND p.metric = rr.metric
             ORDER BY p.metric_id DESC LIMIT 1)
    END AS target
-- CROSS JOIN: SQLite keeps roadmap_rows as the outer loop and reaches each row's
-- runs through their (workload, hardware_class) index, instead of scanning every
-- metric (5x faster over 5 years of nightlies); PostgreSQL plans it as an inner join.
FROM roadmap_rows rr
CROSS JOIN v_metric_history m
WHERE rr.retired_at IS NULL
  AND m.workload = rr.workload
  AND m.hardware_class = rr.hardware_class
  AND m.engine = rr.engine
  AND m.metric = rr.metric
