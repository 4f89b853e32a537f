"""benchmarks/gpu_suite.sh against a stand-in python3: SUITE_ONLY runs just the steps it names,
and the results store comes back inside suite.tgz wherever ROADGATE_DATA_DIR put it."""
from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAND_IN = """#!/bin/bash
echo "$*" >> "$CALLS"
mkdir -p "$ROADGATE_DATA_DIR" && echo "a run" > "$ROADGATE_DATA_DIR/roadgate.db"
echo "decode step stand-in"
"""


def run_suite(tmp_path: Path, **env) -> tuple[list[str], list[str]]:
    """The calls the suite made, and the names in its archive."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(STAND_IN)
    (tmp_path / "bin" / "python3").chmod(0o755)
    out = tmp_path / "out"
    subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_suite.sh"), "/nonexistent.gguf"], check=True,
                   capture_output=True, text=True, timeout=60,
                   env={**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "OUT": str(out),
                        "CALLS": str(tmp_path / "calls.txt"), "SUITE_ONLY": "decode-step", **env})
    with tarfile.open(out / "suite.tgz") as archive:
        names = sorted(n.removeprefix("./") for n in archive.getnames())
    return (tmp_path / "calls.txt").read_text().splitlines(), names


def test_only_the_named_steps_run_and_the_store_is_archived(tmp_path):
    calls, names = run_suite(tmp_path)
    assert calls == ["benchmarks/decode_step.py --profile"]
    assert "decode-step.log" in names and "data/roadgate.db" in names and "store" not in names


def test_a_store_outside_out_is_archived_too(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    calls, names = run_suite(tmp_path, ROADGATE_DATA_DIR=str(elsewhere))
    assert calls == ["benchmarks/decode_step.py --profile"]
    assert "store/roadgate.db" in names and (elsewhere / "roadgate.db").is_file()
