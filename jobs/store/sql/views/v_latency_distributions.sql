-- Latency distributions (TTFT, TPOT, ITL, E2E) per workload, hardware class and
-- engine, from the newest completed (status ok) current run that measured each:
-- the summary the bench job stores with every *_p50_s metric (count, mean, std,
-- p50, p90, p99).
-- Each (workload, hardware, engine, latency) picks its newest metric through the
-- runs' (workload, hardware_class, started_at) index, and the chosen metric is
-- joined from the tables (as in v_gate_evidence): a window over the whole
-- history costs seconds on SQLite after a few years of nightlies.
WITH latencies(metric, latency) AS (
    VALUES ('ttft_p50_s', 'ttft'), ('tpot_p50_s', 'tpot'), ('itl_p50_s', 'itl'), ('e2e_p50_s', 'e2e')
)
SELECT
    wh.workload,
    wh.hardware_class,
    e.engine,
    l.latency,
    m.run_id,
    m.id AS metric_id,
    r.started_at,
    m.unit,
    m.count,
    m.mean,
    m.std,
    m.p50,
    m.p90,
    m.p99
FROM (SELECT DISTINCT workload, hardware_class FROM runs) wh
CROSS JOIN (SELECT DISTINCT engine FROM metrics) e
CROSS JOIN latencies l
JOIN metrics m ON m.id = (
    SELECT n.metric_id FROM v_metric_history n
    WHERE n.workload = wh.workload
      AND n.hardware_class = wh.hardware_class
      AND n.engine = e.engine
      AND n.metric = l.metric
      AND n.run_status = 'ok'
    ORDER BY n.started_at DESC, n.metric_id DESC LIMIT 1)
JOIN runs r ON r.id = m.run_id
