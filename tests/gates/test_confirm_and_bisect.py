"""Regression triage's two decisions without a bench: is a shift real (confirm_shift), and
which commit made it (bisect). The measurements here are figures made up for each case;
the chain on real bench runs is exercised by the bisect DAG's test."""
import random

import pytest

from jobs.gates.bisect import bisect
from jobs.gates.confirm import confirm_shift, interleaved, smallest_pvalue


def noisy(level: float, n: int, seed: int, spread: float = 0.01) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_an_eight_percent_drop_is_confirmed_with_its_size():
    result = confirm_shift(noisy(100, 6, 1), noisy(92, 6, 2), better="higher")
    assert result.confirmed and result.pvalue < 0.01 and result.rank_biserial == 1.0
    assert -0.10 < result.change < -0.06 and result.change_low <= result.change <= result.change_high < 0


def test_lower_is_better_metrics_regress_upwards():
    assert confirm_shift(noisy(2.0, 6, 3), noisy(2.2, 6, 4), better="lower").confirmed
    assert not confirm_shift(noisy(2.0, 6, 3), noisy(1.8, 6, 4), better="lower").confirmed   # an improvement


def test_noise_and_tiny_shifts_are_not_confirmed():
    same = confirm_shift(noisy(100, 6, 5, spread=0.05), noisy(100, 6, 6, spread=0.05), better="higher")
    assert not same.confirmed and same.pvalue > 0.01
    tiny = confirm_shift(noisy(100, 8, 7, spread=0.001), noisy(99, 8, 8, spread=0.001), better="higher")
    assert tiny.pvalue < 0.01 and not tiny.confirmed          # significant, but under the 3% that matters


def test_too_few_figures_are_refused_before_testing():
    assert smallest_pvalue(5, 5) == pytest.approx(1 / 252)
    with pytest.raises(ValueError, match="never give p < 0.01"):
        confirm_shift([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], better="higher")
    with pytest.raises(ValueError, match="finite and positive"):
        confirm_shift([1.0] * 5 + [float("nan")], [2.0] * 6, better="higher")
    with pytest.raises(ValueError, match="better"):
        confirm_shift([1.0] * 6, [2.0] * 6, better="up")


def test_sides_alternate_which_goes_first():
    assert interleaved(3) == ["before", "after", "after", "before", "before", "after"]


def planted(commits: list[str], culprit: str, skip=()):
    """A measure() over commits where `culprit` and everything after it is 10% slower."""
    calls = []

    def measure(sha):
        calls.append(sha)
        if sha in skip:
            return None
        level = 90.0 if commits.index(sha) >= commits.index(culprit) else 100.0
        return noisy(level, 3, seed=len(calls))
    return measure, calls


COMMITS = [f"c{i}" for i in range(9)]      # c0 last good, c8 first bad run: 8 commits to search


@pytest.mark.parametrize("culprit", COMMITS[1:])
def test_bisect_finds_the_planted_commit_in_log2_probes(culprit):
    measure, calls = planted(COMMITS, culprit)
    result = bisect(COMMITS, noisy(100, 5, 0), noisy(90, 5, 0), measure, max_runs=100, runs_per_probe=3)
    assert result.found and result.first_bad == culprit and result.candidates == [culprit]
    assert result.last_good == COMMITS[COMMITS.index(culprit) - 1]
    assert len(calls) <= 3 and result.runs == 3 * len(calls)       # ceil(log2 8) probes at most


def test_a_commit_that_cannot_run_is_skipped_and_a_neighbour_probed():
    measure, calls = planted(COMMITS, "c6", skip={"c4"})
    result = bisect(COMMITS, [100.0] * 5, [90.0] * 5, measure, max_runs=100, runs_per_probe=3)
    assert result.found and result.first_bad == "c6" and result.last_good == "c5"
    assert [p.verdict for p in result.probes] == ["skip", "good", "good", "bad"] and calls[0] == "c4"
    assert result.runs == 1 + 3 * 3


def test_only_skipped_commits_left_reports_the_range():
    measure, _ = planted(COMMITS, "c5", skip={"c4"})       # as git bisect: c4 or c5 is the first bad one
    result = bisect(COMMITS, [100.0] * 5, [90.0] * 5, measure, max_runs=100, runs_per_probe=3)
    assert result.stopped == "skipped" and not result.found
    assert (result.last_good, result.first_bad, result.candidates) == ("c3", "c5", ["c4", "c5"])


def test_the_budget_stops_the_bisect_and_says_where():
    measure, calls = planted(COMMITS, "c6")
    result = bisect(COMMITS, [100.0] * 5, [90.0] * 5, measure, max_runs=4, runs_per_probe=3)
    assert result.stopped == "budget" and len(calls) == 1 and result.runs == 3
    assert result.candidates == COMMITS[5:] and result.last_good == "c4"
