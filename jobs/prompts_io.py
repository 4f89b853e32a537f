"""Streaming readers for prompt files (JSONL, CSV, Parquet) with row-level validation.

Each row becomes a PromptRow: an id, and either a plain `prompt` or chat
`messages`. Rows are yielded one at a time so that inputs of any size run in
constant memory; a bad row raises InputError naming its line or row number.
"""
from __future__ import annotations

import codecs
import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from jobs.errors import InputError

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}
# Bytes of a line, characters of a CSV field. No model here takes a prompt near this long
# (131072 tokens are well under 1 MiB of text); the cap keeps one endless line or field
# from exhausting memory.
MAX_ROW_SIZE = 16 * 2**20
_UTF16_32_BOMS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32",
                  codecs.BOM_UTF16_LE: "UTF-16", codecs.BOM_UTF16_BE: "UTF-16"}


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


def count_prompts(path: str | Path) -> int:
    """Reads every row of `path` and returns how many there are; refuses a bad row, an id
    that appears twice (ids are compared as the text they are written out as, so 1 and "1"
    are the same id) and a file without rows. `generate` and the batch split both check this."""
    seen: set[str] = set()
    for row in read_prompts(path):
        if row.id in seen:
            raise InputError(f"{path}: id {row.id!r} appears twice; ids must be unique")
        seen.add(row.id)
    if not seen:
        raise InputError(f"{path}: no rows")
    return len(seen)


def _text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 file, decoded line by line so that a bad byte anywhere
    names its line. A UTF-8 byte-order mark (Excel's "CSV UTF-8" writes one) is skipped."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(iter(lambda: f.readline(MAX_ROW_SIZE + 1), b""), 1):
            if lineno == 1:
                for bom, encoding in _UTF16_32_BOMS.items():
                    if raw.startswith(bom):
                        raise InputError(f"{path}: the file is {encoding} (it starts with a {encoding} "
                                         "byte-order mark); save it as UTF-8")
                raw = raw.removeprefix(codecs.BOM_UTF8)
            if len(raw) > MAX_ROW_SIZE:
                raise InputError(f"{path}: line {lineno} is longer than {MAX_ROW_SIZE // 2**20} MiB")
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}: line {lineno}: byte {raw[e.start]:#04x} (byte {e.start + 1} of the line) "
                                 "is not UTF-8; the file must be UTF-8 text") from None


def _parse_json(text: str, where: str):
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and integers past Python's digit limit
        raise InputError(f"{where}: malformed JSON ({getattr(e, 'msg', e)})") from None


def _jsonl_rows(path: Path):
    index = 0
    for lineno, line in _text_lines(path):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        record = _parse_json(line, where)
        if not isinstance(record, dict):
            raise InputError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, index, record
        index += 1


def _csv_rows(path: Path):
    csv.field_size_limit(MAX_ROW_SIZE)   # the default, 128 Ki characters, is below a long prompt
    reader = csv.DictReader(line for _, line in _text_lines(path))
    index = 0
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None
        where = f"{path}: line {reader.line_num}"
        if None in record:
            raise InputError(f"{where}: more fields than the header has columns")
        if isinstance(record.get("messages"), str) and record["messages"].strip():
            record["messages"] = _parse_json(record["messages"], f"{where}: 'messages'")
        yield where, index, record
        index += 1


def _parquet_rows(path: Path):
    import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises ArrowInvalid and others for non-Parquet files
        raise InputError(f"{path}: not a readable Parquet file ({e})") from None
    index = 0
    for batch in pf.iter_batches(batch_size=1024):
        try:
            records = batch.to_pylist()
        except UnicodeDecodeError:
            raise InputError(f"{path}: rows {index + 1}-{index + batch.num_rows}: "
                             "a string column holds bytes that are not valid UTF-8") from None
        for record in records:
            yield f"{path}: row {index + 1}", index, record
            index += 1


def _check_text(value: str, where: str, what: str) -> None:
    """JSON escapes can spell lone surrogates ("\\ud800"): not Unicode text, and no encoder
    (the tokenizer's, Parquet's) takes them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{where}: {what} holds a lone surrogate ({value[e.start]!r}), "
                         "which is not Unicode text") from None


def _row_id(record: dict, where: str, index: int) -> str:
    row_id = record.get("id")
    if row_id is None or row_id == "":
        return str(index)
    # bool is an int, and a float or a list has no one text form: ids are text or integers.
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)):
        raise InputError(f"{where}: 'id' must be a string or an integer, got {type(row_id).__name__}")
    if isinstance(row_id, str):
        _check_text(row_id, where, "'id'")
    return str(row_id)


def _to_row(record: dict, where: str, index: int) -> PromptRow:
    row_id = _row_id(record, where, index)
    prompt, messages = record.get("prompt"), record.get("messages")
    if prompt is not None and prompt != "":
        if not isinstance(prompt, str):
            raise InputError(f"{where}: 'prompt' must be a string")
        if not prompt.strip():
            raise InputError(f"{where}: 'prompt' is empty")
        _check_text(prompt, where, "'prompt'")
        return PromptRow(row_id, prompt=prompt)
    if messages is not None and messages != "":
        if not isinstance(messages, list) or not messages:
            raise InputError(f"{where}: 'messages' must be a non-empty list of chat turns")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise InputError(f"{where}: message {i} must have string 'role' and 'content'")
            _check_text(m["role"] + m["content"], where, f"message {i}")
        if not any(m["content"].strip() for m in messages):
            raise InputError(f"{where}: every message is empty")
        return PromptRow(row_id, messages=[{"role": m["role"], "content": m["content"]} for m in messages])
    if "prompt" in record or "messages" in record:
        raise InputError(f"{where}: the prompt is empty")
    raise InputError(f"{where}: row has neither a 'prompt' nor a 'messages' column")
