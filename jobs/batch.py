"""Sharded batch generation as plain functions; dags/batch_generation.py only wires them.

    parse_params -> split_input -> generate_shard per shard (one GPU each) -> commit_batch

Output layout under the output directory (local path or file:// URI):

    part-00000-of-00003.parquet ...   one per shard, each written atomically
    _manifest.json                    written last: the batch is committed when it exists
    _staging/<run key>/               the shards' inputs, removed at commit

Every part carries its DAG run's key in its Parquet footer. A shard whose part is
already there (with this run's key and the shard's row count) is skipped, so a
retried or re-run task never writes a row twice; a task killed mid-write leaves
only a dot-prefixed temporary file, which readers ignore and commit removes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.atomic import atomic_parquet_writer
from jobs.prompts_io import InputError, read_prompts

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
STAGING = "_staging"
SPLIT_FILE = "split.json"
RUN_KEY_META = b"roadgate.batch_run_key"
SHARD_INPUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.string()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
])
RUN_ID_NAMESPACE = uuid.UUID("0f6b1f6a-3c2e-4d0b-9b8e-6f3f8f5a9c11")
SAMPLING_KEYS = ("max_tokens", "temperature", "top_p", "top_k")
# What the store's runs.workload says for a batch generation (it is not a bench workload).
STORE_WORKLOAD = "batch-generation"


class BatchError(ValueError):
    """Bad parameters, input or output for a batch generation; the message names the problem."""


@dataclass(frozen=True)
class BatchParams:
    model: str
    input_uri: str
    output_uri: str
    num_shards: int
    backend: str = "auto"
    sampling: dict = field(default_factory=dict)    # SamplingParams fields other than the seed
    seed: int = 0
    row_group_size: int = 256

    @property
    def input_path(self) -> Path:
        return _local_path(self.input_uri, "input_uri")

    @property
    def output_dir(self) -> Path:
        return _local_path(self.output_uri, "output_uri")

    def as_dict(self) -> dict:
        return asdict(self)


def _local_path(uri: str, what: str) -> Path:
    if uri.startswith("file://"):
        return Path(uri[len("file://"):])
    if "://" in uri:
        raise BatchError(f"{what}: only local paths and file:// URIs are supported so far, got {uri!r}")
    return Path(uri)


def parse_params(raw: dict) -> BatchParams:
    """The DAG's params as BatchParams; what the JSON schema cannot check is checked here."""
    from engine import SamplingParams

    missing = [name for name in ("model", "input_uri", "output_uri", "num_shards") if raw.get(name) in (None, "")]
    if missing:
        raise BatchError(f"missing parameter(s): {', '.join(missing)}")
    # Refuse URIs no worker can read now, not in a shard task later.
    _local_path(raw["input_uri"], "input_uri")
    _local_path(raw["output_uri"], "output_uri")
    sampling = {k: v for k, v in (raw.get("sampling") or {}).items() if k != "seed"}
    unknown = sorted(set(sampling) - set(SAMPLING_KEYS))
    if unknown:
        raise BatchError(f"sampling: unknown field(s) {', '.join(unknown)}; known: {', '.join(SAMPLING_KEYS)}, seed")
    try:
        SamplingParams(**sampling)
    except (TypeError, ValueError) as e:
        raise BatchError(f"sampling: {e}") from None
    params = BatchParams(model=raw["model"], input_uri=raw["input_uri"], output_uri=raw["output_uri"],
                         num_shards=int(raw["num_shards"]), backend=raw.get("backend", "auto"), sampling=sampling,
                         seed=int((raw.get("sampling") or {}).get("seed", 0)),
                         row_group_size=int(raw.get("row_group_size", 256)))
    if params.num_shards < 1 or params.row_group_size < 1:
        raise BatchError("num_shards and row_group_size must be >= 1")
    return params


