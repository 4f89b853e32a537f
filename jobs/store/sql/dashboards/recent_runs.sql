-- The 50 newest current runs and whether each can be trusted.
SELECT started_at, run_id, kind, workload, hardware_class, validity, run_status, preflight_status,
       agreement, metric_count, git_sha, code_hash, airflow_run_id
FROM v_run_validity
ORDER BY started_at DESC, run_id
LIMIT 50
