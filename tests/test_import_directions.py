"""The layers import one way only: dags -> jobs -> engine (-> cuda_src, read as files).
The engine knows nothing of the pipeline, its store or its scheduler; jobs know nothing of Airflow."""
from __future__ import annotations

import ast
import re
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


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every module the file imports, at any depth (`from jobs import cli` is jobs.cli)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def jobs_modules() -> list[Path]:
    return sorted((REPO / "jobs").rglob("*.py"))


def test_only_the_command_line_imports_the_cli_module():
    """The library raises jobs.errors' classes; the CLI (jobs/cli.py, the *_cli.py modules) maps them."""
    clients = [str(path.relative_to(REPO)) for path in jobs_modules()
               if path.name != "cli.py" and not path.name.endswith("_cli.py") and "jobs.cli" in imported_modules(path)]
    assert clients == []


def test_the_cli_check_sees_every_import_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from jobs import cli\n")
    assert "jobs.cli" in imported_modules(module)
    module.write_text("def f():\n    from jobs.cli import UsageError\n")
    assert "jobs.cli" in imported_modules(module)


def roadgate_variables_named(path: Path) -> set[str]:
    """ROADGATE_* names the file holds as a string of their own: what reading one takes (os.environ[...],
    .get(...), getenv(...)), however written. Docstrings and help texts only mention them inside longer strings."""
    return {node.value for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"ROADGATE_[A-Z0-9_]+", node.value)}


def test_only_the_settings_module_reads_roadgate_variables():
    readers = {str(path.relative_to(REPO)): sorted(names) for path in jobs_modules()
               if path != REPO / "jobs" / "settings.py" and (names := roadgate_variables_named(path))}
    assert readers == {}


def test_the_settings_check_sees_a_read(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""ROADGATE_DATA_DIR is mentioned."""\nimport os\nos.environ.get("ROADGATE_DATA_DIR")\n')
    assert roadgate_variables_named(module) == {"ROADGATE_DATA_DIR"}


def test_only_the_scheduler_side_sees_request_state():
    """The scheduler owns request state: the model runner's side (the runner, its persistent
    batch, the graphs) gets a step as a SchedulerOutput and never a Sequence."""
    runner_side = ("model_runner.py", "input_batch.py", "cuda_graphs.py")
    seen = {name: "engine.sequence" in imported_modules(REPO / "engine" / name) for name in runner_side}
    assert seen == dict.fromkeys(runner_side, False)