def run_key(dag_id: str, run_id: str) -> str:
    """The DAG run an output directory belongs to, as a path-safe string."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{dag_id}__{run_id}")


def part_name(index: int, num_shards: int) -> str:
    return f"part-{index:05d}-of-{num_shards:05d}.parquet"


def _part_run_key(path: Path) -> str | None:
    metadata = pq.read_schema(path).metadata or {}
    value = metadata.get(RUN_KEY_META)
    return value.decode() if value is not None else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _refuse_foreign_output(output: Path, key: str) -> None:
    """An output directory holds one batch: refuse one that another DAG run wrote to."""
    manifest = output / MANIFEST
    if manifest.exists():
        owner = json.loads(manifest.read_text())["run_key"]
        if owner != key:
            raise BatchError(f"output_uri {output} already holds the committed batch of run {owner}; "
                             "choose another output_uri")
    for part in sorted(output.glob("part-*.parquet")):
        owner = _part_run_key(part)
        if owner != key:
            raise BatchError(f"output_uri {output} holds {part.name} from run {owner}; "
                             "choose another output_uri or remove that run's output")


def split_input(params: BatchParams, key: str) -> list[dict]:
    """Validate every input row, then cut the input into contiguous shards (input order is
    kept: part i holds the rows after part i-1's). Returns the shard specs; they and the
    input's row count and checksum are kept in the staging directory for commit_batch.

    Deterministic, so a re-run of the split rewrites the same shards."""
    from jobs.bench import _utcnow

    started_at = _utcnow()
    output = params.output_dir
    output.mkdir(parents=True, exist_ok=True)
    _refuse_foreign_output(output, key)
    seen: set[str] = set()
    try:
        for row in read_prompts(params.input_path):
            if row.id in seen:
                raise BatchError(f"{params.input_path}: id {row.id!r} appears twice; ids must be unique")
            seen.add(row.id)
    except InputError as e:
        raise BatchError(str(e)) from None
    total = len(seen)
    if total == 0:
        raise BatchError(f"{params.input_path}: no rows")
    n = min(params.num_shards, total)   # never an empty shard
    bounds = [i * total // n for i in range(n + 1)]
    staging = output / STAGING / key
    shards = []
    rows = read_prompts(params.input_path)
    for i in range(n):
        shard_rows = [next(rows) for _ in range(bounds[i + 1] - bounds[i])]
        shard_input = staging / f"shard-{i:05d}.parquet"
        with atomic_parquet_writer(shard_input, SHARD_INPUT_SCHEMA) as writer:
            writer.write_table(pa.Table.from_pylist(
                [{"id": r.id, "prompt": r.prompt, "messages": r.messages} for r in shard_rows], SHARD_INPUT_SCHEMA))
        shards.append({"index": i, "num_shards": n, "rows": len(shard_rows), "first_row": bounds[i],
                       "input_path": str(shard_input), "part_path": str(output / part_name(i, n))})
    facts = {"shards": shards, "input_rows": total, "input_sha256": _sha256(params.input_path),
             "started_at": started_at.isoformat()}
    # What commit checks the parts against, kept beside the shards' inputs.
    tmp = staging / f".{SPLIT_FILE}.tmp"
    tmp.write_text(json.dumps(facts, indent=1))
    os.replace(tmp, staging / SPLIT_FILE)
    return shards


def _output_tokens(part: Path) -> int:
    return pq.read_table(part, columns=["output_tokens"]).column(0).to_numpy().sum().item()


def _committed_part(shard: dict, key: str) -> bool:
    part = Path(shard["part_path"])
    return (part.exists() and _part_run_key(part) == key
            and pq.ParquetFile(part).metadata.num_rows == shard["rows"])


def generate_shard(shard: dict, params: BatchParams, key: str, *,
                   after_row_group: Callable[[int], None] | None = None) -> dict:
    """Generate one shard's part, atomically; skip a shard whose part this run already wrote."""
    from engine import LLM
    from jobs.bench import host_facts
    from jobs.generate import GenerateError, generate_file

    part = Path(shard["part_path"])
    host = host_facts()
    facts = {"index": shard["index"], "rows": shard["rows"], "hardware_class": host["hardware_class"],
             "host": host["host"]}
    if _committed_part(shard, key):
        log.info("shard %d: %s is already written by this run; skipped", shard["index"], part.name)
        return {**facts, "skipped": True, "engine_s": None, "output_tokens": _output_tokens(part)}
    llm = LLM(params.model, backend=params.backend, seed=params.seed)
    start = time.perf_counter()
    try:
        counts = generate_file(llm, lambda: read_prompts(shard["input_path"]), part, params.sampling,
                               seed=params.seed, row_group_size=params.row_group_size,
                               file_metadata={RUN_KEY_META: key.encode()}, after_row_group=after_row_group)
    except GenerateError as e:
        raise BatchError(f"shard {shard['index']}: {e}") from None
    engine_s = time.perf_counter() - start
    if counts["rows"] != shard["rows"]:
        raise BatchError(f"shard {shard['index']}: wrote {counts['rows']} rows, expected {shard['rows']}")
    return {**facts, "skipped": False, "engine_s": engine_s, "output_tokens": _output_tokens(part)}


def commit_batch(shard_results: list[dict], params: BatchParams, key: str, dag_id: str, run_id: str,
                 store=None) -> dict:
    """Check every part, record the run in the store, then write the manifest (the commit).

    Idempotent: a re-run finds the run recorded and rewrites the same manifest."""
    from jobs.bench import _utcnow
    from jobs.store import MetricRecord, RunRecord, open_store, record_run, upgrade

    output = params.output_dir
    manifest_path = output / MANIFEST
    if manifest_path.exists():
        existing = json.loads(manifest_path.read_text())
        if existing["run_key"] == key:
            log.info("batch already committed: %s", manifest_path)
            _remove_leftovers(output, key)
            return existing
    split_path = output / STAGING / key / SPLIT_FILE
    if not split_path.exists():
        raise BatchError(f"{split_path} is missing: run split_input for this run first")
    split = json.loads(split_path.read_text())
    parts = []
    for shard in split["shards"]:
        if not _committed_part(shard, key):
            raise BatchError(f"shard {shard['index']}: {shard['part_path']} is missing or not this run's")
        path = Path(shard["part_path"])
        parts.append({"path": path.name, "rows": shard["rows"], "first_row": shard["first_row"],
                      "bytes": path.stat().st_size, "sha256": _sha256(path)})
    total = sum(p["rows"] for p in parts)
    if total != split["input_rows"]:
        raise BatchError(f"the parts hold {total} rows, the input {split['input_rows']}")

    finished = _utcnow()
    started = datetime.fromisoformat(split["started_at"])
    engine_s = sum(r["engine_s"] or 0.0 for r in shard_results)
    tokens = sum(r["output_tokens"] for r in shard_results)
    store = store or open_store()
    upgrade(store.engine)
    store_run_id = record_run(store, RunRecord(
        kind="generate", workload=STORE_WORKLOAD, hardware_class=shard_results[0]["hardware_class"],
        started_at=started, finished_at=finished, preflight_status="skipped",
        config={"parameters": params.as_dict(), "input_sha256": split["input_sha256"],
                "hosts": sorted({r["host"] for r in shard_results})},
        id=str(uuid.uuid5(RUN_ID_NAMESPACE, key)), airflow_dag_id=dag_id, airflow_run_id=run_id,
    ), [MetricRecord("ours", "wall_s", (finished - started).total_seconds(), count=total)]
       + ([MetricRecord("ours", "output_tok_s", tokens / engine_s, count=total)] if engine_s > 0 else []))

    manifest = {"run_key": key, "dag_id": dag_id, "run_id": run_id, "store_run_id": store_run_id,
                "committed_at": finished.isoformat(), "rows": total, "output_tokens": tokens,
                "input": {"uri": params.input_uri, "rows": split["input_rows"], "sha256": split["input_sha256"]},
                "parameters": params.as_dict(), "parts": parts}
    tmp = output / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, manifest_path)
    _remove_leftovers(output, key)
    return manifest


def _remove_leftovers(output: Path, key: str) -> None:
    """After the commit: killed writers' dot-prefixed temporaries and the shards' inputs."""
    for leftover in output.glob(".part-*.tmp"):
        leftover.unlink(missing_ok=True)
    shutil.rmtree(output / STAGING / key, ignore_errors=True)
    with contextlib.suppress(OSError):   # another run's staging may still be there
        (output / STAGING).rmdir()


def read_committed(output_uri: str) -> pa.Table:
    """The committed batch, parts in shard order; refuses an output with no manifest."""
    output = _local_path(output_uri, "output_uri")
    manifest_path = output / MANIFEST
    if not manifest_path.exists():
        raise BatchError(f"{output}: no {MANIFEST}; the batch is not committed")
    manifest = json.loads(manifest_path.read_text())
    return pa.concat_tables([pq.read_table(output / p["path"]) for p in manifest["parts"]])
