-- One roadmap row's measurements over time with the target at each point (plot both as lines).
-- Parameters (bound by name): roadmap_row_id
SELECT started_at, run_id, git_sha, value, target, unit
FROM v_roadmap_history
WHERE roadmap_row_id = :roadmap_row_id
ORDER BY started_at, metric_id
