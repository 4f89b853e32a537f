-- Every figure of the newest completed (status ok) current run per workload,
-- hardware class and engine: what docs/BENCHMARKS.md publishes.
-- The newest run of each (workload, hardware, engine) is looked up through the
-- runs' index rather than ranking all history (see v_latency_distributions).
SELECT
    wh.workload,
    wh.hardware_class,
    e.engine,
    h.run_id,
    h.started_at,
    h.preflight_status,
    h.metric_id,
    h.metric,
    h.unit,
    h.value
FROM (SELECT DISTINCT workload, hardware_class FROM runs) wh
CROSS JOIN (SELECT DISTINCT engine FROM metrics) e
CROSS JOIN v_metric_history h
WHERE h.engine = e.engine
  AND h.run_id = (
    SELECT n.run_id FROM v_metric_history n
    WHERE n.workload = wh.workload
      AND n.hardware_class = wh.hardware_class
      AND n.engine = e.engine
      AND n.run_status = 'ok'
    ORDER BY n.started_at DESC, n.run_id DESC LIMIT 1)
