"""benchmarks/decode_step.py's --context: one length for every row, or a range each row draws
its own from; a malformed one is refused in one line with status 2 before any GPU work."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import decode_step

REPO = Path(__file__).resolve().parent.parent


def test_context_is_one_length_or_a_range():
    assert decode_step.context_range("1024") == (1024, 1024)
    assert decode_step.context_range("100-2000") == (100, 2000)
    # Equal lengths keep the config these runs always recorded (the same series); a range
    # records its draw.
    assert decode_step.ctx_config(1024, 1024) == 1024
    assert decode_step.ctx_config(100, 2000) == {"uniform": [100, 2000], "seed": 0}


@pytest.mark.parametrize("bad", ["2000-100", "0", "abc", "100-", "1.5"])
def test_a_malformed_context_exits_2_naming_it(bad):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "decode_step.py"), "--context", bad],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert f"argument --context: {bad!r}" in out.stderr
    assert out.stdout == ""
