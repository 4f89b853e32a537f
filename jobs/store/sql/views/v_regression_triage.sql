-- Regression triage's verdicts (the bisect_regression DAG): each shift check (a change
-- point's two commits, or two named by hand, re-measured interleaved and tested) with
-- the change the detector saw, and its bisect's outcome where one ran (a confirmed shift).
SELECT
    s.id AS shift_check_id,
    s.change_point_id,
    cp.change_percent AS detected_change_percent,
    s.checked_at,
    s.series,
    s.metric,
    s.before_sha AS good_sha,
    s.after_sha AS bad_sha,
    s.median_before,
    s.median_after,
    s.change,
    s.change_low,
    s.change_high,
    s.pvalue,
    s.rank_biserial,
    s.verdict,
    c.id AS culprit_id,
    c.stopped AS bisect_stopped,
    c.last_good_sha,
    c.first_bad_sha,
    c.runs AS bisect_runs
FROM shift_checks s
LEFT JOIN culprits c ON c.shift_check_id = s.id
LEFT JOIN change_points cp ON cp.id = s.change_point_id
