"""The code at a git ref, checked out beside this one: what `bench --ref` runs.

A detached `git worktree` of the commit lives in a temporary directory for as
long as it is needed and is removed afterwards, also when the run fails, so a
change point can be bisected to a commit without touching the current checkout.
"""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

from jobs import settings
from jobs.errors import RefError

REPO = Path(__file__).resolve().parent.parent


def default_checkout() -> Path:
    """Where commits are taken from: settings.git_repo() where set, else this code's own checkout."""
    return settings.git_repo() or REPO


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def resolve_commit(ref: str, repo: Path | None = None) -> str:
    """The full sha of the commit `ref` names in `repo` (this checkout by default)."""
    repo = repo or default_checkout()
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise RefError(f"--ref needs a git checkout of roadgate; {repo} is not one")
    # --end-of-options and the ^{commit} peel keep a ref that looks like an option, or names a tree, out.
    out = _git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if out.returncode != 0 or not out.stdout.strip():
        raise RefError(f"--ref {ref!r} names no commit in {repo}")
    return out.stdout.strip()


@contextlib.contextmanager
def worktree_at(sha: str, repo: Path | None = None) -> Iterator[Path]:
    """A temporary detached worktree of commit `sha`; removed on exit, whatever happened."""
    repo = repo or default_checkout()
    parent = Path(tempfile.mkdtemp(prefix="roadgate-ref-"))
    tree = parent / sha[:12]
    added = _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), sha)
    try:
        if added.returncode != 0:
            raise RuntimeError(f"git worktree add {sha} failed: {added.stderr.strip()}")
        yield tree
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune")


def first_parent_commits(good: str, bad: str, repo: Path | None = None) -> list[str]:
    """`good`, then the first-parent commits after it up to `bad`, oldest first (full shas):
    what a bisect between them walks."""
    repo = repo or default_checkout()
    good_sha, bad_sha = resolve_commit(good, repo), resolve_commit(bad, repo)
    if _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode != 0:
        raise RefError(f"{good} is not an ancestor of {bad}: nothing to bisect between them")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").stdout.split()
    if not listed:
        raise RefError(f"{good} and {bad} are the same commit")
    return [good_sha, *listed]
