-- The roadmap board: v_roadmap_status with what a reader needs beside the
-- verdict: the metric's unit, the evidence run's timestamps (for its age) and
-- the freshness the row allows. (unit is NULL for a row never measured.)
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
    s.evaluated_at,
    rr.max_age_days,
    (SELECT u.unit FROM metrics u
      WHERE u.run_id = s.run_id AND u.engine = s.engine AND u.metric = s.metric LIMIT 1) AS unit,
    r.started_at AS run_started_at,
    r.finished_at AS run_finished_at,
    r.git_sha AS run_git_sha
FROM v_roadmap_status s
JOIN roadmap_rows rr ON rr.id = s.roadmap_row_id
LEFT JOIN runs r ON r.id = s.run_id
