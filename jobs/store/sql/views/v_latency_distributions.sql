-- Latency distributions (TTFT, TPOT, ITL, E2E) per workload, hardware class and
-- engine, from the newest completed (status ok) current run that measured each:
-- the summary the bench job stores with every *_p50_s metric (count, mean, std,
-- p50, p90, p99).
SELECT
    workload,
    hardware_class,
    engine,
    latency,
    run_id,
    metric_id,
    started_at,
    unit,
    count,
    mean,
    std,
    p50,
    p90,
    p99
FROM (
    SELECT
        m.*,
        CASE m.metric WHEN 'ttft_p50_s' THEN 'ttft' WHEN 'tpot_p50_s' THEN 'tpot'
                      WHEN 'itl_p50_s' THEN 'itl' WHEN 'e2e_p50_s' THEN 'e2e' END AS latency,
        ROW_NUMBER() OVER (PARTITION BY m.workload, m.hardware_class, m.engine, m.metric
                           ORDER BY m.started_at DESC, m.metric_id DESC) AS recency
    FROM v_metric_history m
    WHERE m.metric IN ('ttft_p50_s', 'tpot_p50_s', 'itl_p50_s', 'e2e_p50_s')
      AND m.run_status = 'ok'
) newest
WHERE recency = 1
