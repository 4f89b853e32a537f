"""`make setup`'s recipe (.ci/setup-venv.sh) says what each step does, and lets pip show its
progress on a terminal only. Run against a fake python whose venv holds a fake pip."""
from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / ".ci" / "setup-venv.sh"
# `python -m venv DIR` makes DIR/bin/pip, which logs its arguments (and CMAKE_ARGS, the
# flags a source build gets, where set) and prints a line of output.
FAKE_PYTHON = """#!/bin/sh
mkdir -p "$3/bin"
printf '#!/bin/sh\\necho "$*${CMAKE_ARGS:+ CMAKE_ARGS=$CMAKE_ARGS}" >> %s\\necho pip-says-hello\\n' "$PIP_LOG" > "$3/bin/pip"
chmod +x "$3/bin/pip"
"""


def _env(tmp_path: Path) -> dict:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return {**os.environ, "PYTHON": str(python), "VENV": str(tmp_path / "venv"), "TORCH_SPEC": "torch==9.9",
            "PIP_LOG": str(tmp_path / "pip.log")}


def _pip_calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "pip.log").read_text().splitlines()


def test_each_step_is_announced_and_pip_is_quiet_in_a_log(tmp_path):
    out = subprocess.run([SCRIPT], env=_env(tmp_path), capture_output=True, text=True, check=True).stdout
    steps = [line for line in out.splitlines() if line.startswith("setup: ") and " of 5" in line]
    assert [f"({n} of 5" in line for n, line in enumerate(steps, 1)] == [True] * 5
    assert "setup: installing torch==9.9 (2 of 5, the largest download) ..." in out
    assert out.splitlines()[-1].startswith("setup: done in ")
    calls = _pip_calls(tmp_path)
    assert len(calls) == 6 and all(call.startswith("install -q ") for call in calls)


def test_llama_cpp_is_built_without_amx_and_not_from_the_wheel_cache(tmp_path):
    """Built for the CPU's vector extensions by name, never -march=native, whose AMX matmul
    crashed on the model's weights; the one call that gets these flags."""
    subprocess.run([SCRIPT], env=_env(tmp_path), capture_output=True, check=True)
    builds = [call for call in _pip_calls(tmp_path) if "CMAKE_ARGS=" in call]
    assert len(builds) == 1 and builds[0].startswith("install -q --no-cache-dir llama-cpp-python==")
    flags = builds[0].split("CMAKE_ARGS=")[1].split()
    assert {"-DGGML_NATIVE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_BF16=OFF"} <= set(flags)
    if " avx2 " in Path("/proc/cpuinfo").read_text().replace("\n", " "):
        assert "-DGGML_AVX2=ON" in flags


def test_pip_shows_its_own_progress_on_a_terminal(tmp_path):
    leader, follower = pty.openpty()
    subprocess.run([SCRIPT], env=_env(tmp_path), stdout=follower, stderr=follower, check=True)
    os.close(follower)
    seen = b""
    while chunk := _read(leader):
        seen += chunk
    assert b"pip-says-hello" in seen and b"(5 of 5" in seen
    assert not any("-q" in call.split() for call in _pip_calls(tmp_path))


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:   # EIO: the terminal's other end is closed and drained
        return b""
