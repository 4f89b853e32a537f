-- Every figure of the newest completed (status ok) current run per workload,
-- hardware class and engine: what docs/BENCHMARKS.md publishes.
SELECT
    workload,
    hardware_class,
    engine,
    run_id,
    started_at,
    preflight_status,
    metric_id,
    metric,
    unit,
    value
FROM (
    SELECT
        m.*,
        DENSE_RANK() OVER (PARTITION BY m.workload, m.hardware_class, m.engine
                           ORDER BY m.started_at DESC, m.run_id DESC) AS recency
    FROM v_metric_history m
    WHERE m.run_status = 'ok'
) newest
WHERE recency = 1
