"""`roadgate` command line: one subcommand per job module.

Each module in COMMANDS exposes `register(subparsers)`, which adds its
subcommand(s) and sets `func` on the parsed namespace to a callable taking the
namespace and returning an exit code.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from jobs.errors import UsageError

COMMANDS = ["jobs.generate", "jobs.bench", "jobs.store_cli", "jobs.preflight", "jobs.report_cli", "jobs.batch_cli"]


class DefaultsShownFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's help ends with its default, unless there is none to show (unset, or an off switch)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:   # not `in`: 0 == False
            return action.help
        return super()._get_help_string(action)


class SubcommandParser(argparse.ArgumentParser):
    def __init__(self, *args, formatter_class=DefaultsShownFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="roadgate", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # Alembic's INFO lines (plugin set-up, DDL mode) came with every command's store open.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except UsageError as e:
        print(f"roadgate {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:   # `roadgate gates status | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":   # `python -m jobs.cli`, as `bench --ref` runs a commit's bench
    sys.exit(main())
