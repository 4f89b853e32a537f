"""The HTML dashboard: opened in headless Chromium, and its file written whole or not at all."""
import json
import os
import re
from html import escape
from pathlib import Path

import pytest

from jobs.errors import StoreNotReady
from jobs.report import render_dashboard
from jobs.report.html import REGRESSION_COLUMNS, ROADMAP_COLUMNS, RUNS_COLUMNS
from jobs.store import open_store
from tests.conftest import CHAT_PROMPTS
from tests.report.chromium import Page, chromium_binary
from tests.report.history import CODE_HASH, NOW, ROWS, STATUS, build_history
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[2]
# Where the screenshot is kept: $ROADGATE_TEST_ARTIFACTS, else tests/artifacts/ (git-ignored).
ARTIFACTS = Path(os.environ.get("ROADGATE_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")

PLOTS = """function span(marks) {   // [left, right] of what the marks cover on the page
  var boxes = Array.from(marks).map(function (m) { return m.getBoundingClientRect(); });
  return boxes.length ? [Math.min.apply(null, boxes.map(function (b) { return b.left; })),
                         Math.max.apply(null, boxes.map(function (b) { return b.right; }))] : null;
}
JSON.stringify(Array.from(document.querySelectorAll('svg.plot')).map(function (svg) {
  var box = svg.getBoundingClientRect();
  var series = svg.querySelector('polyline.series');
  return {kind: svg.classList.contains('history') ? 'history' : 'latency',
          id: svg.dataset.row || svg.dataset.latency, marks: Number(svg.dataset.marks),
          width: box.width, height: box.height,
          points: series ? series.points.numberOfItems : 0,
          seriesWidth: series ? series.getBoundingClientRect().width : 0,
          boxes: Array.from(svg.querySelectorAll('rect.box')).filter(function (r) {
            return r.getBoundingClientRect().width > 0; }).length,
          changePoints: svg.querySelectorAll('line.change-point').length,
          frame: span(svg.querySelectorAll('rect.frame')), target: span(svg.querySelectorAll('polyline.target')),
          empty: svg.querySelector('text.empty') !== null};
}))"""
ROADMAP = """JSON.stringify(Array.from(document.querySelectorAll('#roadmap tbody tr')).map(function (tr) {
  return [tr.dataset.row, tr.querySelector('.status').textContent, !tr.hidden]; }))"""


@pytest.fixture
def dashboard(store, tmp_path):
    history = build_history(store)
    return render_dashboard(store, tmp_path / "site", now=NOW), history


def test_dashboard_in_headless_chromium(dashboard):
    binary = chromium_binary()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.skip("needs Debian's chromium package (apt-get install -y chromium)")
    path, h = dashboard
    page = Page(binary)
    try:
        page.open(path.as_uri())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(ARTIFACTS / "dashboard.png")
        roadmap = json.loads(page.evaluate(ROADMAP))
        plots = json.loads(page.evaluate(PLOTS))
        page.evaluate("document.getElementById('only-open').click()")  # the one script: hide PASS rows
        filtered = json.loads(page.evaluate(ROADMAP))
        errors, urls = page.script_errors(), page.requested_urls()
    finally:
        page.close()
    assert errors == []
    assert urls == [path.as_uri()]  # nothing fetched: no network, no other file
    assert {row: status for row, status, _ in roadmap} == STATUS
    assert [row for row, _, visible in filtered if not visible] == ["ROAD-T-AGREE"]

    history = {p["id"]: p for p in plots if p["kind"] == "history"}
    assert set(history) == {r["id"] for r in ROWS}
    for row_id, plot in history.items():
        assert plot["width"] > 0 and plot["height"] > 0, row_id
        if row_id == "ROAD-T-CPU":  # never measured
            assert (plot["marks"], plot["points"], plot["empty"]) == (0, 0, True)
        else:
            assert plot["marks"] > 0 and plot["points"] == plot["marks"] and plot["seriesWidth"] > 100, plot
            # The target reaches across the frame, however few the points.
            assert plot["target"] == pytest.approx(plot["frame"], abs=1.5), plot
    assert history["ROAD-T-TPUT"]["changePoints"] == 1 and history["ROAD-T-AGREE"]["changePoints"] == 0
    latency = {p["id"]: p for p in plots if p["kind"] == "latency"}
    assert {k: (p["marks"], p["boxes"]) for k, p in latency.items()} == {"ttft": (3, 3), "tpot": (2, 2), "itl": (2, 2)}
    assert all(p["width"] > 0 and p["height"] > 0 for p in latency.values())
    shot = (ARTIFACTS / "dashboard.png").read_bytes()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000


def test_dashboard_lists_recent_runs_with_validity_code_hash_and_names_no_outside_resource(dashboard):
    path, h = dashboard
    page = path.read_text()
    assert "://" not in page  # no CDN, no font or script from elsewhere
    for run_id, validity in [(h.latency_failed_run, "failed"), (h.noisy_run, "noisy host"), (h.nano_runs[-1], "valid")]:
        row = page.split(f'<tr data-run="{run_id}">', 1)[1].split("</tr>", 1)[0]
        assert f">{validity}</td>" in row
        # Beside the commit, the hash of the code that ran, where the run recorded one.
        code = f'<code title="{CODE_HASH}">{CODE_HASH[:10]}</code>' if run_id == h.noisy_run else "—"
        assert f"</code></td><td>{code}</td>" in row
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]  # no temporary file left beside it


