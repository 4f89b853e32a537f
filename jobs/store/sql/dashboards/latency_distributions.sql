-- TTFT, TPOT, ITL and E2E distributions of the newest completed run per workload, hardware and engine.
SELECT latency, workload, hardware_class, engine, p50, p90, p99, mean, std, count, run_id, started_at
FROM v_latency_distributions
ORDER BY latency, workload, hardware_class, engine
