"""Bisect a confirmed regression to the first commit that shows it.

As `git bisect` over the first-parent commits between the last good and the first bad
run: each probe measures one commit (`measure`, a few bench runs of it) and calls it bad
when its median lies nearer the bad end's median than the good end's; a commit that
cannot be built or run is skipped, as `git bisect skip` does, and a neighbour is probed
instead. The bisect stops at a budget of bench runs and says where it stopped: the
commits that may still be the first bad one.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Probe:
    sha: str
    figures: tuple[float, ...] | None    # None: it could not be built or run
    verdict: str                         # good, bad or skip


@dataclass
class BisectResult:
    last_good: str
    first_bad: str
    stopped: str                         # found, budget (runs spent) or skipped (only skipped commits left)
    candidates: list[str]                # commits that may be the first bad one, oldest first
    probes: list[Probe] = field(default_factory=list)
    runs: int = 0

    @property
    def found(self) -> bool:
        return self.stopped == "found"


def bisect(commits: list[str], good: list[float], bad: list[float],
           measure: Callable[[str], list[float] | None], max_runs: int, runs_per_probe: int) -> BisectResult:
    """`commits`, oldest first: commits[0] ran as `good`, commits[-1] as `bad`; `measure(sha)`
    returns runs_per_probe figures of one commit, or None when it cannot be built or run."""
    if len(commits) < 2:
        raise ValueError("a bisect needs the last good and the first bad commit")
    if runs_per_probe < 1 or max_runs < 0:
        raise ValueError("runs_per_probe must be at least 1 and max_runs at least 0")
    good_median, bad_median = statistics.median(good), statistics.median(bad)
    if good_median == bad_median:
        raise ValueError("the good and the bad figures have one median: nothing to bisect")
    lo, hi = 0, len(commits) - 1          # known good, known bad
    skipped: set[int] = set()
    result = BisectResult(commits[lo], commits[hi], "found", [])
    while hi - lo > 1:
        index = _next_probe(lo, hi, skipped)
        if index is None:
            result.stopped = "skipped"
            break
        if result.runs + runs_per_probe > max_runs:
            result.stopped = "budget"
            break
        figures = measure(commits[index])
        if figures is None:
            skipped.add(index)
            result.runs += 1                 # the attempt that failed
            result.probes.append(Probe(commits[index], None, "skip"))
            continue
        result.runs += len(figures)
        median = statistics.median(figures)
        is_bad = abs(median - bad_median) < abs(median - good_median)
        result.probes.append(Probe(commits[index], tuple(figures), "bad" if is_bad else "good"))
        if is_bad:
            hi = index
        else:
            lo = index
    result.last_good, result.first_bad = commits[lo], commits[hi]
    result.candidates = commits[lo + 1:hi + 1]
    return result


def _next_probe(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The unskipped commit strictly between lo and hi nearest their middle, or None."""
    middle = (lo + hi) / 2
    inside = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(inside, key=lambda i: (abs(i - middle), i)) if inside else None
