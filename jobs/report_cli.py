"""`roadgate report` (the HTML dashboard) and `roadgate docs` (docs/STATUS.md, docs/BENCHMARKS.md)."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from jobs.errors import StoreNotReady, StoreUnavailable, UsageError
from jobs.report import check_docs, render_dashboard, write_docs
from jobs.store.evidence import export_evidence, import_evidence
from jobs.store.ready import open_ready_store

EVIDENCE_DIR = "evidence"   # under the docs folder


def _directory(value: str, flag: str) -> Path:
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {value}: exists and is not a directory")
    return path


def _open(db_url: str | None):
    """The store, refusing to create one as a side effect of reading it, and refusing one that
    holds no run: a dashboard or docs of nothing would only replace the published ones."""
    try:
        store = open_ready_store(db_url, existing=True)
    except StoreUnavailable as e:
        raise UsageError(str(e)) from None
    with store.engine.connect() as conn:
        if conn.execute(text("SELECT COUNT(*) FROM runs")).scalar() == 0:
            raise UsageError("no results yet: the store holds no run (`roadgate bench` records the first)")
    return store


def _one_line(error: Exception) -> str:
    if isinstance(error, OperationalError):  # SQLAlchemy's text spans lines: statement, link to its docs
        return "cannot read the results database: " + (str(error.orig).strip().splitlines() or ["?"])[0]
    return str(error)


def cmd_report(args) -> int:
    out = _directory(args.out, "--out")
    try:
        path = render_dashboard(_open(args.db_url), out, recent_runs=args.recent_runs)
    except (StoreNotReady, OperationalError) as e:
        raise UsageError(_one_line(e)) from None
    print(f"dashboard written to {path}")


def cmd_docs(args) -> int:
    out = _directory(args.out, "--out")
    if args.evidence:
        if not args.check:
            raise UsageError("--evidence checks the docs against shipped evidence; it goes with --check")
        return _check_against_evidence(out, _directory(args.evidence, "--evidence"))
    store = _open(args.db_url)
    try:
        if not args.check:
            for path in write_docs(store, out):
                print(f"wrote {path}")
            # The evidence the docs now cite, appended beside them so a fresh clone can check them.
            added = export_evidence(store, out / EVIDENCE_DIR)
            print(f"evidence: {sum(added.values())} new records in {out / EVIDENCE_DIR}")
            return 0
        differences = check_docs(store, out)
    except (StoreNotReady, OperationalError) as e:
        raise UsageError(_one_line(e)) from None
    return _report_differences(differences, out)


def _check_against_evidence(out: Path, evidence: Path) -> int:
    """The docs against the evidence shipped with them, loaded into a throwaway store."""
    if not (evidence / "runs.jsonl").is_file():
        raise UsageError(f"--evidence {evidence}: no runs.jsonl there (`roadgate docs` exports it)")
    with tempfile.TemporaryDirectory(prefix="roadgate-evidence-") as scratch:
        store = open_ready_store(f"sqlite:///{scratch}/evidence.db", f"{scratch}/requests")
        try:
            import_evidence(evidence, store)
            return _report_differences(check_docs(store, out), out)
        finally:
            store.engine.dispose()


def _report_differences(differences: list, out: Path) -> int:
    for difference in differences:
        print(difference, file=sys.stderr)
    if differences:
        print(f"{len(differences)} differences between {out} and the data; regenerate with `roadgate docs`",
              file=sys.stderr)
        return 1
    print(f"{out}: STATUS.md and BENCHMARKS.md agree with the data")
    return 0


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number, got {value!r}")
    return number


def register(subparsers) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db-url", help="SQLAlchemy URL (default: $ROADGATE_DB_URL, else a SQLite file in the data dir)")

    report = subparsers.add_parser("report", parents=[common], help="render the static HTML dashboard")
    report.add_argument("--out", required=True, help="directory to write index.html into (created if missing)")
    report.add_argument("--recent-runs", type=_positive, default=30, help="how many recent runs to list (default 30)")
    report.set_defaults(func=cmd_report)

    docs = subparsers.add_parser("docs", parents=[common], help="write or check docs/STATUS.md and docs/BENCHMARKS.md")
    docs.add_argument("--out", default="docs", help="docs directory (default: docs)")
    docs.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming each difference between the docs and the data")
    docs.add_argument("--evidence", help="with --check: check against this evidence folder (e.g. docs/evidence, "
                                         "which `roadgate docs` writes) instead of the results store")
    docs.set_defaults(func=cmd_docs)
