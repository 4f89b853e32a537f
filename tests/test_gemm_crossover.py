"""benchmarks/gemm_crossover.sh against a stand-in python3 whose decode step is faster with
our GEMM up to 16 rows: the crossover is the last batch size of an unbroken run of wins,
and nano-bench runs with cuBLAS and at that crossover."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAND_IN = f"""#!/bin/bash
if [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi
if [[ "$*" == *decode_step.py* ]]; then
  batch=$(echo "$*" | grep -o -- "--batch [0-9]*" | cut -d' ' -f2)
  if [ "$ROADGATE_GEMM_MAX_ROWS" = 0 ]; then echo "median 2.000 ms"
  elif [ "$batch" -le 16 ]; then echo "median 1.500 ms"
  else echo "median 2.500 ms"; fi
else echo "nano-bench          ours/cuda   rows=$ROADGATE_GEMM_MAX_ROWS"; fi
"""


def test_the_crossover_is_where_ours_stops_winning(tmp_path):
    (tmp_path / "python3").write_text(STAND_IN)
    (tmp_path / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", str(REPO / "benchmarks" / "gemm_crossover.sh"), "8:512 16:512 32:1024 4:512"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert "B=16 context=512: cuBLAS 2.000 ms, ours 1.500 ms" in out
    assert "B=32 context=1024: cuBLAS 2.000 ms, ours 2.500 ms" in out
    # B=4 wins again after the loss at 32, but the run of wins ended there.
    assert out.splitlines()[-1] == "ours won at every batch size up to 16 (gemm_max_rows 16)"
    assert "rows=0" in out and "rows=16" in out
