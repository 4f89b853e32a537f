"""A script run as `python3 benchmarks/x.py` puts benchmarks/ first on sys.path, so a script
named like an installed package hides it from every import in that process: transformers
5.25 imports the `kernels` package when it is installed, and found benchmarks/kernels.py."""
from importlib.metadata import packages_distributions
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_no_benchmark_script_is_named_like_an_installed_package():
    installed = packages_distributions()
    clashes = {p.stem: installed[p.stem] for p in BENCHMARKS.glob("*.py") if p.stem in installed}
    assert not clashes, f"benchmark scripts named like installed packages: {clashes}"
