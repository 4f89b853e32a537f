"""Peak RSS of `roadgate generate` as the number of prompts grows.

Input is streamed and output written in row groups, so memory should not grow
with the number of prompts beyond the outputs themselves. Runs the real CLI in
a child process per size and reads the child's peak RSS.

    python benchmarks/generate_memory.py [--sizes 100 1000] [--max-tokens 8]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq


def peak_rss_mib(n: int, max_tokens: int, workdir: Path) -> tuple[float, float]:
    prompts = workdir / f"prompts-{n}.jsonl"
    with prompts.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"p{i}", "prompt": f"Request {i}: name a colour and a number."}) + "\n")
    out = workdir / f"out-{n}.parquet"
    code = ("import resource, sys; from jobs.cli import main; rc = main(sys.argv[1:]); "
            "print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(rc)")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, "generate", "--model", "smollm2-135m-instruct",
                           "--backend", "torch", "--input", str(prompts), "--output", str(out),
                           "--max-tokens", str(max_tokens)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    assert pq.read_metadata(out).num_rows == n
    rss_kib = int(next(line for line in proc.stdout.splitlines() if line.startswith("RSS")).split()[1])
    return rss_kib / 1024, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    p.add_argument("--max-tokens", type=int, default=8)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(n, *peak_rss_mib(n, args.max_tokens, Path(tmp))) for n in args.sizes]
    print(f"{'prompts':>8} {'peak RSS MiB':>13} {'wall s':>8}")
    for n, rss, wall in rows:
        print(f"{n:>8} {rss:>13.0f} {wall:>8.1f}")
    print(f"growth from {rows[0][0]} to {rows[-1][0]} prompts: {rows[-1][1] - rows[0][1]:+.0f} MiB")


if __name__ == "__main__":
    main()
