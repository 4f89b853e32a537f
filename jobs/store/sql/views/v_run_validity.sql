-- Every current run with what decides whether it can be trusted: how it ended,
-- whether the host was quiet, the lowest output agreement among its engines,
-- and a one-word verdict (the gates add per-row rules: duration, samples).
SELECT
    r.id AS run_id,
    r.kind,
    r.workload,
    r.hardware_class,
    r.fingerprint,
    r.started_at,
    r.finished_at,
    r.status AS run_status,
    r.preflight_status,
    r.git_sha,
    r.git_dirty,
    r.code_hash,
    r.host,
    r.airflow_run_id,
    (SELECT MIN(a.value) FROM v_metric_history a WHERE a.run_id = r.id AND a.metric = 'agreement') AS agreement,
    (SELECT COUNT(*) FROM v_metric_history c WHERE c.run_id = r.id) AS metric_count,
    CASE WHEN r.status <> 'ok' THEN 'failed'
         WHEN r.preflight_status = 'noisy' THEN 'noisy host'
         WHEN r.preflight_status = 'skipped' THEN 'unchecked host'
         -- The bench's own verdict (runs.validity has its reasons): noisy during measurement,
         -- a lenient preflight, too short, too few requests, prefix-cache hits, agreement.
         WHEN NOT r.valid THEN 'invalid measurement'
         ELSE 'valid' END AS validity
FROM runs r
WHERE NOT EXISTS (SELECT 1 FROM runs s WHERE s.supersedes_id = r.id)
