"""The static HTML dashboard: one self-contained file, read only from the SQL views.

Roadmap table, a history plot per roadmap row (with its target and the change
points found in its series), the regressions found with their triage verdicts,
latency distributions per engine and workload, and the recent runs with their validity. Plots are inline SVG; the one script only
filters the roadmap table, so the page works from disk with no network.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from html import escape
from pathlib import Path

from jobs.atomic import atomic_write_texts
from jobs.report.format import format_target, format_time, format_value, metric_label, unit_of
from jobs.report.queries import (SUPERSEDED_NOTE, DashboardData, age_days, evidence_superseded, load_dashboard_data,
                                 series_of)
from jobs.report.svg import history_plot, latency_plot
from jobs.store.db import Store
from jobs.store.models import utcnow

LATENCY_KINDS = [("ttft", "Time to first token (TTFT)"), ("tpot", "Time per output token (TPOT)"),
                 ("itl", "Inter-token latency (ITL)")]
RECENT_RUNS = 30
INDEX = "index.html"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d232a; max-width: 1400px; }
h1 { font-size: 22px; margin-bottom: 2px; } h2 { margin-top: 32px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 15px; margin: 18px 0 4px; } .meta { color: #57606a; }
table { border-collapse: collapse; width: 100%; } th, td { padding: 4px 8px; border-bottom: 1px solid #eaeef2;
  text-align: left; vertical-align: top; } th { background: #f6f8fa; } td.num { text-align: right; white-space: nowrap; }
td.when { white-space: nowrap; }
code { font-size: 12px; } .status { font-weight: 600; padding: 1px 6px; border-radius: 4px; }
.PASS { background: #dafbe1; color: #116329; } .GATING { background: #ffebe9; color: #a40e26; }
.STALE { background: #fff8c5; color: #7d4e00; } .INVALID { background: #fbefff; color: #6e40c9; }
.NO_DATA { background: #eaeef2; color: #57606a; } .old { color: #a40e26; font-weight: 600; }
.valid { color: #116329; } .failed, .noisy-host { color: #a40e26; } .unchecked-host { color: #7d4e00; }
svg.plot { display: block; background: #fff; } svg .frame { fill: none; stroke: #d0d7de; }
svg .grid { stroke: #eaeef2; } svg .tick, svg .label, svg .empty { font-size: 11px; fill: #57606a; }
svg .series { fill: none; stroke: #0969da; stroke-width: 1.2; } svg .point { fill: #0969da; }
svg .target { fill: none; stroke: #cf222e; stroke-width: 1; stroke-dasharray: 5 3; }
svg .evidence { fill: none; stroke: #1d232a; stroke-width: 2; }
svg .change-point { stroke-width: 1.5; stroke-dasharray: 2 2; } svg .regression { stroke: #cf222e; }
svg .improvement { stroke: #1a7f37; } svg .box { fill: #b6e3ff; stroke: #0969da; }
svg .whisker, svg .p99 { stroke: #0969da; } svg .mean { fill: #1d232a; }
.legend { color: #57606a; font-size: 12px; }
.confirmed { color: #a40e26; font-weight: 600; } .noise, .not { color: #57606a; }
"""

# Hides PASS rows on demand; nothing on the page depends on it running.
SCRIPT = """
document.getElementById('only-open').addEventListener('change', function (event) {
  document.querySelectorAll('#roadmap tbody tr').forEach(function (row) {
    row.hidden = event.target.checked && row.dataset.status === 'PASS';
  });
});
"""


