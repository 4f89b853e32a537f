"""Compiled artifacts (cubins, the CPU kernel's library) cached on disk by a key of everything
that went into them: ~/.cache/roadgate, or $ROADGATE_CACHE."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def cache_dir() -> Path:
    path = Path(os.environ.get("ROADGATE_CACHE", Path.home() / ".cache" / "roadgate"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def build_once(target: Path, compile_to: Callable[[Path], None]) -> Path:
    """`target`, made by `compile_to(a temporary path)` unless it exists already. The file
    appears whole or not at all, so concurrent builders never load half a file."""
    if target.exists():
        return target
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=target.suffix)
    os.close(fd)
    try:
        compile_to(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
