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


def test_prefill_runs_its_script_and_the_table_gives_every_shape(tmp_path):
    for name, ms in (("old", "8.50"), ("new", "7.90")):
        (tmp_path / name / "benchmarks").mkdir(parents=True)
        (tmp_path / name / "benchmarks" / "prefill.py").write_text(
            "import sys\nprint('prefill 1x4000: ...', *sys.argv[1:])\n"
            f"print('    shape   ours ms')\nprint('   1x4000 {ms:>9}')\nprint('  64x1000     71.51')\n")
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(tmp_path / "old"),
                             str(tmp_path / "new"), "prefill@--no-store,--no-torch"],
                            env={**os.environ, "OUT": str(out), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.splitlines()
    assert before.startswith("before") and before.endswith("1x4000 8.50 ms; 64x1000 71.51 ms")
    assert after.startswith("after") and after.endswith("1x4000 7.90 ms; 64x1000 71.51 ms")
    assert "--no-store --no-torch" in (out / "after" / "1-prefill.log").read_text()


def test_too_few_arguments_get_one_line_and_status_2(tmp_path):
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "usage" in result.stderr


def test_partial_trees_are_laid_over_the_checkout_and_benches_take_arguments(tmp_path):
    """Trees holding only some folders (what a device run has room for) each run from their own
    copy of the checkout, gone when the script ends (not under $OUT, whose logs travel back);
    `bench@a,b` passes a and b on, and MODEL= leaves the workload's model."""
    for name in ("old", "new"):
        (tmp_path / name / "engine").mkdir(parents=True)
        (tmp_path / name / "engine" / "variant.txt").write_text(name)
        (tmp_path / name / "benchmarks").mkdir()
        (tmp_path / name / "benchmarks" / "decode_step.py").write_text(
            "import sys\nfrom pathlib import Path\n"
            "print('decode step', Path('engine/variant.txt').read_text(), Path('jobs/cli.py').is_file(),\n"
            "      Path('.git').exists(), *sys.argv[1:])\n"
            "print('tree', Path.cwd())\n")
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(tmp_path / "old"),
                             str(tmp_path / "new"), "decode-step@--batch=64,--context=100-2048"],
                            env={**os.environ, "OUT": str(out), "MODEL": "",
                                 "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.splitlines()
    assert before.startswith("before") and before.endswith("decode step old True False --batch=64 --context=100-2048")
    assert after.startswith("after") and after.endswith("decode step new True False --batch=64 --context=100-2048")
    copy = Path((out / "after" / "1-decode-step.log").read_text().split("tree ", 1)[1].strip())
    assert copy.name == "after" and not copy.exists() and not copy.is_relative_to(out)
    assert (REPO / "engine" / "__init__.py").is_file() and not (REPO / "engine" / "variant.txt").exists()


def test_a_missing_tree_gets_one_line_and_status_2(tmp_path):
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "compare_trees.sh"), str(tmp_path / "nope"),
                             str(tmp_path)], env={**os.environ, "OUT": str(tmp_path / "out")},
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no such folder" in result.stderr
