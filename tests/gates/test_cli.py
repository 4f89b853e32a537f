"""The roadgate db / gates commands, end to end on a real database."""
from datetime import timedelta

import pytest

from jobs import cli
from jobs.gates.roadmap import load_roadmap
from jobs.store import open_store, record_run
from jobs.store.models import utcnow
from tests.store_support import metrics, nightly


@pytest.fixture
def roadgate(monkeypatch, db_url, tmp_path):
    monkeypatch.setattr(cli, "COMMANDS", ["jobs.store_cli"])  # only the commands under test
    monkeypatch.setenv("ROADGATE_DB_URL", db_url)
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    return cli.main


def test_upgrade_evaluate_status_regressions(roadgate, db_url, capsys):
    assert roadgate(["db", "upgrade"]) == 0
    store = open_store(db_url)
    for day in range(40):
        record_run(store, nightly(day, workload="fixed-256x128x128"), metrics("ours", syncs_per_step=1.0))
    assert roadgate(["gates", "evaluate"]) == 0
    assert roadgate(["gates", "status"]) == 0
    out = capsys.readouterr().out
    rows = len(load_roadmap())
    assert f"{rows} rows evaluated" in out
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines()[-rows:]}
    assert lines["ROAD-ENGINE-NANOBENCH-60K-H200"] == "NO_DATA" and lines["ROAD-ENGINE-SYNCS-PER-STEP-H200"] == "STALE"
    assert roadgate(["gates", "regressions"]) == 0
    assert "0 new change points" in capsys.readouterr().out
    assert roadgate(["db", "query", "roadmap_status"]) == 0
    assert capsys.readouterr().out.count("\n") == rows + 1  # header + the rows
    assert roadgate(["db", "query", "metric_trend", "--param", "workload=fixed-256x128x128", "--param", "hardware_class=H200",
                     "--param", "engine=ours", "--param", "metric=syncs_per_step"]) == 0
    assert capsys.readouterr().out.count("\n") == 41  # header + 40 runs


def test_bad_input_is_one_line_and_exit_2(roadgate, capsys):
    assert roadgate(["db", "query", "no_such_query"]) == 2
    assert capsys.readouterr().err.strip() == (
        "roadgate db: error: unknown query 'no_such_query' (known: latency_distributions, latest_figures, metric_trend, "
        "recent_regressions, recent_runs, roadmap_history, roadmap_status)")


def test_gate_status_shows_figures_with_their_units(roadgate, db_url, capsys):
    assert roadgate(["db", "upgrade"]) == 0
    started = utcnow() - timedelta(hours=1)   # fresh evidence: judged against its target, not STALE
    record_run(open_store(db_url), nightly(0, workload="nano-bench", started_at=started,
                                           finished_at=started + timedelta(minutes=5)),
               metrics("ours", output_tok_s=58308.0))
    assert roadgate(["gates", "evaluate"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("ROAD-ENGINE-NANOBENCH-60K-H200")]
    assert "58,308 tok/s" in line and "60,000 tok/s" in line


def test_regressions_lists_triage_verdicts_beside_the_change_points(roadgate, db_url, capsys):
    from jobs.gates.bisect import bisect
    from jobs.gates.triage import record_culprit, record_shift_check
    assert roadgate(["db", "upgrade"]) == 0
    assert roadgate(["gates", "regressions", "--no-detect"]) == 0
    assert "regression triage" not in capsys.readouterr().out          # nothing triaged: no second table
    store = open_store(db_url)
    shas = [f"{i:040x}" for i in range(3)]
    check, _ = record_shift_check(store, "s" * 32, "output_tok_s", "higher", shas[0], shas[2],
                                  {f"b{i}": 100.0 + i for i in range(5)}, {f"a{i}": 90.0 + i for i in range(5)})
    found = bisect(shas, [100.0] * 5, [90.0] * 5, lambda sha: [90.0], max_runs=5, runs_per_probe=1)
    record_culprit(store, "s" * 32, "output_tok_s", found, [100.0] * 5, [90.0] * 5, {}, shift_check_id=check)
    assert roadgate(["gates", "regressions", "--no-detect"]) == 0
    out = capsys.readouterr().out
    assert "regression triage (the bisect_regression DAG): 1 shift checks" in out
    (row,) = [line for line in out.splitlines() if line.startswith(str(check) + " ")]
    assert "confirmed" in row and "found" in row and shas[1][:12] in row
