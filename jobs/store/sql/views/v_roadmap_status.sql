-- Each active roadmap row with its newest evaluation: the answer to "is it met?".
SELECT
    rr.id AS roadmap_row_id,
    rr.title,
    rr.metric,
    rr.engine,
    rr.comparison,
    rr.threshold,
    rr.peer_engine,
    rr.workload,
    rr.hardware_class,
    COALESCE(e.status, 'NO_DATA') AS status,
    e.value,
    e.peer_value,
    e.target,
    COALESCE(e.reason, 'never evaluated') AS reason,
    e.run_id,
    e.metric_id,
    e.evaluated_at
FROM roadmap_rows rr
LEFT JOIN gate_evaluations e ON e.id = (
    SELECT MAX(g.id) FROM gate_evaluations g WHERE g.roadmap_row_id = rr.id)
WHERE rr.retired_at IS NULL
