-- One metric's history for one engine on one workload and hardware class.
-- Parameters (bound by name): workload, hardware_class, engine, metric
SELECT started_at, run_id, git_sha, value, p50, p99, count
FROM v_metric_history
WHERE workload = :workload AND hardware_class = :hardware_class AND engine = :engine AND metric = :metric
ORDER BY started_at
