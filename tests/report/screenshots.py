"""Screenshots of the dashboard before and after issue 17's changes, on the same data: docs/screenshots/.

    .venv/bin/python -m tests.report.screenshots

Each side records the same data into a fresh SQLite store with its own code and renders the
dashboard with it: the history tests/report/history.py builds, the CPU row's first measurement
(a plot of one point), an H200 row no run measured, and one batch generation through jobs.batch
(4 chat prompts, 2 shards, the real model on the torch backend). "before" is commit BEFORE and "after" this checkout's
HEAD, each in a temporary git worktree, so uncommitted edits show in neither. Chromium shoots
each whole page in a window 1280 px wide.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs.git_ref import resolve_commit, worktree_at
from tests.conftest import CHAT_PROMPTS
from tests.report.chromium import Page, chromium_binary

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "screenshots"
BEFORE = "0390121"   # the dashboard as issue 17 found it
PROMPTS = 4

# Runs in a child whose code is the worktree's (cwd and PYTHONPATH); argv: worktree, work dir, prompts.
RECORD_AND_RENDER = """
import sys
from datetime import timedelta
from pathlib import Path

import yaml

import jobs
import jobs.bench
import jobs.store.models
from jobs.batch import commit_batch, generate_shard, parse_params, run_key, split_input
from jobs.gates.evaluate import evaluate_gates
from jobs.gates.roadmap import parse_roadmap, sync_roadmap
from jobs.report import render_dashboard
from jobs.store import MetricRecord, open_store, record_run, upgrade
from tests.report.history import NIGHTS, NOW, ROWS, VALIDITY, build_history
from tests.store_support import nightly

tree, work, prompts = map(Path, sys.argv[1:4])
assert Path(jobs.__file__).resolve().is_relative_to(tree.resolve()), f"ran {jobs.__file__}, not {tree}'s code"
store = open_store(f"sqlite:///{work / 'roadgate.db'}", str(work / "requests"))
upgrade(store.engine)
build_history(store)
sync_roadmap(store, parse_roadmap(yaml.safe_dump({"rows": ROWS + [dict(
    id="ROAD-T-MEM", title="peak GPU memory at most 4 GiB", metric="peak_gpu_mem_bytes", engine="ours",
    comparison="<=", threshold=4 * 2 ** 30, workload="nano-bench", hardware="H200", max_age_days=3,
    validity=VALIDITY)]})))
record_run(store, nightly(NIGHTS, workload="cpu-small", hardware_class="cpu", gpu_name=None, host="cpu-1",
                          config={"backend": "torch"}), [MetricRecord("ours", "agreement", 1.0, count=16)])
# The batch runs on a clock started half an hour before the page's NOW, so it sits with the history.
# Its clock is the store's (BEFORE's batch read the bench's).
clock, name = (jobs.bench, "_utcnow") if hasattr(jobs.bench, "_utcnow") else (jobs.store.models, "utcnow")
real_utcnow = getattr(clock, name)
started = real_utcnow()
setattr(clock, name, lambda: NOW - timedelta(minutes=30) + (real_utcnow() - started))
params = parse_params({"model": "smollm2-135m-instruct", "input_uri": str(prompts), "output_uri": str(work / "batch"),
                       "num_shards": 2, "backend": "torch", "sampling": {"max_tokens": 16}})
key = run_key("batch_generation", "manual__screenshots")
results = [generate_shard(shard, params, key) for shard in split_input(params, key)]
commit_batch(results, params, key, "batch_generation", "manual__screenshots", store=store)
evaluate_gates(store, NOW)
render_dashboard(store, work / "site", now=NOW, recent_runs=12)   # every kind of run, and a page of ~3,000 px
"""


def record_and_render(tree: Path, work: Path, prompts: Path) -> Path:
    """The dashboard the code in `tree` records and renders; its index.html."""
    work.mkdir()
    subprocess.run([sys.executable, "-c", RECORD_AND_RENDER, str(tree), str(work), str(prompts)], cwd=tree,
                   env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    return work / "site" / "index.html"


def shoot(binary: str, page_path: Path, png: Path) -> None:
    page = Page(binary)   # its window is 1280 px wide
    try:
        page.open(page_path.as_uri())
        page.screenshot(png)
    finally:
        page.close()


def main() -> None:
    binary = chromium_binary()
    if binary is None:
        sys.exit("needs Debian's chromium package (apt-get install -y chromium)")
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="roadgate-screenshots-") as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(CHAT_PROMPTS.read_text().splitlines(keepends=True)[:PROMPTS]))
        for side, ref in (("before", BEFORE), ("after", "HEAD")):
            sha = resolve_commit(ref)
            with worktree_at(sha) as tree:
                page = record_and_render(tree, Path(tmp) / side, prompts)
                png = OUT / f"dashboard-{side}.png"
                shoot(binary, page, png)
            print(f"{png.relative_to(REPO)}: the dashboard at {sha[:10]} ({png.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
