-- Roadmap board: every active row, gating rows first.
SELECT roadmap_row_id, title, status, value, target, reason, evaluated_at
FROM v_roadmap_status
ORDER BY CASE status WHEN 'GATING' THEN 0 WHEN 'INVALID' THEN 1 WHEN 'STALE' THEN 2 WHEN 'NO_DATA' THEN 3 ELSE 4 END,
         roadmap_row_id
