"""docs/STATUS.md and docs/BENCHMARKS.md: written from the data, and every way they can drift is named."""
import re
from datetime import timedelta

import pytest
import yaml
from sqlalchemy import text

from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.report import check_docs, write_docs
from jobs.report.docs import MAX_CELL, parse_tables
from jobs.store import MetricRecord, record_run, supersede_metric
from tests.report.history import NIGHTS, NOW, ROWS, build_history, ours_tok_s
from tests.store_support import nightly

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def published(store, tmp_path):
    """(store, History, docs dir) with the docs freshly written."""
    h = build_history(store)
    docs = tmp_path / "docs"
    write_docs(store, docs)
    return store, h, docs


def messages(store, docs) -> list[str]:
    return [str(d) for d in check_docs(store, docs)]


def test_check_passes_on_fresh_output(published):
    store, h, docs = published
    assert messages(store, docs) == []
    status = (docs / "STATUS.md").read_text()
    benchmarks = (docs / "BENCHMARKS.md").read_text()
    (status_table,) = parse_tables(status)
    assert [row[0] for row in status_table.rows] == sorted(r["id"] for r in ROWS)
    assert "batch-1 TTFT at most 20 ms \\| on one H200" in status  # a pipe in a title does not split the cell
    for table in parse_tables(status) + parse_tables(benchmarks):
        run = table.columns.index("Run")
        for row in table.rows:
            assert all(len(cell) <= MAX_CELL for cell in row)
            figures = [c for c in row[run + 1:] if re.search(r"\d", c) and c != row[run + 1]]
            if figures:  # every row with a number names the run it came from
                assert UUID.match(row[run]), row
    nano = {tuple(r[:2]): r for t in parse_tables(benchmarks) if t.section == "nano-bench" for r in t.rows}
    assert nano[("H200", "ours")][2] == h.nano_runs[-1]
    assert f"{ours_tok_s(NIGHTS - 1):,.0f} tok/s" in nano[("H200", "ours")]


def test_check_names_a_figure_superseded_in_the_database(published):
    store, h, docs = published
    with store.engine.connect() as conn:
        old_id = conn.execute(text("SELECT metric_id FROM v_metric_history WHERE run_id = :r AND engine = 'ours' "
                                   "AND metric = 'output_tok_s'"), {"r": h.nano_runs[-1]}).scalar_one()
    supersede_metric(store, old_id, MetricRecord("ours", "output_tok_s", 900.0, count=256), "clock was wrong")
    run = h.nano_runs[-1]
    assert messages(store, docs) == [
        f"{docs / 'STATUS.md'}: ROAD-T-TPUT: Value is '998 tok/s' in the docs but '998 tok/s (superseded since the "
        f"gates were evaluated; run `roadgate gates evaluate`)' in the data (docs cite run {run}; the data's is from "
        f"run {run})",
        f"{docs / 'BENCHMARKS.md'}: nano-bench H200 ours: output tok/s is '998 tok/s' in the docs but '900 tok/s' in "
        f"the data (docs cite run {run}; the data's is from run {run})",
    ]
    evaluate_gates(store, NOW)  # re-evaluated: the status table carries the corrected value
    write_docs(store, docs)
    assert messages(store, docs) == []
    assert "| 900 tok/s |" in (docs / "STATUS.md").read_text()


def test_check_names_a_status_that_is_not_current(published):
    store, h, docs = published
    newer = nightly(NIGHTS, started_at=NOW - timedelta(minutes=30))
    record_run(store, newer, [MetricRecord("ours", "output_tok_s", 1300.0, count=256),
                              MetricRecord("hf", "output_tok_s", 1000.0, count=256)])
    evaluate_gates(store, NOW)
    found = messages(store, docs)
    assert f"{docs / 'STATUS.md'}: ROAD-T-TPUT: Status is 'GATING' in the docs but 'PASS' in the data" in \
        [m.split(" (docs cite")[0] for m in found]


def test_check_names_a_missing_row_an_unbacked_figure_and_a_row_the_data_lacks(published):
    store, h, docs = published
    status = docs / "STATUS.md"
    status.write_text("\n".join(line for line in status.read_text().splitlines() if "ROAD-T-CPU" not in line)
                      + "\n| ROAD-T-GONE | retired | PASS | 1 | ≥ 1 | — | — | — |\n")
    benchmarks = docs / "BENCHMARKS.md"
    benchmarks.write_text(benchmarks.read_text().replace("| 1,000 tok/s |", "| 1,500 tok/s |"))
    found = messages(store, docs)
    assert f"{status}: ROAD-T-CPU: row is missing from the docs" in found
    assert (f"{status}: ROAD-T-GONE: row is in the docs but not in the data (no current run or roadmap row "
            "backs it)") in found
    assert (f"{benchmarks}: nano-bench H200 hf: output tok/s is '1,500 tok/s' in the docs but '1,000 tok/s' in the "
            f"data (docs cite run {h.nano_runs[-1]}; the data's is from run {h.nano_runs[-1]})") in found
    assert len(found) == 3


def test_check_names_missing_files_sections_and_edited_prose(published, tmp_path):
    store, h, docs = published
    assert messages(store, tmp_path / "elsewhere") == [
        f"{tmp_path / 'elsewhere' / 'STATUS.md'}: missing; run `roadgate docs`",
        f"{tmp_path / 'elsewhere' / 'BENCHMARKS.md'}: missing; run `roadgate docs`"]
    benchmarks = docs / "BENCHMARKS.md"
    original = benchmarks.read_text()
    benchmarks.write_text(original.replace("## chat-16x64", "## chat-16x64-old"))
    assert messages(store, docs) == [f"{benchmarks}: chat-16x64: section is missing from the docs",
                                     f"{benchmarks}: chat-16x64-old: section has no data behind it"]
    benchmarks.write_text(original.replace("do not edit", "edit freely"))
    assert messages(store, docs) == [f"{benchmarks}: tables agree with the data but the text around them differs "
                                     "from what `roadgate docs` writes"]


def test_long_cells_are_cut_and_still_check(store, tmp_path):
    long_row = dict(ROWS[0], id="ROAD-T-LONG", title="a very long title " * 30)
    sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": [long_row]})))
    evaluate_gates(store, NOW)
    write_docs(store, tmp_path)
    (table,) = parse_tables((tmp_path / "STATUS.md").read_text())
    assert len(table.rows[0][1]) == MAX_CELL and table.rows[0][1].endswith("…")
    assert check_docs(store, tmp_path) == []