def test_a_failed_render_leaves_the_previous_dashboard(dashboard, tmp_path):
    path, _ = dashboard
    before = path.read_text()
    empty = open_store(f"sqlite:///{tmp_path / 'never-upgraded.db'}")  # no views: reading fails
    with pytest.raises(StoreNotReady, match="roadgate db upgrade"):
        render_dashboard(empty, path.parent, now=NOW)
    assert path.read_text() == before and [p.name for p in path.parent.iterdir()] == ["index.html"]


@pytest.mark.parametrize("host_class, says_not_here", [("H200", True), ("cpu", False)])
def test_a_row_this_host_cannot_measure_says_so_instead_of_only_no_data(store, tmp_path, host_class, says_not_here):
    build_history(store)   # ROAD-T-CPU (hardware "cpu") has no data
    page = render_dashboard(store, tmp_path / "site", now=NOW, host_class=host_class).read_text()
    row = page.split('data-row="ROAD-T-CPU"', 1)[1].split("</tr>", 1)[0]
    assert ("not measurable on this host (H200): measured on cpu hosts" in row) is says_not_here
    assert "NO_DATA" in row


def test_every_column_says_what_it_is_and_every_row_fills_every_column(dashboard):
    path, _ = dashboard
    page = path.read_text()
    for table, columns in [("roadmap", ROADMAP_COLUMNS), ("runs", RUNS_COLUMNS), ("regressions", REGRESSION_COLUMNS)]:
        html = page.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
        head, body = html.split("<tbody>", 1)
        assert re.findall(r'<th title="([^"]+)">([^<]+)</th>', head) == [
            (escape(tip), escape(name)) for name, tip in columns]
        rows = body.split("</tr>")[:-1]
        assert rows and all(row.count("<td") == len(columns) for row in rows), table
    # Where a column's cells share a unit, the header names it and the cells are bare numbers.
    assert {"Evidence age (days)", "Duration (s)", "Lowest agreement (any engine, 0–1)"} <= {
        name for name, _ in ROADMAP_COLUMNS + RUNS_COLUMNS}
    assert '<td class="num">300</td>' in page and " d</td>" not in page


@pytest.mark.slow
@pytest.mark.parametrize("shards_agree", [True, False])
def test_a_batch_run_shows_the_commit_and_code_hash_its_shards_ran(store, tmp_path, tiny_model, monkeypatch,
                                                                    shards_agree):
    import jobs.host_facts
    from jobs.batch import commit_batch, generate_shard, parse_params, run_key, split_input

    # The code each shard reports (host_facts, as bench records it): the same, or another on the second shard.
    codes = iter([("a1" * 20, True, "c0de" * 10), ("a1" * 20, True, "c0de" * 10 if shards_agree else "beef" * 10)])
    monkeypatch.setattr(jobs.host_facts, "host_facts", lambda: dict(
        zip(("git_sha", "git_dirty", "code_hash"), next(codes)), host="worker-1", hardware_class="cpu"))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(CHAT_PROMPTS.read_text().splitlines(keepends=True)[:2]))
    params = parse_params({"model": str(tiny_model), "input_uri": str(prompts), "output_uri": str(tmp_path / "out"),
                           "num_shards": 2, "backend": "torch", "sampling": {"max_tokens": 2}})
    key = run_key("batch_generation", "manual__1")
    results = [generate_shard(shard, params, key) for shard in split_input(params, key)]
    run_id = commit_batch(results, params, key, "batch_generation", "manual__1", store=store)["store_run_id"]

    page = render_dashboard(store, tmp_path / "site", now=NOW).read_text()
    row = page.split(f'<tr data-run="{run_id}">', 1)[1].split("</tr>", 1)[0]
    assert "<td>generate · batch-generation · cpu</td>" in row
    if shards_agree:
        assert (f'<td><code title="{"a1" * 20}">{"a1" * 5}</code>+dirty</td>'
                f'<td><code title="{"c0de" * 10}">{"c0de" * 2}c0</code></td>') in row
    else:   # a run records one code: none rather than one shard's
        assert "<td>—</td><td>—</td>" in row


def test_a_regression_shows_its_triage_verdict_and_first_bad_commit_beside_it(store, tmp_path):
    from sqlalchemy import text

    from jobs.gates.bisect import bisect
    from jobs.gates.triage import record_culprit, record_shift_check
    build_history(store)
    with store.engine.connect() as conn:
        (cp,) = conn.execute(text("SELECT * FROM v_change_points WHERE is_regression")).all()
    page = render_dashboard(store, tmp_path / "before", now=NOW).read_text()
    row = page.split('<table id="regressions">', 1)[1].split("</tr>", 2)[1]
    assert f"<td class=\"num\">{cp.change_point_id}</td>" in row and "not triaged yet" in row

    shas = [cp.before_git_sha, "ab" * 20, cp.after_git_sha]
    check, _ = record_shift_check(store, cp.series, "output_tok_s", "higher", shas[0], shas[2],
                                  {f"g{i}": 1200.0 + i for i in range(5)}, {f"b{i}": 1000.0 + i for i in range(5)},
                                  change_point_id=cp.change_point_id)
    found = bisect(shas, [1200.0] * 5, [1000.0] * 5, lambda sha: [1001.0], max_runs=5, runs_per_probe=1)
    record_culprit(store, cp.series, "output_tok_s", found, [1200.0] * 5, [1000.0] * 5, {}, shift_check_id=check)
    page = render_dashboard(store, tmp_path / "after", now=NOW).read_text()
    row = page.split('<table id="regressions">', 1)[1].split("</tr>", 2)[1]
    assert f"confirmed (check {check})" in row and "-16.6 [" in row   # medians 1202 -> 1002
    assert "ab" * 5 in row and "not triaged yet" not in row     # the bisect's first bad commit
