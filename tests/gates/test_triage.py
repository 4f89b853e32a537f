"""Triage's records on both databases: a confirmed shift, a rejected one kept as noise,
and a bisect's verdict that names its probes and runs."""
from sqlalchemy import select

from jobs.gates.bisect import bisect
from jobs.gates.triage import record_culprit, record_shift_check
from jobs.store.models import Culprit, ShiftCheck

SERIES = "s" * 32
SHAS = [f"{i:040x}" for i in range(5)]


def figures(prefix: str, values: list[float]) -> dict[str, float]:
    return {f"{prefix}-{i}": v for i, v in enumerate(values)}


def test_a_confirmed_shift_and_a_noisy_one_are_both_kept(store):
    slow = [100.0, 101.0, 99.5, 100.5, 100.2]
    confirmed, test = record_shift_check(store, SERIES, "output_tok_s", "higher", SHAS[0], SHAS[4],
                                         figures("b", slow), figures("a", [91.0, 90.5, 92.0, 91.2, 90.8]))
    noise, _ = record_shift_check(store, SERIES, "output_tok_s", "higher", SHAS[0], SHAS[4],
                                  figures("b", slow), figures("a", [100.1, 99.7, 101.2, 100.4, 99.9]))
    assert test.confirmed and confirmed != noise
    with store.session() as session:
        rows = {r.id: r for r in session.scalars(select(ShiftCheck))}
    assert rows[confirmed].verdict == "confirmed" and rows[noise].verdict == "noise"
    assert rows[confirmed].after_run_ids == ["a-0", "a-1", "a-2", "a-3", "a-4"]
    assert -0.1 < rows[confirmed].change < -0.08 and rows[confirmed].pvalue < 0.01


def test_a_culprit_names_its_commits_probes_and_runs(store):
    check, _ = record_shift_check(store, SERIES, "output_tok_s", "higher", SHAS[0], SHAS[4],
                                  figures("b", [100.0] * 4 + [100.5]), figures("a", [90.0] * 4 + [90.5]))
    good, bad = [100.0] * 5, [90.0] * 5
    result = bisect(SHAS, good, bad, lambda sha: None if sha == SHAS[1] else [90.0 if sha >= SHAS[3] else 100.0],
                    max_runs=10, runs_per_probe=1)
    culprit = record_culprit(store, SERIES, "output_tok_s", result, good, bad,
                             {SHAS[2]: ["run-2"], SHAS[3]: ["run-3"]}, shift_check_id=check)
    with store.session() as session:
        row = session.get(Culprit, culprit)
        assert (row.first_bad_sha, row.last_good_sha, row.stopped, row.candidates) == (SHAS[3], SHAS[2], "found",
                                                                                       [SHAS[3]])
        assert [(p["sha"], p["verdict"], p["run_ids"]) for p in row.probes] == [(SHAS[2], "good", ["run-2"]),
                                                                              (SHAS[3], "bad", ["run-3"])]
        assert row.shift_check_id == check and row.median_bad == 90.0 and row.runs == 2
