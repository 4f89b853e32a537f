"""The README's commands and names hold, checked without running anything:

* every `roadgate ...` line of its sh blocks parses with the CLI's own parser (jobs.cli), one
  line per choice of its `a|b` alternatives, with its `[...]` options given;
* every `roadgate`/`--flag` it names inline is a subcommand/option of that parser;
* every `make` target and variable it names is in the Makefile, and the DAG confs it shows
  (`airflow dags trigger`, `make demo NIGHTLY_CONF=`) are accepted by the jobs that read them;
* every repo path it names (`dags/...`, `jobs/...`) exists, every `jobs.`/`engine.` name
  resolves, every ROADGATE_* variable it names is read somewhere in the code, and every
  extra it installs (`pip install -e ".[cuda]"`) is in pyproject.toml.

Bare file names (`scheduler.py` in the engine's layout) and outputs (`data/...`) are not checked.
"""
from __future__ import annotations

import argparse
import importlib
import itertools
import json
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
MAKEFILE = (REPO / "Makefile").read_text()
# Where a path the README names is one the repo ships; tests/artifacts/ is the dashboard test's output.
REPO_DIRS = (".ci", "benchmarks", "cuda_src", "dags", "docker", "docs", "engine", "jobs", "sql", "tests")
GENERATED = {"tests/artifacts/"}
SEPARATORS = {"&&", "||", ";", "|"}


def commands(block: str) -> list[list[str]]:
    """A shell block's commands as words: a line, continued by a trailing backslash or an open
    quote, and split at `&&`, `;` and `|` (written apart from their words)."""
    found, pending = [], ""
    for line in block.splitlines():
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:   # a quote still open: the command goes on
            pending += "\n"
            continue
        for is_separator, group in itertools.groupby(words, lambda w: w in SEPARATORS):
            if not is_separator:
                found.append(list(group))
        pending = ""
    assert not pending, f"README: a command never ends: {pending!r}"
    return found


SH_COMMANDS = [words for block in re.findall(r"^```sh\n(.*?)^```", README, re.M | re.S) for words in commands(block)]
# Inline code, fenced blocks left out; a span may wrap over a line break.
PROSE = re.sub(r"^```.*?^```", "", README, flags=re.M | re.S)
INLINE = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", PROSE)]
INLINE_COMMANDS = [shlex.split(span) for span in INLINE if re.match(r"(make|roadgate|airflow dags trigger)\b", span)]


def usage_variants(words: list[str]) -> list[list[str]]:
    """A usage line as the command lines it stands for: `[--opt v]` given, one line per `a|b` choice."""
    words = [w.removeprefix("[").removesuffix("]") for w in words]
    return [list(line) for line in itertools.product(*(w.split("|") for w in words))]


ROADGATE_LINES = [line for words in SH_COMMANDS if words[0] == "roadgate" for line in usage_variants(words)]


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    """The CLI's parser, taking options only by their full names: a README flag that is a prefix
    of a real one (what a renamed flag often leaves behind) parses for argparse, not here."""
    from jobs.cli import build_parser
    parser = build_parser()
    for sub in parsers(parser):
        sub.allow_abbrev = False
    return parser


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and its subcommands' parsers, at any depth."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += parsers(sub)
    return found