# Each table's columns: the header (with the unit where its cells share one) and, on hover, what it holds.
ROADMAP_COLUMNS = [
    ("Roadmap row", "the row's id in the roadmap file (a link to its history plot) and its title"),
    ("Gate status", "PASS: the evidence meets the threshold; GATING: it does not; STALE: the evidence is older "
                    "than the row allows; INVALID: the evidence run cannot be trusted for this row; "
                    "NO_DATA: no run measured it"),
    ("Latest value", "the row's metric in its evidence run, in the metric's unit"),
    ("Threshold", "what the value must reach, in the metric's unit: a figure, or a multiple of the peer "
                  "engine's figure in the same run (= what that came to)"),
    ("Evidence run (id)", "the run the status rests on: the first 8 characters of its id (hover for all)"),
    ("Evidence age (days)", "since the evidence run finished; red when older than the row allows"),
    ("Reason", "why the row has its status"),
]
RUNS_COLUMNS = [
    ("Started (UTC)", "when the run started"),
    ("Run (id)", "the first 8 characters of the run's id (hover for all)"),
    ("Kind · workload · hardware", "bench or generate (a batch); the workload it ran; the hardware class"),
    ("Validity", "whether its figures can be trusted: failed, noisy host, unchecked host (no preflight), "
                 "invalid measurement (the bench's own verdict), or valid"),
    ("Run status", "how the run ended: ok, or how it failed"),
    ("Preflight", "the host's load before the run: quiet, noisy, or skipped (not checked)"),
    ("Lowest agreement (any engine, 0–1)", "the share of requests whose output matches the reference "
                                           "engine's token for token: the lowest among the engines of the run, "
                                           "peers included"),
    ("Duration (s)", "from start to finish"),
    ("Metrics (count)", "figures the run recorded"),
    ("Commit (git sha)", "the commit that ran, its first 10 hex digits; +dirty: with uncommitted changes"),
    ("Code hash (git tree)", "`git write-tree` of engine/, jobs/, cuda_src/ and dags/ as they were on disk: "
                             "names the code also where the commit cannot (a dirty or copied tree)"),
    ("Evidence for (row status)", "the roadmap rows whose status rests on this run"),
]

REGRESSION_COLUMNS = [
    ("Change point (id)", "the detected shift's id (roadgate gates regressions); — for two commits named by hand"),
    ("Series", "workload · hardware · engine: what the figure is compared within"),
    ("Metric", "the figure that moved"),
    ("Detected change (%)", "the shift change-point detection saw in the history, before any re-measurement"),
    ("Commits (good → bad)", "the last run's commit before the shift and the first after it, 10 hex digits"),
    ("Triage", "the shift re-measured (runs of both commits, interleaved) and tested: confirmed, noise, "
               "or not triaged yet"),
    ("Re-measured change (%)", "median after / median before − 1, with its bootstrap 95% interval"),
    ("p (Mann–Whitney)", "one-sided: how likely a shift this large is from noise"),
    ("First bad commit", "what the bisect found, or where it stopped (budget: runs spent; skipped: only "
                         "commits that could not be built or run were left)"),
]


def _head(columns: list[tuple[str, str]]) -> str:
    return "<thead><tr>" + "".join(f'<th title="{escape(tip)}">{escape(name)}</th>' for name, tip in columns) \
        + "</tr></thead>"


def _cell(value, cls: str = "") -> str:
    return f'<td class="{cls}">{escape(str(value))}</td>' if cls else f"<td>{escape(str(value))}</td>"


def _status(status: str) -> str:
    return f'<span class="status {escape(status)}">{escape(status)}</span>'


def _short_id(full: str | None, digits: int) -> str:
    """A run id, commit or code hash cut short, whole on hover; — where none was recorded."""
    return "—" if full is None else f'<code title="{escape(full)}">{escape(full[:digits])}</code>'


def _reason(r, host_class: str | None) -> str:
    if evidence_superseded(r):
        return f"{r.reason} ({SUPERSEDED_NOTE})"
    if r.status == "NO_DATA" and host_class and r.hardware_class != host_class:
        return f"not measurable on this host ({host_class}): measured on {r.hardware_class} hosts"
    return r.reason


