-- Every current metric with its run: rows superseded by a correction (of the
-- metric or of its whole run) are hidden here and kept in the tables.
-- series: what the figure is compared within (jobs/store/ingest.py series_identity).
-- Rows recorded before series existed (migration 0004) derive theirs from the run's
-- fingerprint and the engine, as change points were then found: history is not edited.
-- Re-measurements of older commits (bench --ref, kind 'bench-at-ref': regression triage)
-- are left out: they are the evidence of their shift checks and culprits, but in history
-- they would sit at the hour they ran among later commits' figures, and move gates and
-- change points.
SELECT
    m.id AS metric_id,
    m.run_id,
    r.kind,
    r.status AS run_status,
    r.workload,
    r.hardware_class,
    r.fingerprint,
    r.started_at,
    r.finished_at,
    r.git_sha,
    r.git_dirty,
    r.preflight_status,
    r.parquet_uri,
    m.engine,
    COALESCE(m.series, 'run:' || r.fingerprint || ':' || m.engine) AS series,
    r.code_hash,
    m.metric,
    m.unit,
    m.better,
    m.value,
    m.count,
    m.p50,
    m.p90,
    m.p99,
    m.mean,
    m.std
FROM metrics m
JOIN runs r ON r.id = m.run_id
WHERE r.kind <> 'bench-at-ref'
  AND NOT EXISTS (SELECT 1 FROM metrics s WHERE s.supersedes_id = m.id)
  AND NOT EXISTS (SELECT 1 FROM runs s WHERE s.supersedes_id = r.id)
