"""The content hash of the code that ran: the git tree id that `git add engine jobs
cuda_src dags && git write-tree` would give for a tree holding those four directories
as they are on disk.

A commit sha says which code ran only for a clean checkout; runs made from a dirty or
copied tree (the GPU host gets a copy, often without .git) need the files themselves.
Computed in pure Python from git's object format, so a copy without .git or git gets
the same id as the checkout it was copied from.
"""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from fnmatch import fnmatchcase
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE_DIRS = ("engine", "jobs", "cuda_src", "dags")
# For a tree without a .gitignore (an installed package): what Python leaves beside the code.
DEFAULT_IGNORES = ("__pycache__/", "*.pyc", "*.egg-info/")


def code_hash(root: Path = REPO) -> str:
    """The git tree id (40 hex digits) of CODE_DIRS under `root`, as they are on disk."""
    files = _git_files(root)
    if files is None:
        files = _walked_files(root)
    tree: dict = {}
    for path in files:
        entry = _entry(root / path)
        if entry is None:   # listed by git but deleted, or not a file
            continue
        *parents, name = path.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[name] = entry
    return _tree_id(tree).hex()


def committed_code_hash(root: Path = REPO, rev: str = "HEAD") -> str | None:
    """The code_hash of CODE_DIRS as commit `rev` of the checkout at `root` holds them; None
    where there is no checkout of ours (a copy), no git, or the commit lacks one of them."""
    if not (root / ".git").exists():
        return None
    body = b""
    for name in sorted(CODE_DIRS):   # all directories: git's "name/" order is the plain one here
        try:
            out = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "-q", f"{rev}:{name}"],
                                 capture_output=True, text=True)
        except OSError:
            return None
        if out.returncode:
            return None
        body += b"40000 " + os.fsencode(name) + b"\0" + bytes.fromhex(out.stdout.strip())
    return _object_id(b"tree", body).hex()


def _git_files(root: Path) -> list[str] | None:
    """What `git add` would take from a checkout: tracked and untracked, not ignored. None without git."""
    if not (root / ".git").exists():   # a copy: a parent directory's repository is not ours
        return None
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *CODE_DIRS],
                             cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [os.fsdecode(p) for p in out.split(b"\0") if p]


def _walked_files(root: Path) -> list[str]:
    """CODE_DIRS walked without following links, minus what the top .gitignore ignores."""
    gitignore = root / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.is_file() else DEFAULT_IGNORES
    rules = [_rule(line) for line in lines if line.strip() and not line.startswith("#")]
    files = []

    def walk(rel: str) -> None:
        for item in os.scandir(root / rel):
            path = f"{rel}/{item.name}"
            is_dir = item.is_dir(follow_symlinks=False)
            if _ignored(path, is_dir, rules):
                continue
            if is_dir:
                walk(path)
            else:
                files.append(path)

    for top in CODE_DIRS:
        if (root / top).is_dir() and not _ignored(top, True, rules):
            walk(top)
    return files


def _rule(line: str) -> tuple[str, bool, bool, bool]:
    """(pattern, negated, directories only, anchored) of one .gitignore line. The subset of
    gitignore syntax this repo needs: `!`, a trailing `/`, and a slash anchoring to the root."""
    pattern = line.rstrip()
    negated = pattern.startswith("!")
    pattern = pattern.removeprefix("!")
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    anchored = "/" in pattern
    return pattern.lstrip("/"), negated, dir_only, anchored


def _ignored(path: str, is_dir: bool, rules) -> bool:
    ignored = False
    for pattern, negated, dir_only, anchored in rules:   # the last matching rule decides, as in git
        if dir_only and not is_dir:
            continue
        if fnmatchcase(path if anchored else path.rsplit("/", 1)[-1], pattern):
            ignored = not negated
    return ignored


def _entry(path: Path) -> tuple[bytes, bytes] | None:
    """(git mode, blob id) of a file or symlink; None for anything else, or nothing."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return b"120000", _object_id(b"blob", os.fsencode(os.readlink(path)))
        if stat.S_ISREG(st.st_mode):
            mode = b"100755" if st.st_mode & stat.S_IXUSR else b"100644"
            return mode, _object_id(b"blob", path.read_bytes())
    except FileNotFoundError:
        pass
    return None


def _tree_id(tree: dict) -> bytes:
    # Git sorts a tree's entries by name, a subdirectory's name as if it ended in "/".
    def key(name: str) -> bytes:
        return os.fsencode(name) + (b"/" if isinstance(tree[name], dict) else b"")

    body = b""
    for name in sorted(tree, key=key):
        node = tree[name]
        mode, oid = (b"40000", _tree_id(node)) if isinstance(node, dict) else node
        body += mode + b" " + os.fsencode(name) + b"\0" + oid
    return _object_id(b"tree", body)


def _object_id(kind: bytes, data: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(data)).encode() + b"\0" + data).digest()
