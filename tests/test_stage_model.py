"""benchmarks/stage_model.sh in a scratch checkout: the parts put back together are the
model's bytes exactly, each within the size asked; without split-model.sh's halves it
refuses in one line, exit 2, and writes nothing."""
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "stage_model.sh", root / "benchmarks")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def stage(root: Path, part_bytes: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "benchmarks/stage_model.sh"], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PART_BYTES": str(part_bytes)})


def test_the_parts_are_the_model_in_order(tmp_path):
    root = checkout(tmp_path)
    (root / ".model").mkdir()
    a, b = os.urandom(2500), os.urandom(1700)
    (root / ".model" / "a").write_bytes(a)
    (root / ".model" / "b").write_bytes(b)
    (root / ".model" / "part-09").write_bytes(b"left from an earlier split")
    result = stage(root, 1000)
    assert result.returncode == 0, result.stderr
    parts = sorted((root / ".model").glob("part-*"))
    assert [p.name for p in parts] == [f"part-0{i}" for i in range(5)]
    assert all(p.stat().st_size <= 1000 for p in parts)
    assert b"".join(p.read_bytes() for p in parts) == a + b
    assert result.stdout.count("carry [") == 5


def test_its_join_command_checks_the_model_and_stops_on_a_missing_part(tmp_path):
    """The printed command after `then` joins /tmp/model's parts and checks their sha256:
    run on a copy of the parts it passes; with one part gone (the machine was released
    between the calls) it fails before the run."""
    root = checkout(tmp_path)
    (root / ".model").mkdir()
    (root / ".model" / "a").write_bytes(os.urandom(2500))
    (root / ".model" / "b").write_bytes(os.urandom(1700))
    result = stage(root, 1000)
    join = result.stdout.split("then, carrying what the run needs:")[1].strip().removesuffix("&& ...")
    device = tmp_path / "device"
    shutil.copytree(root / ".model", device, ignore=shutil.ignore_patterns("a", "b"))
    command = join.replace("/tmp/model", str(device)) + " && echo ran"
    assert subprocess.run(["bash", "-c", command], capture_output=True, text=True).stdout.strip() == "ran"
    (device / "part-02").unlink()
    lost = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert lost.returncode != 0 and "ran" not in lost.stdout


def test_without_the_halves_it_refuses(tmp_path):
    root = checkout(tmp_path)
    result = stage(root, 1000)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "split-model.sh" in result.stderr
    assert not (root / ".model").exists()
