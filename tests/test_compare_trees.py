"""benchmarks/compare_trees.sh on two stand-in trees: each side runs in its own tree and store,
the order flips at each benchmark, every run keeps its own log, and the table names each figure."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def stand_in_tree(root: Path, name: str, order_log: Path) -> Path:
    """A tree whose `jobs.cli bench` and decode_step.py only log their call and print a figure line."""
    record = (f"import os, sys\nopen({str(order_log)!r}, 'a').write({name!r} + ' ' + os.environ['ROADGATE_DATA_DIR'] "
              f"+ ' ' + ' '.join(sys.argv[1:]) + '\\n')\n")
    (root / name / "jobs").mkdir(parents=True)
    (root / name / "benchmarks").mkdir()
    (root / name / "jobs" / "__init__.py").write_text("")
    (root / name / "jobs" / "cli.py").write_text(
        record + f"print('table')\nprint(sys.argv[3] + '   ours/cuda   {name}-figure')\nprint('job: done')\n")
    (root / name / "benchmarks" / "decode_step.py").write_text(record + f"print('decode step {name}')\n")
    return root / name


def test_sides_alternate_in_their_own_trees_and_stores(tmp_path):
    calls = tmp_path / "calls.txt"
    before, after = stand_in_tree(tmp_path, "old", calls), stand_in_tree(tmp_path, "new", calls)
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(before), str(after),
                             "nano-bench", "decode-step", "nano-bench"],
                            env={**os.environ, "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    order = [line.split()[:2] for line in calls.read_text().splitlines()]
    assert order == [["old", f"{out}/before/data"], ["new", f"{out}/after/data"],
                     ["new", f"{out}/after/data"], ["old", f"{out}/before/data"],
                     ["old", f"{out}/before/data"], ["new", f"{out}/after/data"]]
    assert sorted(p.name for p in (out / "after").glob("*.log")) == ["1-nano-bench.log", "2-decode-step.log",
                                                                     "3-nano-bench.log"]
    table = result.stdout.splitlines()
    assert table[0].split()[:3] == ["before", "nano-bench", "rc=0"] and table[0].endswith("old-figure")
    assert table[2].startswith("after") and table[2].endswith("decode step new")


def test_too_few_arguments_get_one_line_and_status_2(tmp_path):
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "usage" in result.stderr
