-- Regressions found by change-point detection, newest first.
SELECT workload, hardware_class, engine, metric, change_percent, mean_before, mean_after,
       before_git_sha, after_git_sha, after_started_at
FROM v_change_points
WHERE is_regression
ORDER BY after_started_at DESC
