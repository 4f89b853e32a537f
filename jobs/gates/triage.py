"""Regression triage's records: a shift check (confirmed or noise) and a culprit (a bisect's
verdict), each one append-only row that names the runs it rests on.

The measuring is the caller's (the bisect DAG's tasks run `bench --ref` under the GPU lease
and the preflight, and each run lands in the store as ordinary evidence); these functions
test and record what was measured.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict

from jobs.gates.bisect import BisectResult
from jobs.gates.confirm import ShiftTest, confirm_shift
from jobs.store.db import Store
from jobs.store.models import Culprit, ShiftCheck


def record_shift_check(store: Store, series: str, metric: str, better: str, before_sha: str, after_sha: str,
                       before: dict[str, float], after: dict[str, float],
                       change_point_id: int | None = None) -> tuple[int, ShiftTest]:
    """Tests the re-measured figures (run id -> value, each side) and records the verdict;
    returns the shift check's id and the test."""
    result = confirm_shift(list(before.values()), list(after.values()), better)
    with store.session() as session, session.begin():
        check = ShiftCheck(change_point_id=change_point_id, series=series, metric=metric, better=better,
                           before_sha=before_sha, after_sha=after_sha, before_run_ids=list(before),
                           after_run_ids=list(after), median_before=result.median_before,
                           median_after=result.median_after, change=result.change, change_low=result.change_low,
                           change_high=result.change_high, pvalue=result.pvalue,
                           rank_biserial=result.rank_biserial,
                           verdict="confirmed" if result.confirmed else "noise")
        session.add(check)
        session.flush()
        return check.id, result


def record_culprit(store: Store, series: str, metric: str, result: BisectResult, good: list[float],
                   bad: list[float], probe_run_ids: dict[str, list[str]],
                   shift_check_id: int | None = None) -> int:
    """Records a bisect's verdict; `probe_run_ids` names each probed commit's runs."""
    probes = [{**asdict(p), "figures": list(p.figures) if p.figures else None,
               "run_ids": probe_run_ids.get(p.sha, [])} for p in result.probes]
    with store.session() as session, session.begin():
        culprit = Culprit(shift_check_id=shift_check_id, series=series, metric=metric,
                          last_good_sha=result.last_good, first_bad_sha=result.first_bad, stopped=result.stopped,
                          candidates=result.candidates, median_good=statistics.median(good),
                          median_bad=statistics.median(bad), probes=probes, runs=result.runs)
        session.add(culprit)
        session.flush()
        return culprit.id
