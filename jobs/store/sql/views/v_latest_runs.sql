-- The newest current run of each kind per fingerprint (workload + hardware + engine config).
SELECT r.*
FROM runs r
WHERE NOT EXISTS (SELECT 1 FROM runs s WHERE s.supersedes_id = r.id)
  AND NOT EXISTS (
    SELECT 1 FROM runs n
    WHERE n.fingerprint = r.fingerprint
      AND n.kind = r.kind
      AND (n.started_at > r.started_at OR (n.started_at = r.started_at AND n.id > r.id))
      AND NOT EXISTS (SELECT 1 FROM runs s2 WHERE s2.supersedes_id = n.id)
  )