def roadmap_table(board: list, now: datetime, host_class: str | None = None) -> str:
    rows = []
    for r in board:
        unit = unit_of(r.metric, r.unit)
        age = age_days(r, now)
        age_text = "—" if age is None else f"{age:.1f}"
        rows.append(
            f'<tr data-row="{escape(r.roadmap_row_id)}" data-status="{escape(r.status)}">'
            f'<td><a href="#plot-{escape(r.roadmap_row_id)}">{escape(r.roadmap_row_id)}</a>'
            f'<br><span class="meta">{escape(r.title)}</span></td>'
            f"<td>{_status(r.status)}</td>"
            + _cell(format_value(r.value, unit), "num")
            + _cell(format_target(r.comparison, r.threshold, r.peer_engine, r.target, unit), "num")
            + f"<td>{_short_id(r.run_id, 8)}</td>"
            + _cell(age_text, "num old" if age is not None and age > r.max_age_days else "num")
            + _cell(_reason(r, host_class))
            + "</tr>")
    return (
        '<label><input type="checkbox" id="only-open"> only rows that are not PASS</label>'
        f'<table id="roadmap">{_head(ROADMAP_COLUMNS)}<tbody>' + "".join(rows) + "</tbody></table>")


def history_section(data: DashboardData) -> str:
    changes = defaultdict(list)
    for cp in data.change_points:
        changes[series_of(cp)].append(cp)
    parts = ['<p class="legend">Blue: the measured value per run. Dashed red: the target. Vertical dashes: '
             'change points (red a regression, green an improvement). Ringed: the run the status rests on.</p>']
    for r in data.board:
        unit = unit_of(r.metric, r.unit)
        label = f"{r.roadmap_row_id}: {metric_label(r.metric)} of {r.engine} on {r.workload}/{r.hardware_class}"
        points = data.history[r.roadmap_row_id]
        parts.append(
            f'<h3 id="plot-{escape(r.roadmap_row_id)}">{escape(label)} {_status(r.status)}</h3>'
            f'<p class="meta">{escape(r.title)} · {len(points)} run{"" if len(points) == 1 else "s"} · threshold '
            f"{escape(format_target(r.comparison, r.threshold, r.peer_engine, r.target, unit))}</p>"
            + history_plot(r.roadmap_row_id, points, changes[series_of(r)], r.run_id, unit, label))
    return "".join(parts)


def regressions_table(data: DashboardData) -> str:
    """Each change point in the regression direction, newest first, beside its triage (a change point
    triaged twice shows both checks); then the checks asked for by hand."""
    checks = defaultdict(list)
    for t in data.triage:
        checks[t.change_point_id].append(t)
    rows = []
    for cp in sorted((c for c in data.change_points if c.is_regression), key=lambda c: c.change_point_id,
                     reverse=True):
        for t in checks.pop(cp.change_point_id, None) or [None]:
            rows.append(_regression_row(cp.change_point_id, f"{cp.workload} · {cp.hardware_class} · {cp.engine}",
                                        cp.metric, cp.change_percent, cp.before_git_sha, cp.after_git_sha, t))
    for t in checks.pop(None, []):
        rows.append(_regression_row(None, t.series[:12], t.metric, None, t.good_sha, t.bad_sha, t))
    if not rows:
        return '<p class="meta">No change point in the regression direction.</p>'
    return f'<table id="regressions">{_head(REGRESSION_COLUMNS)}<tbody>' + "".join(rows) + "</tbody></table>"


def _regression_row(change_point_id, series, metric, detected, good, bad, t) -> str:
    if t is None:
        triage, remeasured, pvalue, culprit = "not triaged yet", "—", "—", "—"
    else:
        triage, pvalue = f"{t.verdict} (check {t.shift_check_id})", f"{t.pvalue:.2g}"
        remeasured = f"{100 * t.change:+.1f} [{100 * t.change_low:+.1f}, {100 * t.change_high:+.1f}]"
        culprit = ("—" if t.bisect_stopped is None else t.first_bad_sha[:10] if t.bisect_stopped == "found"
                   else f"stopped: {t.bisect_stopped}")
    return ("<tr>" + _cell("—" if change_point_id is None else change_point_id, "num") + _cell(series)
            + _cell(metric_label(metric)) + _cell("—" if detected is None else f"{detected:+.1f}", "num")
            + f"<td>{_short_id(good, 10)} → {_short_id(bad, 10)}</td>" + _cell(triage, triage.split()[0])
            + _cell(remeasured, "num") + _cell(pvalue, "num") + _cell(culprit) + "</tr>")


