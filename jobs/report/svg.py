"""Plots as inline SVG strings: no script, no fonts or files to fetch, so the page opens from disk.

Every plot is an <svg class="plot ..."> whose data-marks attribute says how many
marks (points, boxes) it should show, so a test can check that they rendered.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape

import numpy as np

from jobs.report.format import format_time, format_value

WIDTH, HEIGHT = 760, 200
LEFT, RIGHT, TOP, BOTTOM = 78, 16, 12, 28
EMPTY_HEIGHT = 40


@dataclass(frozen=True)
class Scale:
    """Maps a data interval onto a pixel interval (log10 when `log`); takes numbers or numpy arrays."""
    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def __call__(self, v):
        lo, hi = (np.log10(self.lo), np.log10(self.hi)) if self.log else (self.lo, self.hi)
        v = np.log10(v) if self.log else v
        return self.px_lo + (v - lo) / (hi - lo) * (self.px_hi - self.px_lo)


def padded(lo: float, hi: float) -> tuple[float, float]:
    """A range with some room around the data; a flat series gets a band around its value."""
    if hi == lo:
        pad = abs(lo) * 0.05 or 1.0
        return lo - pad, hi + pad
    pad = (hi - lo) * 0.06
    return lo - pad, hi + pad


def nice_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    step = 10 ** math.floor(math.log10((hi - lo) / count))
    for factor in (1, 2, 2.5, 5, 10):
        if (hi - lo) / (step * factor) <= count:
            step *= factor
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def _seconds(when: datetime) -> float:
    return when.replace(tzinfo=timezone.utc).timestamp()  # the store keeps naive UTC


def _text(x: float, y: float, label: str, anchor: str = "middle", cls: str = "tick") -> str:
    return f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(label)}</text>'


def _polyline(xs: np.ndarray, ys: np.ndarray, cls: str) -> str:
    # One %-format over all coordinates: a plot of 5 years of nightlies has ~2,000 points.
    coords = " ".join(["%.1f,%.1f"] * len(xs)) % tuple(np.column_stack([xs, ys]).ravel().tolist())
    return f'<polyline class="{cls}" points="{coords}"/>'


def _defined_runs(ys: np.ndarray) -> list[slice]:
    """Slices of consecutive defined (non-NaN) values: a ratio target is undefined where the peer never ran."""
    defined = np.concatenate([[False], ~np.isnan(ys), [False]])
    edges = np.flatnonzero(np.diff(defined.astype(np.int8)))
    return [slice(start, stop) for start, stop in zip(edges[::2], edges[1::2])]


def _target_lines(xs: np.ndarray, ys: np.ndarray) -> list[str]:
    """The target through each run of defined values, held level out to halfway to the neighbouring
    points, and to the plot's edges past the first and last: a lone target is a line, not a dash."""
    bounds = np.concatenate([[LEFT], (xs[:-1] + xs[1:]) / 2, [WIDTH - RIGHT]])  # point i spans bounds[i:i + 2]
    lines = []
    for run in _defined_runs(ys):
        run_xs = np.concatenate([[bounds[run.start]], xs[run], [bounds[run.stop]]])
        run_ys = np.concatenate([[ys[run.start]], ys[run], [ys[run.stop - 1]]])
        lines.append(_polyline(run_xs, run_ys, "target"))
    return lines


