"""Issue 16's configuration, read-command, store-limit and output classes: each bad input is
one line and exit 2 (or a refused record), and nothing is created or written."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text

from jobs.cli import main
from jobs.errors import RoadmapError, WorkloadError
from jobs.gates.roadmap import parse_roadmap
from jobs.report.docs import Document, Table, parse_tables, render_markdown
from jobs.store import IngestError, record_run
from jobs.store_cli import format_table
from jobs.workloads import load_workloads
from tests.store_support import db_url, metrics, nightly, pg_database, pg_url, store  # noqa: F401

REPO = Path(__file__).resolve().parent.parent
TINY = """workloads:
  tiny-chat:
    version: 1
    prompts: {source: chat_file, path: chat.jsonl, count: 2}
    output_len: [2, 2]
    sampling: {temperature: 0, ignore_eos: true}
    seed: 1
    hardware: any
    shared_prefixes: true
    validity: {min_duration_s: 0.0, min_requests: 2}
"""
ROW = dict(id="ROAD-T-X", title="t", metric="output_tok_s", engine="ours", comparison=">=", threshold=1.0,
           workload="nano-bench", hardware="H200", max_age_days=7)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def fresh_data(tmp_path, monkeypatch) -> Path:
    data = tmp_path / "data"
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(data))
    for name in ("ROADGATE_DB_URL", "ROADGATE_PARQUET_ROOT", "ROADGATE_DB_MIGRATE_URL"):
        monkeypatch.delenv(name, raising=False)
    return data


@pytest.mark.parametrize("content", ["workloads: [unclosed", "just a string", None])
def test_a_bad_workloads_file_breaks_only_the_commands_that_use_it(tmp_path, fresh_data, content):
    bad = tmp_path / "workloads.yaml"
    if content is not None:
        bad.write_text(content)                     # None: the file named does not exist
    env = {**os.environ, "ROADGATE_WORKLOADS_FILE": str(bad), "PYTHONPATH": str(REPO)}

    def roadgate(*argv):
        return subprocess.run([sys.executable, "-m", "jobs.cli", *argv], env=env, capture_output=True, text=True)

    upgraded = roadgate("db", "upgrade")            # uses no workload: unaffected (it imported fine)
    assert upgraded.returncode == 0, upgraded.stderr
    for argv in (["bench", "--workload", "nano-bench", "--engine", "ours"], ["gates", "evaluate"]):
        refused = roadgate(*argv)
        assert refused.returncode == 2 and str(bad) in refused.stderr, refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr


def test_a_bad_chat_file_is_named_by_line_before_any_engine_runs(tmp_path, fresh_data, monkeypatch, capsys):
    (tmp_path / "workloads.yaml").write_text(TINY)
    (tmp_path / "chat.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": 3}\n')
    monkeypatch.setenv("ROADGATE_WORKLOADS_FILE", str(tmp_path / "workloads.yaml"))
    assert main(["bench", "--workload", "tiny-chat", "--engine", "ours", "--backend", "torch"]) == 2
    assert "chat.jsonl line 2 is not a JSON object with a 'messages' list" in one_line_error(capsys)
    assert not fresh_data.exists()                  # refused before the store was opened


def test_a_workload_name_longer_than_the_store_keeps_is_refused_at_load(tmp_path):
    spec = yaml.safe_load(TINY)["workloads"]["tiny-chat"]
    (tmp_path / "chat.jsonl").write_text("")
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump({"workloads": {"w" * 65: spec}}))
    with pytest.raises(WorkloadError, match="is 65 characters long; at most 64"):
        load_workloads(path)


@pytest.mark.parametrize("argv", [["gates", "status"], ["gates", "regressions"], ["db", "query", "recent_runs"],
                                  ["report", "--out", "{tmp}/site"], ["docs", "--out", "{tmp}/docs"]])
def test_read_commands_on_a_fresh_data_dir_say_no_results_yet_and_create_nothing(tmp_path, fresh_data, capsys, argv):
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert "no results yet" in one_line_error(capsys)
    assert not fresh_data.exists() and not (tmp_path / "site").exists() and not (tmp_path / "docs").exists()


@pytest.mark.parametrize("params, message", [
    (["--param", "workload=nano-bench", "--param", "hardware_class=H200", "--param", "engine=ours",
      "--param", "metric=output_tok_s", "--param", "typo=1"], "query 'metric_trend' has no parameter 'typo'"),
    (["--param", "workload=nano-bench"], "query 'metric_trend' needs --param engine=..., --param hardware_class"),
])
def test_db_query_refuses_unknown_and_missing_parameters(store, monkeypatch, capsys, params, message):
    monkeypatch.setenv("ROADGATE_DB_URL", str(store.engine.url.render_as_string(hide_password=False)))
    assert main(["db", "query", "metric_trend", *params]) == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize("field, value, message", [
    ("id", "ROAD-T-X\n", "field 'id': must look like ROAD-AREA-NAME"),
    ("id", "ROAD-T-X ", "field 'id': must look like ROAD-AREA-NAME"),
    ("threshold", float("nan"), "field 'threshold': must be a positive number, got nan"),
    ("threshold", float("inf"), "field 'threshold': must be a positive number, got inf"),
    ("max_age_days", float("nan"), "field 'max_age_days': must be a positive number, got nan"),
])
def test_roadmap_ids_with_whitespace_and_non_finite_numbers_are_refused(field, value, message):
    with pytest.raises(RoadmapError, match=message):
        parse_roadmap(yaml.safe_dump({"rows": [{**ROW, field: value}]}))


@pytest.mark.parametrize("fields, message", [
    ({"id": "../../etc"}, "run id '../../etc' is not a UUID"),
    ({"host": "h" * 256}, "run field 'host' is 256 characters long; the store keeps 255"),
])
def test_record_run_refuses_a_non_uuid_id_and_an_overlong_field_before_writing(store, fields, message):
    with pytest.raises(IngestError, match=message):
        record_run(store, nightly(0, **fields), metrics(output_tok_s=1.0))
    with store.session() as session:
        assert session.execute(text("SELECT COUNT(*) FROM runs")).scalar() == 0
    assert not Path(store.parquet_root).exists() or not any(Path(store.parquet_root).rglob("*"))


HOSTILE = "<script>alert(1)</script> | *bold* [link](http://x) `code` #h \\ & \x1b[31mred\x07"


def test_database_text_in_the_docs_cannot_become_markup_and_reads_back_as_it_was():
    doc = Document("T.md", "T", "intro", 1, lambda store: [])
    markdown = render_markdown(doc, [Table(HOSTILE, ["Row", "Reason"], [["ROAD-T-X", HOSTILE]])])
    assert "<script>" not in markdown and "\x1b" not in markdown and "\x07" not in markdown
    assert "&lt;script&gt;" in markdown and "\\*bold\\*" in markdown and "\\[link\\]" in markdown
    (table,) = parse_tables(markdown)
    shown = HOSTILE.replace("\x1b", "").replace("\x07", "")
    assert (table.section, table.rows) == (shown, [["ROAD-T-X", shown]])


def test_cli_tables_strip_terminal_control_characters():
    table = format_table([{"reason": "ok\x1b[2J\x1b[31m red\x07", "value": 1.5}], ["reason", "value"])
    assert "\x1b" not in table and "\x07" not in table and "ok[2J[31m red" in table
