"""The whole triage chain on CPU, on a throwaway clone of this project with eight commits on
top, one of which makes the torch backend slower: re-measure the ends, confirm, bisect with
real `bench --ref` runs, record; and a range of no-op commits comes out as noise."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from sqlalchemy import func, select

from jobs import git_ref
from jobs.errors import RefError
from jobs.gates.triage_chain import report, triage
from jobs.git_ref import first_parent_commits
from jobs.store.models import Culprit, Run, ShiftCheck
from tests.conftest import REPO
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

# 20 ms more per sampling call: cpu-small's ~33 steps lose ~0.7 s, several times the tiny
# model's whole run, far past run-to-run noise.
SLOWDOWN = ("\n_sample = TorchOps.sample\nTorchOps.sample = lambda self, *a, **k: "
            "(__import__('time').sleep(0.02), _sample(self, *a, **k))[1]\n")


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.com",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def history(tmp_path, monkeypatch):
    """A clone with eight commits on top: no-op notes, and the slowdown at the fifth."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    shas = [git(clone, "rev-parse", "HEAD")]
    for i in range(1, 9):
        if i == 5:
            with open(clone / "engine" / "ops" / "torch_ops.py", "a") as f:
                f.write(SLOWDOWN)
        else:
            (clone / "docs" / f"triage-note-{i}.md").write_text(f"note {i}\n")
        git(clone, "add", "-A")
        git(clone, "commit", "--quiet", "-m", f"commit {i}")
        shas.append(git(clone, "rev-parse", "HEAD"))
    monkeypatch.setattr(git_ref, "REPO", clone)
    return shas


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_the_planted_commit_is_found_and_a_no_op_range_is_noise(default_store, history, tiny_model):
    bench = ["--workload", "cpu-small", "--engine", "ours", "--backend", "torch", "--model", str(tiny_model)]
    found = triage(default_store, history[0], history[8], bench, "output_tok_s", "higher",
                   repetitions=5, runs_per_probe=1, max_runs=10)
    assert found.shift.confirmed and found.shift.change < -0.05
    assert found.bisected.found and found.bisected.first_bad == history[5]
    assert found.bisected.last_good == history[4]
    assert found.bisected.runs <= 3                     # ceil(log2 8) probes of one run each
    with default_store.session() as session:
        culprit = session.get(Culprit, found.culprit_id)
        assert culprit.first_bad_sha == history[5] and len(culprit.probes) == found.bisected.runs
        probed = {run for p in culprit.probes for run in p["run_ids"]}
        runs = {r.id: r.git_sha for r in session.scalars(select(Run))}
    assert all(runs[r] in history for r in probed)     # every probe is an ordinary run under its commit
    assert f"first bad commit **{history[5][:12]}**" in report(found)

    quiet = triage(default_store, history[1], history[4], bench, "output_tok_s", "higher",
                   repetitions=5, runs_per_probe=1, max_runs=10)
    assert not quiet.shift.confirmed and quiet.bisected is None and "**noise**" in report(quiet)
    with default_store.session() as session:
        verdicts = [c.verdict for c in session.scalars(select(ShiftCheck).order_by(ShiftCheck.id))]
        assert verdicts == ["confirmed", "noise"]
        assert session.scalar(select(func.count()).select_from(Run)) == 10 + found.bisected.runs + 10


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_ranges_that_are_not_history_are_refused_before_any_run(history):
    assert first_parent_commits(history[2], history[4]) == history[2:5]
    with pytest.raises(RefError, match="not an ancestor"):
        first_parent_commits(history[4], history[2])
    with pytest.raises(RefError, match="same commit"):
        first_parent_commits(history[3], history[3])


@pytest.mark.parametrize("params, message", [
    ({"good": "HEAD~1", "bad": "HEAD"}, "missing parameter(s): workload"),
    ({"good": "HEAD~1", "bad": "HEAD", "workload": "cpu-small", "repetition": 5}, "unknown parameter(s): repetition"),
])
def test_the_dag_task_refuses_bad_params_before_any_run(params, message, default_store):
    from jobs.errors import UsageError
    from jobs.gates.triage_chain import run_triage
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_triage(params)


def test_a_change_point_stands_for_its_runs_commits_workload_and_engine(store):
    from jobs.errors import UsageError
    from jobs.gates.triage_chain import triage_params
    from jobs.store import record_run
    from jobs.store.models import ChangePoint
    from tests.store_support import metrics, nightly
    config = {"engines": {"ours": {"backend": "torch"}}, "model": "dummy:smollm2-135m"}
    before, after = (record_run(store, nightly(day, workload="cpu-small", config=config), metrics("ours", output_tok_s=v))
                     for day, v in ((1, 100.0), (2, 80.0)))
    unknown_commit = record_run(store, nightly(3, git_sha=None), metrics("ours", output_tok_s=80.0))
    with store.session() as session, session.begin():
        points = [ChangePoint(fingerprint="f" * 32, engine="ours", metric="output_tok_s", last_run_before_id=before,
                              first_run_after_id=run, mean_before=100.0, mean_after=80.0, change_percent=-20.0,
                              pvalue=0.001, is_regression=True) for run in (after, unknown_commit)]
        session.add_all(points)
        session.flush()
        known, blind = (p.id for p in points)
    p = triage_params({"change_point_id": known, "max_runs": 12}, store)
    assert (p["good"], p["bad"], p["workload"], p["metric"], p["better"]) == (f"{1:040x}", f"{2:040x}", "cpu-small",
                                                                              "output_tok_s", "higher")
    assert (p["engine"], p["backend"], p["model"], p["max_runs"]) == ("ours", "torch", "dummy:smollm2-135m", 12)
    assert triage_params({"change_point_id": known, "backend": "cuda"}, store)["backend"] == "cuda"   # given wins
    with pytest.raises(UsageError, match="no change point 999"):
        triage_params({"change_point_id": 999}, store)
    with pytest.raises(UsageError, match="record no commit"):
        triage_params({"change_point_id": blind}, store)


def test_the_dag_task_triages_each_suspected_change_point_else_the_params(default_store):
    from jobs.errors import UsageError
    from jobs.gates.triage_chain import run_triages
    with pytest.raises(UsageError, match="no change point 999"):      # the asset event's id is what is triaged
        run_triages({"change_point_id": None}, [999])
    with pytest.raises(UsageError, match="missing parameter"):         # by hand: the params alone
        run_triages({"good": "HEAD~1", "bad": "HEAD"}, [])
