"""Every cuda_src/*.cu compiles for sm_90 with the local nvcc (CPU CI: no GPU needed), and ships in an install."""
from pathlib import Path

import pytest

from engine.ops import cuda_build

SOURCES = sorted(cuda_build.SRC_DIR.glob("*.cu"))


def _nvcc_or_none():
    try:
        return cuda_build.nvcc_path()
    except RuntimeError:
        return None


@pytest.mark.skipif(_nvcc_or_none() is None, reason="nvcc is not installed here, so CUDA sources cannot be compiled")
@pytest.mark.parametrize("src", SOURCES, ids=[s.name for s in SOURCES])
def test_source_compiles_for_sm90(src: Path, tmp_path: Path):
    out = tmp_path / (src.stem + ".cubin")
    cuda_build.compile_source(src, "sm_90", out)
    assert out.stat().st_size > 0


def test_there_are_sources():
    assert SOURCES, f"no .cu files under {cuda_build.SRC_DIR}"


@pytest.mark.slow
def test_an_installed_roadgate_carries_the_kernel_sources(tmp_path):
    """A non-editable install (what a wheel gives) finds every .cu and .cuh outside the checkout."""
    import os
    import shutil
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[1]
    source, target = tmp_path / "source", tmp_path / "site"
    # Built from a copy: setuptools writes build/ into the tree it builds.
    for package in ("engine", "jobs", "cuda_src"):
        shutil.copytree(repo / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, cwd=tmp_path)
    listing = subprocess.run(
        [sys.executable, "-c", "from engine.ops import cuda_build as b; "
                               "print(b.SRC_DIR); print(*sorted(p.name for p in b.SRC_DIR.iterdir()))"],
        env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path,   # before the editable checkout
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert listing[0] == str(target / "cuda_src")
    shipped = set(listing[1].split())
    assert {p.name for p in repo.joinpath("cuda_src").glob("*.cu*")} <= shipped and "common.cuh" in shipped
