"""Streaming readers for prompt files (JSONL, CSV, Parquet) with row-level validation.

Each row becomes a PromptRow: an id, and either a plain `prompt` or chat
`messages`. Rows are yielded one at a time so that inputs of any size run in
constant memory; a bad row raises InputError naming its line or row number.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}


class InputError(ValueError):
    """The prompts file is missing, unreadable or has a bad row."""


@dataclass
class PromptRow:
    id: str
    prompt: str | None = None
    messages: list[dict] | None = None

    @property
    def engine_prompt(self) -> str | list[dict]:
        return self.prompt if self.prompt is not None else self.messages


def input_format(path: Path) -> str:
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise InputError(f"{path}: unknown input format {path.suffix!r}; use .jsonl, .csv or .parquet")
    return fmt


def read_prompts(path: str | Path) -> Iterator[PromptRow]:
    path = Path(path)
    fmt = input_format(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    try:
        reader = {"jsonl": _jsonl_rows, "csv": _csv_rows, "parquet": _parquet_rows}[fmt]
        for where, index, record in reader(path):
            yield _to_row(record, where, index)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}") from e


def _jsonl_rows(path: Path):
    index = 0
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}: line {lineno}: malformed JSON ({e.msg})") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}: line {lineno}: expected a JSON object, got {type(record).__name__}")
            yield f"{path}: line {lineno}", index, record
            index += 1


def _csv_rows(path: Path):
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        for index, record in enumerate(reader):
            where = f"{path}: line {reader.line_num}"
            if None in record:
                raise InputError(f"{where}: more fields than the header has columns")
            if isinstance(record.get("messages"), str) and record["messages"].strip():
                try:
                    record["messages"] = json.loads(record["messages"])
                except json.JSONDecodeError as e:
                    raise InputError(f"{where}: 'messages' is not valid JSON ({e.msg})") from None
            yield where, index, record


def _parquet_rows(path: Path):
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid and others for non-Parquet files
        raise InputError(f"{path}: not a readable Parquet file ({e})") from None
    index = 0
    for batch in pf.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            yield f"{path}: row {index + 1}", index, record
            index += 1


def _to_row(record: dict, where: str, index: int) -> PromptRow:
    row_id = record.get("id")
    row_id = str(index) if row_id is None or row_id == "" else str(row_id)
    prompt, messages = record.get("prompt"), record.get("messages")
    if prompt is not None and prompt != "":
        if not isinstance(prompt, str):
            raise InputError(f"{where}: 'prompt' must be a string")
        if not prompt.strip():
            raise InputError(f"{where}: 'prompt' is empty")
        return PromptRow(row_id, prompt=prompt)
    if messages is not None and messages != "":
        if not isinstance(messages, list) or not messages:
            raise InputError(f"{where}: 'messages' must be a non-empty list of chat turns")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise InputError(f"{where}: message {i} must have string 'role' and 'content'")
        if not any(m["content"].strip() for m in messages):
            raise InputError(f"{where}: every message is empty")
        return PromptRow(row_id, messages=[{"role": m["role"], "content": m["content"]} for m in messages])
    if "prompt" in record or "messages" in record:
        raise InputError(f"{where}: the prompt is empty")
    raise InputError(f"{where}: row has neither a 'prompt' nor a 'messages' column")
