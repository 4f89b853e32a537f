-- Detected level shifts in a metric's history, with the runs on either side of the change.
SELECT
    c.id AS change_point_id,
    a.workload,
    a.hardware_class,
    c.fingerprint,
    COALESCE(c.series, 'run:' || c.fingerprint || ':' || c.engine) AS series,
    c.engine,
    c.metric,
    c.is_regression,
    c.change_percent,
    c.mean_before,
    c.mean_after,
    c.pvalue,
    c.last_run_before_id,
    b.started_at AS before_started_at,
    b.git_sha AS before_git_sha,
    c.first_run_after_id,
    a.started_at AS after_started_at,
    a.git_sha AS after_git_sha,
    c.detected_at
FROM change_points c
JOIN runs b ON b.id = c.last_run_before_id
JOIN runs a ON a.id = c.first_run_after_id
