"""Figures as people read them: a unit-aware number format shared by the dashboard and the docs."""
from __future__ import annotations

import re
from datetime import datetime

from jobs.registry import METRICS

# Short labels for column headers and axis titles.
METRIC_LABELS = {
    "output_tok_s": "output tok/s", "total_tok_s": "total tok/s", "requests_s": "requests/s",
    "ttft_p50_s": "TTFT p50", "ttft_p99_s": "TTFT p99", "tpot_p50_s": "TPOT p50", "tpot_p99_s": "TPOT p99",
    "itl_p50_s": "ITL p50", "itl_p99_s": "ITL p99", "e2e_p50_s": "E2E p50", "e2e_p99_s": "E2E p99",
    "peak_gpu_mem_bytes": "peak GPU memory", "syncs_per_step": "syncs/step", "steps": "steps",
    "preemptions": "preemptions", "wall_s": "wall time", "agreement": "agreement",
}


# C0 and C1 control characters but tab and newline: text from the database (a run's reason,
# a host name) must not drive the reader's terminal or hide in a table.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    return CONTROL_CHARACTERS.sub("", text)


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def unit_of(metric: str, unit: str | None = None) -> str | None:
    """The unit the data gave, else the registry's (a row never measured has no unit in the data)."""
    return unit or (METRICS[metric].unit if metric in METRICS else None)


def _significant(value: float, digits: int = 4) -> str:
    text = f"{value:,.{digits}g}" if abs(value) < 10 ** digits else f"{value:,.0f}"
    return text.replace("e+0", "e").replace("e-0", "e-")


def format_value(value: float | None, unit: str | None) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return f"{_significant(value * 1000)} ms" if abs(value) < 1 else f"{_significant(value)} s"
    if unit == "bytes":
        for scale, name in ((2 ** 30, "GiB"), (2 ** 20, "MiB"), (2 ** 10, "KiB")):
            if abs(value) >= scale:
                return f"{_significant(value / scale)} {name}"
        return f"{value:,.0f} B"
    if unit == "fraction":
        return f"{value:.4f}"
    if unit in (None, "count"):
        return _significant(value)
    return f"{_significant(value)} {unit}"


def format_time(when: datetime | None) -> str:
    return "—" if when is None else when.strftime("%Y-%m-%d %H:%M")


def format_target(comparison: str, threshold: float, peer_engine: str | None, target: float | None,
                  unit: str | None) -> str:
    """'≤ 20 ms', or for a ratio row '≥ 1.1 × hf = 1,100 tok/s' (the absolute value once evaluated)."""
    sign = "≥" if comparison == ">=" else "≤"
    if peer_engine is None:
        return f"{sign} {format_value(threshold, unit)}"
    resolved = f" = {format_value(target, unit)}" if target is not None else ""
    return f"{sign} {threshold:g} × {peer_engine}{resolved}"
