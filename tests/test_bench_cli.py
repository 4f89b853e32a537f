"""`roadgate bench`: bad input refused before anything runs, and --ref running an older commit."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from sqlalchemy import func, select, text

from jobs import git_ref
from jobs.cli import main
from jobs.store.models import Run
from tests.conftest import REPO

CPU_OURS = ["bench", "--workload", "cpu-small", "--engine", "ours", "--backend", "torch"]


@pytest.fixture
def store(default_store):
    """Where bench records by default."""
    return default_store


def run_count(store) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(Run))


def malformed_workloads(tmp_path, monkeypatch) -> list[str]:
    bad = tmp_path / "workloads.yaml"
    bad.write_text("workloads:\n  cpu-small:\n    version: 1\n"
                   "    prompts: {source: random_tokens, count: 8, input_len: [16, 16]}\n"
                   "    output_len: [4, 4]\n    sampling: {temperature: -1, ignore_eos: true}\n")
    monkeypatch.setenv("ROADGATE_WORKLOADS_FILE", str(bad))
    return CPU_OURS


def overflowing_model(tmp_path, monkeypatch) -> list[str]:
    """A model whose weights are finite but whose attention overflows, so every logit is NaN."""
    from engine.model_source import alias_path
    from tests.conftest import MODEL
    from tests.test_model_sources import OVERFLOWING
    from tests.tiny_model import write_tiny_model
    return CPU_OURS + ["--model", str(write_tiny_model(tmp_path / "m.gguf", alias_path(MODEL), OVERFLOWING))]


def model_without_chat_template(tmp_path, monkeypatch) -> list[str]:
    """A model that cannot take the workload's chat prompts."""
    from tests.test_model_sources import tiny_hf_folder
    return CPU_OURS + ["--model", str(tiny_hf_folder(tmp_path / "m"))]


@pytest.mark.parametrize("argv, message", [
    (["bench", "--workload", "nope", "--engine", "ours"], "unknown workload 'nope'"),
    (malformed_workloads, "workload 'cpu-small': field 'sampling.temperature' must be >= 0"),
    (CPU_OURS + ["--ref", "no-such-ref-anywhere"], "--ref 'no-such-ref-anywhere' names no commit"),
    (CPU_OURS + ["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["bench", "--workload", "cpu-small", "--engine", "llamacpp", "--model", "dummy:smollm2-135m"],
     "llama.cpp needs a GGUF file"),
    (["bench", "--workload", "cpu-small-bf16", "--engine", "ours", "--dtype", "float32"],
     "workload 'cpu-small-bf16' is measured in bfloat16; --dtype float32 contradicts it"),
    (overflowing_model, "the model's logits held no token to sample"),
    (model_without_chat_template, "this model has no chat template"),
])
def test_bad_input_is_refused_in_one_line_and_stores_nothing(store, tmp_path, monkeypatch, capsys, argv, message):
    if callable(argv):
        argv = argv(tmp_path, monkeypatch)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert run_count(store) == 0


def test_unknown_engine_is_refused_and_stores_nothing(store, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["bench", "--workload", "cpu-small", "--engine", "vllm"])
    assert stop.value.code == 2
    assert "invalid choice: 'vllm'" in capsys.readouterr().err
    assert run_count(store) == 0


# Appended to ours' adapter in a throwaway commit: marks every run that commit's code makes.
MARK = '''

_unmarked_run = run


def run(*args, **kwargs):
    result = _unmarked_run(*args, **kwargs)
    result.config["commit_mark"] = "old"
    return result
'''


def git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=test", "-c", "user.email=test@example.com",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_ref_runs_an_older_commit_and_records_its_sha(store, tmp_path, monkeypatch):
    # A clone with two commits on top of this one: "old" marks ours' runs, "new" (HEAD) takes the mark out.
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    adapter = clone / "jobs" / "engines" / "ours.py"
    original = adapter.read_text()
    adapter.write_text(original + MARK)
    git(clone, "commit", "--quiet", "-am", "old: mark ours' runs")
    adapter.write_text(original)
    git(clone, "commit", "--quiet", "-am", "new: no mark")
    old_sha = git(clone, "rev-parse", "HEAD~1")
    monkeypatch.setattr(git_ref, "REPO", clone)

    assert main(CPU_OURS + ["--ref", "HEAD~1"]) == 0

    with store.session() as session:
        (run,) = session.scalars(select(Run)).all()
    assert run.git_sha == old_sha and run.git_dirty is False
    # A re-measurement of an older commit: evidence, kept out of the history gates and change points read.
    assert run.kind == "bench-at-ref"
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM v_metric_history WHERE run_id = :r"), {"r": run.id}).scalar() == 0
        assert conn.execute(text("SELECT COUNT(*) FROM metrics WHERE run_id = :r"), {"r": run.id}).scalar() > 0
    assert run.config["engines"]["ours"]["commit_mark"] == "old"   # the older commit's code is what ran
    # ... and the run names it by content too: the tree of the old commit's four code folders.
    old_code = subprocess.run(["git", "-C", str(clone), "mktree"], check=True, capture_output=True, text=True,
                              input=git(clone, "ls-tree", "HEAD~1", "engine", "jobs", "cuda_src", "dags") + "\n")
    assert run.code_hash == old_code.stdout.strip()
    assert run.validity["engines"]["ours"]["measured"]["requests"] == 8
    assert git(clone, "worktree", "list").count("\n") == 0          # its temporary worktree is gone
    assert git(clone, "status", "--porcelain") == ""                  # and the checkout itself is untouched


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs a git checkout")
def test_a_failing_run_at_a_ref_stores_nothing_and_removes_its_worktree(store, tmp_path, monkeypatch, capsys):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    (clone / "jobs" / "engines" / "ours.py").write_text("raise ImportError('this commit is broken')\n")
    git(clone, "commit", "--quiet", "-am", "broken")
    monkeypatch.setattr(git_ref, "REPO", clone)

    assert main(CPU_OURS + ["--ref", "HEAD"]) == 1
    assert "this commit is broken" in capsys.readouterr().err
    assert run_count(store) == 0
    assert git(clone, "worktree", "list").count("\n") == 0
