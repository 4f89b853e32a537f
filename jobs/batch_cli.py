"""`roadgate batch show`: what a committed batch generation holds, read through its manifest."""
from __future__ import annotations

import argparse

from jobs.errors import BatchError, UsageError

SAMPLE_CHARS = 120


def summarize(output_uri: str) -> str:
    """A few lines: rows, tokens, parts, the run that recorded it, and the first row's answer.
    Every part is checked against the manifest's sha256 on the way (as any reader must)."""
    from jobs.batch import read_committed, read_manifest

    manifest = read_manifest(output_uri)
    table = read_committed(output_uri)
    finish = table.column("finish_reason").to_pylist()
    lines = [f"batch {output_uri}: {manifest['rows']} rows, {manifest['output_tokens']} output tokens "
             f"in {len(manifest['parts'])} parts (stop {finish.count('stop')}, length {finish.count('length')})",
             f"  committed {manifest['committed_at']} by {manifest['dag_id']} run {manifest['run_id']}; "
             f"results store run {manifest['store_run_id']}",
             f"  input {manifest['input']['uri']} (sha256 {manifest['input']['sha256'][:12]})"]
    if table.num_rows:
        first = table.slice(0, 1).to_pylist()[0]
        answer = " ".join(first["output_text"].split())
        lines.append(f"  row {first['id']}: {answer[:SAMPLE_CHARS]}{'…' if len(answer) > SAMPLE_CHARS else ''}")
    return "\n".join(lines)


def cmd_batch_show(args: argparse.Namespace) -> int:
    try:
        print(summarize(args.output_uri))
    except (BatchError, OSError, ValueError) as e:
        raise UsageError(str(e)) from None
    return 0


def register(sub) -> None:
    batch = sub.add_parser("batch", help="inspect batch generation outputs")
    commands = batch.add_subparsers(dest="batch_command", required=True)
    show = commands.add_parser("show", help="rows, tokens and parts of a committed batch, and its first answer")
    show.add_argument("output_uri", help="the batch's output_uri (the directory holding _manifest.json)")
    show.set_defaults(func=cmd_batch_show)
