"""Confirm a shift before blaming a commit: is one set of figures really worse than another?

A change point found in nightly history rests on one run each side. Before a bisect
spends bench runs on it, the run before and the run after are measured again, several
times each and interleaved on one host (`interleaved`), and the two samples are tested:

* Mann–Whitney's U, one-sided in the regression direction: no assumption that bench
  noise is normal (it is skewed: a host hiccup only ever slows a run down);
* the effect as the change of the median (what a person reads: "-8%"), with a bootstrap
  95% interval, and as the rank-biserial correlation (1: every after-figure is worse than
  every before-figure; 0: the samples interleave).

A shift is confirmed when p < alpha and the median moved at least `min_magnitude` the
wrong way. Anything else is noise, and is recorded as such.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from scipy.stats import mannwhitneyu

ALPHA = 0.01
MIN_MAGNITUDE = 0.03         # below the 5% a change point needs, so a real 5% shift is confirmed
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class ShiftTest:
    n_before: int
    n_after: int
    median_before: float
    median_after: float
    change: float            # median_after / median_before - 1
    change_low: float        # bootstrap 95% interval of `change`
    change_high: float
    pvalue: float            # one-sided Mann–Whitney U, "after is worse"
    rank_biserial: float     # in [-1, 1]; > 0: after tends to be worse
    confirmed: bool


def smallest_pvalue(n_before: int, n_after: int) -> float:
    """The smallest one-sided p Mann–Whitney can give for these sample sizes (complete separation)."""
    return 1 / math.comb(n_before + n_after, n_before)


def confirm_shift(before: list[float], after: list[float], better: str, alpha: float = ALPHA,
               min_magnitude: float = MIN_MAGNITUDE, seed: int = 0) -> ShiftTest:
    """Whether `after` is worse than `before` for a metric where `better` is 'higher' or 'lower'."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', not {better!r}")
    if smallest_pvalue(len(before), len(after)) >= alpha:
        raise ValueError(f"{len(before)} and {len(after)} figures can never give p < {alpha}: "
                         "measure each side more often (5 and 5 reach 0.004)")
    if any(not math.isfinite(v) or v <= 0 for v in (*before, *after)):
        raise ValueError("figures must be finite and positive")
    # "Worse" is smaller for a higher-is-better metric: test after < before.
    worse = "less" if better == "higher" else "greater"
    u, pvalue = mannwhitneyu(after, before, alternative=worse, method="exact")
    # U counts the pairs with after above before; rank-biserial = 2U/(n1 n2) - 1, signed so > 0 is worse.
    above = 2 * u / (len(before) * len(after)) - 1
    rank_biserial = -above if better == "higher" else above
    median_before, median_after = statistics.median(before), statistics.median(after)
    change = median_after / median_before - 1
    low, high = _bootstrap_change(before, after, seed)
    worse_by = -change if better == "higher" else change
    return ShiftTest(len(before), len(after), median_before, median_after, change, low, high, float(pvalue),
                     rank_biserial, bool(pvalue < alpha and worse_by >= min_magnitude))


def _bootstrap_change(before: list[float], after: list[float], seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    changes = sorted(statistics.median(rng.choices(after, k=len(after)))
                     / statistics.median(rng.choices(before, k=len(before))) - 1
                     for _ in range(BOOTSTRAP_RESAMPLES))
    return changes[int(0.025 * len(changes))], changes[int(0.975 * len(changes)) - 1]


def interleaved(repetitions: int) -> list[str]:
    """The order to measure two sides in, 'before'/'after', each `repetitions` times: the
    side that goes first flips every pair (B A A B B A ...), so a host whose speed drifts
    steadily during the measurement slows both sides alike."""
    if repetitions < 1:
        raise ValueError("repetitions must be at least 1")
    pairs = [("before", "after") if i % 2 == 0 else ("after", "before") for i in range(repetitions)]
    return [side for pair in pairs for side in pair]
