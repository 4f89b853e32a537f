"""`roadgate report` and `roadgate docs` end to end, and their answers to bad input."""
import pytest

from jobs import cli
from tests.report.history import build_history


@pytest.fixture
def roadgate(monkeypatch, db_url, tmp_path):
    monkeypatch.setattr(cli, "COMMANDS", ["jobs.report_cli"])
    monkeypatch.setenv("ROADGATE_DB_URL", db_url)
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path))
    return cli.main


def test_report_and_docs(roadgate, store, tmp_path, capsys):
    build_history(store)
    assert roadgate(["report", "--out", str(tmp_path / "site")]) == 0
    assert capsys.readouterr().out == f"dashboard written to {tmp_path / 'site' / 'index.html'}\n"
    assert "ROAD-T-TPUT" in (tmp_path / "site" / "index.html").read_text()
    docs = tmp_path / "docs"
    assert roadgate(["docs", "--out", str(docs)]) == 0
    assert roadgate(["docs", "--out", str(docs), "--check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{docs}: STATUS.md and BENCHMARKS.md agree with the data"
    status = docs / "STATUS.md"
    status.write_text(status.read_text().replace("| GATING |", "| PASS |"))
    assert roadgate(["docs", "--out", str(docs), "--check"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{status}: ROAD-T-TPUT: Status is 'PASS' in the docs but 'GATING' in the data")
    assert err[1:] == [f"1 differences between {docs} and the data; regenerate with `roadgate docs`"]


@pytest.mark.parametrize("argv, message", [
    (["report", "--out", "{file}"], "roadgate report: error: --out {file}: exists and is not a directory"),
    (["docs", "--out", "{file}", "--check"], "roadgate docs: error: --out {file}: exists and is not a directory"),
    (["report", "--out", "{tmp}/site", "--db-url", "sqlite:///{tmp}/none.db"],
     "roadgate report: error: no results yet: {tmp}/none.db does not exist (`roadgate bench` records the first run)"),
    (["docs", "--out", "{tmp}/docs", "--db-url", "sqlite:///{tmp}/empty.db"],
     "roadgate docs: error: no results yet: the store holds no run (`roadgate bench` records the first)"),
    (["report", "--out", "{tmp}/site", "--db-url", "postgresql://nobody@127.0.0.1:1/none"],
     "roadgate report: error: cannot open the results store at postgresql+psycopg://nobody@127.0.0.1:1/none: "),
])
def test_bad_input_is_one_line_and_exit_2(roadgate, tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("")
    (tmp_path / "empty.db").write_bytes(b"")
    argv = [a.format(tmp=tmp_path, file=tmp_path / "file") for a in argv]
    assert roadgate(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(message.format(tmp=tmp_path, file=tmp_path / "file"))
    assert not (tmp_path / "site").exists() and not (tmp_path / "docs").exists()
    assert not (tmp_path / "none.db").exists()  # reading never creates a database


def test_recent_runs_must_be_positive(roadgate, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        roadgate(["report", "--out", str(tmp_path), "--recent-runs", "0"])
    assert exit_.value.code == 2 and "--recent-runs: must be a positive whole number, got '0'" in capsys.readouterr().err
