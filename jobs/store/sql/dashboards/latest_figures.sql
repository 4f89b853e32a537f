-- Every figure of the newest completed run per workload, hardware class and engine (docs/BENCHMARKS.md).
SELECT workload, hardware_class, engine, metric, value, unit, run_id, started_at, preflight_status
FROM v_latest_figures
ORDER BY workload, hardware_class, engine, metric