def subcommand(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    """The deepest subparser the leading words name, and the words after them."""
    while words:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers or words[0] not in subparsers[0].choices:
            break
        parser, words = subparsers[0].choices[words[0]], words[1:]
    return parser, words


def test_the_readme_shows_commands():
    """The extraction itself: if it found nothing, every other test here would pass vacuously."""
    assert len(ROADGATE_LINES) > 15 and INLINE_COMMANDS and any(w[0] == "make" for w in SH_COMMANDS)


@pytest.mark.parametrize("line", ROADGATE_LINES, ids=" ".join)
def test_roadgate_command_parses(parser, line, capsys):
    try:
        args = parser.parse_args(line[1:])
    except SystemExit:
        error = capsys.readouterr().err.strip().splitlines()[-1]   # argparse's last line names the problem
        pytest.fail(f"README: `{shlex.join(line)}` does not parse: {error}")
    if args.command == "bench":
        from jobs.workloads import get_workload
        get_workload(args.workload)


def test_inline_roadgate_names_are_subcommands_and_options(parser):
    for words in INLINE_COMMANDS:
        if words[0] == "roadgate" and words[1:] != ["..."]:
            sub, rest = subcommand(parser, words[1:])
            assert sub is not parser, f"README: `{shlex.join(words)}` names no subcommand"
            unknown = [w for w in rest if w.startswith("-") and w not in sub._option_string_actions]
            assert not unknown, f"README: `{shlex.join(words)}`: {unknown} are not options of it"
    every_option = {option for sub in parsers(parser) for option in sub._option_string_actions}
    flags = {w for span in INLINE if span.startswith("--") for w in span.split() if w.startswith("--")}
    assert flags and flags <= every_option, f"README names options no subcommand has: {sorted(flags - every_option)}"


def test_make_targets_and_variables_exist():
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", MAKEFILE, re.M))
    variables = set(re.findall(r"^([A-Z_]+)\s*[?:]?=", MAKEFILE, re.M))
    makes = [w for w in SH_COMMANDS + INLINE_COMMANDS if w[0] == "make"]
    for words in makes:
        for word in words[1:]:
            name, assigned, value = word.partition("=")
            if assigned:
                assert name in variables, f"README: `{shlex.join(words)}`: the Makefile has no variable {name}"
                if name == "NIGHTLY_CONF":
                    check_dag_conf("nightly_benchmark", value)
            else:
                assert word in targets, f"README: `{shlex.join(words)}`: the Makefile has no target {word}"


def check_dag_conf(dag_id: str, conf: str) -> None:
    """A DAG run's conf as the README shows it, through the job function that reads it."""
    from jobs.batch import parse_params
    from jobs.gates.triage_chain import triage_params
    from jobs.nightly import resolve_config
    readers = {"nightly_benchmark": lambda c: resolve_config(c, gpu_present=lambda: False),
               "batch_generation": parse_params, "bisect_regression": triage_params}
    assert dag_id in readers, f"README triggers {dag_id}: add how its conf is checked here"
    readers[dag_id](json.loads(conf))


def test_airflow_triggers_name_dags_and_confs_they_accept():
    dag_ids = set(re.findall(r'dag_id="(\w+)"', "".join(p.read_text() for p in (REPO / "dags").glob("*.py"))))
    triggers = [w for w in SH_COMMANDS + INLINE_COMMANDS if w[:3] == ["airflow", "dags", "trigger"]]
    assert triggers
    for words in triggers:
        assert words[3] in dag_ids, f"README: `{shlex.join(words)}`: no DAG {words[3]} in dags/"
        conf = words[words.index("--conf") + 1]
        check_dag_conf(words[3], conf)


def test_repo_paths_exist():
    words = {w for span in INLINE for w in span.split()} | {w for line in SH_COMMANDS for w in line}
    # What tests write (tests/artifacts/...) exists only once they have run.
    paths = {w for w in words if w.split("/")[0] in REPO_DIRS and "/" in w
             and not any(w.startswith(g) for g in GENERATED)}
    assert len(paths) > 10
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"README names paths the repo does not have: {missing}"


def test_python_names_resolve():
    names = {m for span in INLINE for m in re.findall(r"\b((?:jobs|engine)(?:\.\w+)+)", span)}
    assert names
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):   # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ModuleNotFoundError:
                continue
        for attribute in parts[cut:]:
            assert hasattr(obj, attribute), f"README names {name}: {obj.__name__} has no {attribute}"
            obj = getattr(obj, attribute)


def test_environment_variables_are_read():
    code = "".join(p.read_text() for d in ("jobs", "engine", "dags", "cluster", "tests") for p in (REPO / d).rglob("*.py"))
    named = set(re.findall(r"\bROADGATE_[A-Z_]+", README))
    unread = sorted(v for v in named if f'"{v}"' not in code)
    assert named and not unread, f"README names environment variables no code reads: {unread}"


def test_pip_extras_exist():
    import tomllib
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {extra for words in SH_COMMANDS if words[0].endswith("pip") for w in words
             for group in re.findall(r"^\.\[(.*)\]$", w) for extra in group.split(",")}
    assert named and named <= extras, f"README installs extras pyproject.toml lacks: {sorted(named - extras)}"
