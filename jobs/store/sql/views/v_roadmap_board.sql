-- The roadmap board: v_roadmap_status with what a reader needs beside the
-- verdict: the metric's unit, the evidence run's timestamps (for its age) and
-- the freshness the row allows. (unit is NULL for a row never measured.)
-- series: the series of the evidence (what its history and change points are read within).
-- evidence_current is 0 when the evaluated value is no longer what its run
-- holds (the metric or the run was superseded since): re-evaluate the gates.
SELECT
    s.roadmap_row_id,
    s.title,
    s.metric,
    s.engine,
    s.comparison,
    s.threshold,
    s.peer_engine,
    s.workload,
    s.hardware_class,
    s.status,
    s.value,
    s.peer_value,
    s.target,
    s.reason,
    s.run_id,
    (SELECT h.series FROM v_metric_history h WHERE h.metric_id = s.metric_id) AS series,
    s.evaluated_at,
    rr.max_age_days,
    (SELECT u.unit FROM metrics u
      WHERE u.run_id = s.run_id AND u.engine = s.engine AND u.metric = s.metric LIMIT 1) AS unit,
    r.started_at AS run_started_at,
    r.finished_at AS run_finished_at,
    r.git_sha AS run_git_sha,
    CASE WHEN s.run_id IS NULL THEN NULL
         WHEN EXISTS (SELECT 1 FROM v_metric_history h
                      WHERE h.run_id = s.run_id AND h.engine = s.engine AND h.metric = s.metric
                        AND h.value = s.value) THEN 1
         ELSE 0 END AS evidence_current
FROM v_roadmap_status s
JOIN roadmap_rows rr ON rr.id = s.roadmap_row_id
LEFT JOIN runs r ON r.id = s.run_id
