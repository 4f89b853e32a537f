"""benchmarks/device_env.sh, sourced in a scratch checkout as a device call's script does:
it records the code that runs by content hash under $OUT/logs, and use_gguf puts the staged
parts back together only when every one is there (the sha256 matches)."""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    root = tmp_path / "checkout"
    for folder in ("benchmarks", "cuda_src", "engine/ops"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "benchmarks" / "device_env.sh", root / "benchmarks")
    (root / "engine" / "llm.py").write_text("print('the code that ran')\n")
    return subprocess.run(["bash", "-c", f"source benchmarks/device_env.sh; {script}"], cwd=root,
                          capture_output=True, text=True,
                          env={**os.environ, "OUT": str(tmp_path / "out"), "MODEL_DIR": str(tmp_path / "model")})


def test_the_code_that_runs_is_recorded_by_its_hash(tmp_path):
    result = run(tmp_path, "echo $L; echo $PYTHONPATH")
    logs = tmp_path / "out" / "logs"
    assert result.stdout.split("\n")[0] == str(logs)
    assert result.stdout.split("\n")[1].endswith(str(tmp_path / "checkout"))
    expected = hashlib.sha256(b"print('the code that ran')\n").hexdigest()
    assert f"{expected}  engine/llm.py" in (logs / "code.sha256").read_text()
    assert (logs / "gpu.txt").exists()


def test_use_gguf_checks_the_parts_it_joins(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    parts = [os.urandom(3000), os.urandom(3000), os.urandom(1234)]
    for i, part in enumerate(parts):
        (model / f"part-0{i}").write_bytes(part)
    sha = hashlib.sha256(b"".join(parts)).hexdigest()
    assert run(tmp_path, f"use_gguf {sha}").returncode == 0
    assert (model / "smollm2.gguf").read_bytes() == b"".join(parts)
    (model / "part-01").unlink()          # a machine released between the staging calls
    assert run(tmp_path, f"use_gguf {sha} || exit 3").returncode == 3