def history_plot(row_id: str, points: list, change_points: list, evidence_run_id: str | None,
                 unit: str | None, label: str) -> str:
    """One roadmap row's metric over time, its target, and the change points detected in it.

    `points` have .started_at, .value, .target, .run_id (oldest first); `change_points`
    have .after_started_at, .is_regression, .change_percent, .mean_before, .mean_after.
    """
    height = HEIGHT if points else EMPTY_HEIGHT
    head = (f'<svg class="plot history" data-row="{escape(row_id)}" data-marks="{len(points)}" '
            f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
            f'aria-label="{escape(label)}">')
    if not points:
        return head + _text(WIDTH / 2, height / 2 + 4, "no measurements yet", cls="empty") + "</svg>"
    times = (np.array([p.started_at for p in points], dtype="datetime64[us]").astype(np.int64) / 1e6)
    values = np.array([p.value for p in points], dtype=float)
    targets = np.array([np.nan if p.target is None else p.target for p in points], dtype=float)
    t_lo, t_hi = float(times[0]), float(times[-1])
    if t_lo == t_hi:
        t_lo, t_hi = t_lo - 86400, t_hi + 86400
    x = Scale(t_lo, t_hi, LEFT, WIDTH - RIGHT)
    y = Scale(*padded(float(min(values.min(), np.nanmin(targets, initial=np.inf))),
                      float(max(values.max(), np.nanmax(targets, initial=-np.inf)))), HEIGHT - BOTTOM, TOP)
    xs, value_ys, target_ys = x(times), y(values), y(targets)
    parts = [head, f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
                   f'height="{HEIGHT - TOP - BOTTOM}"/>']
    for tick in nice_ticks(y.lo, y.hi):
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>')
        parts.append(_text(LEFT - 6, y(tick) + 4, format_value(tick, unit), anchor="end"))
    date_format = "%Y-%m-%d" if t_hi - t_lo > 5 * 86400 else "%m-%d %H:%M"  # a short span needs the hours
    for i in range(5):
        t = t_lo + (t_hi - t_lo) * i / 4
        parts.append(_text(x(t), HEIGHT - 8, datetime.fromtimestamp(t, timezone.utc).strftime(date_format),
                           anchor=("start", "middle", "middle", "middle", "end")[i]))
    for cp in change_points:
        cx = x(min(max(_seconds(cp.after_started_at), t_lo), t_hi))
        kind = "regression" if cp.is_regression else "improvement"
        parts.append(
            f'<line class="change-point {kind}" x1="{cx:.1f}" x2="{cx:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}">'
            f'<title>{kind} {cp.change_percent:+.1f}% ({format_value(cp.mean_before, unit)} → '
            f'{format_value(cp.mean_after, unit)}) from {format_time(cp.after_started_at)}</title></line>')
    parts += _target_lines(xs, target_ys)
    parts.append(_polyline(xs, value_ys, "series"))
    if len(points) <= 60:  # few enough to mark each one
        parts += [f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="2.5"><title>'
                  f'{escape(format_value(p.value, unit))} · {format_time(p.started_at)} · run {escape(p.run_id)}'
                  f'</title></circle>' for px, py, p in zip(xs, value_ys, points)]
    for px, py, p in zip(xs, value_ys, points):
        if p.run_id == evidence_run_id:
            parts.append(f'<circle class="evidence" cx="{px:.1f}" cy="{py:.1f}" r="4.5"><title>evidence: '
                         f'{escape(format_value(p.value, unit))} · run {escape(p.run_id)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


LATENCY_ROW = 26


def latency_plot(latency: str, rows: list) -> str:
    """Box per (workload, hardware, engine): p50 to p90 boxed, whisker to p99, a dot at the mean.

    `rows` have .workload, .hardware_class, .engine, .p50, .p90, .p99, .mean, .count, .run_id.
    A log axis when the figures span more than 30x (CPU and GPU runs side by side).
    """
    rows = [r for r in rows if r.p50 is not None and r.p99 is not None]
    height = TOP + BOTTOM + LATENCY_ROW * len(rows) if rows else EMPTY_HEIGHT
    left = 230
    head = (f'<svg class="plot latency" data-latency="{escape(latency)}" data-marks="{len(rows)}" '
            f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" '
            f'aria-label="{escape(latency)} distribution">')
    if not rows:
        return head + _text(WIDTH / 2, height / 2, "no measurements yet", cls="empty") + "</svg>"
    values = [v for r in rows for v in (r.p50, r.p90, r.p99, r.mean) if v is not None]
    lo, hi = min(values), max(values)
    log = lo > 0 and hi / lo > 30
    x = Scale(lo / 1.3, hi * 1.3, left, WIDTH - RIGHT, log=True) if log else Scale(
        *padded(min(0.0, lo), hi), left, WIDTH - RIGHT)
    parts = [head]
    ticks = [10.0 ** e for e in range(math.floor(math.log10(x.lo)), math.ceil(math.log10(x.hi)) + 1)
             if x.lo <= 10.0 ** e <= x.hi] if log else nice_ticks(x.lo, x.hi)
    for tick in ticks:
        parts.append(f'<line class="grid" x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP}" y2="{height - BOTTOM}"/>')
        parts.append(_text(x(tick), height - 8, format_value(tick, "s")))
    for i, r in enumerate(rows):
        top = TOP + i * LATENCY_ROW
        mid = top + LATENCY_ROW / 2
        p90 = r.p90 if r.p90 is not None else r.p50
        tip = (f"{r.workload} · {r.hardware_class} · {r.engine}: p50 {format_value(r.p50, 's')}, "
               f"p90 {format_value(r.p90, 's')}, p99 {format_value(r.p99, 's')}, mean {format_value(r.mean, 's')}, "
               f"{r.count} samples · run {r.run_id}")
        parts.append(_text(left - 8, mid + 4, f"{r.workload} · {r.hardware_class} · {r.engine}", anchor="end",
                           cls="label"))
        parts.append(f'<line class="whisker" x1="{x(p90):.1f}" x2="{x(r.p99):.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>')
        parts.append(f'<rect class="box" x="{x(r.p50):.1f}" y="{top + 5:.1f}" '
                     f'width="{max(x(p90) - x(r.p50), 1.5):.1f}" height="{LATENCY_ROW - 10}"><title>{escape(tip)}</title></rect>')
        parts.append(f'<line class="p99" x1="{x(r.p99):.1f}" x2="{x(r.p99):.1f}" y1="{top + 7:.1f}" '
                     f'y2="{top + LATENCY_ROW - 7:.1f}"/>')
        if r.mean is not None:
            parts.append(f'<circle class="mean" cx="{x(r.mean):.1f}" cy="{mid:.1f}" r="3"/>')
    parts.append("</svg>")
    return "".join(parts)