def latency_section(data: DashboardData) -> str:
    parts = ['<p class="legend">From the newest run of each engine on each workload: the box spans p50 to p90, '
             'the whisker reaches p99, the dot is the mean.</p>']
    for kind, title in LATENCY_KINDS:
        rows = [r for r in data.latencies if r.latency == kind]
        parts.append(f"<h3>{escape(title)}</h3>" + latency_plot(kind, rows))
    return "".join(parts)


def runs_table(data: DashboardData) -> str:
    verdicts = defaultdict(list)
    for r in data.board:
        if r.run_id:
            verdicts[r.run_id].append(f"{r.roadmap_row_id} {r.status}")
    rows = []
    for run in data.recent_runs:
        duration = (f"{(run.finished_at - run.started_at).total_seconds():,.0f}"
                    if run.finished_at else "—")
        rows.append(
            f'<tr data-run="{escape(run.run_id)}">'
            + _cell(format_time(run.started_at), "when")
            + f"<td>{_short_id(run.run_id, 8)}</td>"
            + _cell(f"{run.kind} · {run.workload} · {run.hardware_class}")
            + _cell(run.validity, run.validity.replace(" ", "-"))
            + _cell(run.run_status) + _cell(run.preflight_status)
            + _cell(format_value(run.agreement, "fraction"), "num") + _cell(duration, "num")
            + _cell(run.metric_count, "num")
            + f"<td>{_short_id(run.git_sha, 10)}{'+dirty' if run.git_dirty else ''}</td>"
            + f"<td>{_short_id(run.code_hash, 10)}</td>"
            + _cell("; ".join(verdicts[run.run_id]) or "—")
            + "</tr>")
    return f'<table id="runs">{_head(RUNS_COLUMNS)}<tbody>' + "".join(rows) + "</tbody></table>"


def dashboard_html(data: DashboardData, now: datetime, host_class: str | None = None) -> str:
    counts = defaultdict(int)
    for r in data.board:
        counts[r.status] += 1
    summary = " · ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no roadmap rows"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>roadgate dashboard</title><style>{STYLE}</style></head><body>"
        f'<h1>roadgate dashboard</h1><p class="meta">Generated {format_time(now)} UTC from the results '
        f"store's SQL views · {escape(summary)}</p>"
        f'<h2 id="roadmap-status">Roadmap</h2>{roadmap_table(data.board, now, host_class)}'
        f'<h2 id="history">History per roadmap row</h2>{history_section(data)}'
        f'<h2 id="regressions">Regressions and their triage</h2>{regressions_table(data)}'
        f'<h2 id="latency">Latency distributions</h2>{latency_section(data)}'
        f'<h2 id="recent-runs">Recent runs</h2>{runs_table(data)}'
        f"<script>{SCRIPT}</script></body></html>\n")


def render_dashboard(store: Store, out_dir: str | Path, now: datetime | None = None,
                     recent_runs: int = RECENT_RUNS, host_class: str | None = None) -> Path:
    """Writes OUT_DIR/index.html from the store's views; returns its path. The file appears whole or not at all.
    A row without data that `host_class` (default: this host's) cannot measure says so instead of NO_DATA alone."""
    from jobs.host_facts import hardware_class
    now = now or utcnow()
    page = dashboard_html(load_dashboard_data(store, recent_runs), now, host_class or hardware_class())
    path = Path(out_dir) / INDEX
    atomic_write_texts({path: page})
    return path
