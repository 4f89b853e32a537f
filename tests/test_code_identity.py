"""jobs.code_identity against real git: the tree id `git add engine jobs cuda_src dags && git
write-tree` gives, for a clean checkout, after edits, with untracked files, and for a copy
without .git."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from jobs.code_identity import CODE_DIRS, REPO, code_hash


def git(root: Path, *args: str, index: Path | None = None) -> str:
    env = {**os.environ, **({"GIT_INDEX_FILE": str(index)} if index else {})}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout.strip()


def git_write_tree(root: Path) -> str:
    """What git itself gives: the four directories added to a fresh index, written as a tree."""
    index = root.parent / "scratch-index"
    index.unlink(missing_ok=True)
    git(root, "add", *CODE_DIRS, index=index)
    return git(root, "write-tree", index=index)


def plant_ignored(root: Path) -> None:
    """What a working tree holds beside the code and .gitignore keeps out."""
    (root / "jobs" / "__pycache__").mkdir(exist_ok=True)
    (root / "jobs" / "__pycache__" / "planted.cpython-311.pyc").write_bytes(b"\0pyc")
    (root / "engine" / "planted.egg-info").mkdir()
    (root / "engine" / "planted.egg-info" / "PKG-INFO").write_text("Name: planted\n")


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout of a copy of this repo's code and .gitignore, committed clean."""
    root = tmp_path / "checkout"
    for name in CODE_DIRS:
        shutil.copytree(REPO / name, root / name, symlinks=True)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "-qm", "copy")
    plant_ignored(root)
    return root


def test_a_clean_checkout_hashes_as_git_writes_its_tree(checkout):
    assert code_hash(checkout) == git_write_tree(checkout)
    assert git(checkout, "status", "--porcelain") == ""   # the planted files really are ignored


def test_an_edited_file_changes_the_hash_as_git_does(checkout):
    before = code_hash(checkout)
    with (checkout / "jobs" / "bench.py").open("a") as f:
        f.write("# edited\n")
    assert code_hash(checkout) != before
    assert code_hash(checkout) == git_write_tree(checkout)


def test_untracked_files_count_and_sort_as_git_sorts_them(checkout):
    before = code_hash(checkout)
    (checkout / "jobs" / "new_module.py").write_text("X = 1\n")
    # Beside the directory engine/ops/: git sorts "ops.py" before "ops/", a plain name sort after "ops".
    (checkout / "engine" / "ops.py").write_text("Y = 2\n")
    assert code_hash(checkout) != before
    assert code_hash(checkout) == git_write_tree(checkout)


def test_modes_symlinks_and_deleted_files_as_git_records_them(checkout):
    (checkout / "jobs" / "cli.py").chmod(0o755)
    (checkout / "engine" / "link_to_jobs").symlink_to("../jobs")
    (checkout / "dags" / "batch_generation.py").unlink()   # tracked, deleted on disk: not part of the code
    assert code_hash(checkout) == git_write_tree(checkout)


def test_a_copy_without_git_hashes_as_the_checkout_it_came_from(checkout, tmp_path):
    (checkout / "jobs" / "new_module.py").write_text("X = 1\n")
    with (checkout / "engine" / "llm.py").open("a") as f:
        f.write("# edited\n")
    (checkout / "jobs" / "cli.py").chmod(0o755)
    (checkout / "engine" / "link_to_jobs").symlink_to("../jobs")   # a link to a directory: not followed
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    assert not (copy / ".git").exists() and (copy / "jobs" / "__pycache__" / "planted.cpython-311.pyc").exists()
    assert code_hash(copy) == code_hash(checkout) == git_write_tree(checkout)


def test_every_bench_run_records_the_hash_of_this_checkout():
    from jobs.host_facts import host_facts
    assert host_facts()["code_hash"] == code_hash(REPO)


def test_the_committed_hash_is_the_code_hash_of_a_clean_checkout_and_tells_a_changed_one(checkout, tmp_path):
    from jobs.code_identity import committed_code_hash
    assert committed_code_hash(checkout) == code_hash(checkout)
    (checkout / "jobs" / "new_module.py").write_text("X = 1\n")   # untracked code runs too
    assert committed_code_hash(checkout) != code_hash(checkout)
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git"))
    assert committed_code_hash(copy) is None                        # no checkout of ours: no commit to name


@pytest.mark.parametrize("gpu_name, expected", [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA H100 PCIe", "H100"), ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 4090", "4090")])
def test_the_hardware_class_is_the_gpu_model_not_its_memory(gpu_name, expected):
    # An H100 ran as "HBM3" (its name's last word) on 2026-12-06: a class of its own, beside the H200 rows.
    from jobs.host_facts import hardware_class
    assert hardware_class(gpu_name) == expected
