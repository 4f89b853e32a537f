"""The layers import one way only: dags -> jobs -> engine (-> cuda_src, read as files).
The engine knows nothing of the pipeline, its store or its scheduler; jobs know nothing of Airflow."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "engine": {"jobs", "dags", "roadgate_common", "airflow", "sqlalchemy", "alembic", "psycopg", "pyarrow"},
    "jobs": {"dags", "roadgate_common", "airflow"},
}


def imported_packages(path: Path) -> set[str]:
    """Top-level names of every module the file imports, at any depth (lazy imports count)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_climbs_back_up(package):
    offenders = {str(path.relative_to(REPO)): sorted(imported_packages(path) & FORBIDDEN[package])
                 for path in (REPO / package).rglob("*.py")}
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_check_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from airflow.sdk import dag\n    import sqlalchemy.orm\n")
    assert imported_packages(module) == {"airflow", "sqlalchemy"}
