"""Sharded batch generation as plain functions; dags/batch_generation.py only wires them.

    parse_params -> split_input -> generate_shard per shard (one GPU each) -> commit_batch

Output layout under the output directory (local path or file:// URI):

    _claim.json                       the DAG run the directory belongs to, and its input's size and sha256
    part-00000-of-00003.parquet ...   one per shard, each written atomically, never replaced
    _manifest.json                    written last: the batch is committed when it exists
    _staging/<run key>/               the shards' inputs and attempts, removed at commit

The first split claims the directory for its DAG run; a task of any other run is refused
there, and a retried split that finds the input changed fails instead of mixing rows of
two inputs. Every part carries its DAG run's key in its Parquet footer. A shard is
generated into an attempt directory of its own and published by a hard link, which never
replaces a part: a shard whose part is already there is skipped, so a retried, re-run or
duplicated task never writes a row twice. A killed task leaves only temporary files named
after their process (jobs.tempfiles); commit removes those whose process is gone.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Callable
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.atomic import atomic_parquet_writer
from jobs.prompts_io import InputError, count_prompts, read_prompts
from jobs.tempfiles import owned_name, remove_dead_temporaries

log = logging.getLogger(__name__)

CLAIM = "_claim.json"
MANIFEST = "_manifest.json"
STAGING = "_staging"
SPLIT_FILE = "split.json"
RUN_KEY_META = b"roadgate.batch_run_key"
SHARD_INPUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("prompt", pa.string()),
    ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
])
RUN_ID_NAMESPACE = uuid.UUID("0f6b1f6a-3c2e-4d0b-9b8e-6f3f8f5a9c11")
# What a trigger's `sampling` fields are merged over (greedy: a batch's outputs are then
# reproducible text; a partial {"max_tokens": 64} used to fall to SamplingParams' temperature 1).
SAMPLING_DEFAULTS = {"max_tokens": 256, "temperature": 0.0, "top_p": 1.0, "top_k": 0}
SAMPLING_KEYS = tuple(SAMPLING_DEFAULTS)
# What the store's runs.workload says for a batch generation (it is not a bench workload).
STORE_WORKLOAD = "batch-generation"
# The code a shard ran, as bench records it (jobs.bench.host_facts: git state and jobs.code_identity's hash).
CODE_FACTS = ("git_sha", "git_dirty", "code_hash")


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
    """The local path a path or file:// URI names. Refused: other schemes, a file URI naming
    another host (it would silently mean this host's path), a query or fragment (an
    unescaped ? or # in a file name), and '..' segments (through a symlink they name
    another place than they seem to)."""
    path = uri
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise BatchError(f"{what}: {uri!r} names host {parts.netloc!r}; only this host's files "
                             "(file:///path) are supported")
        if parts.query or parts.fragment:
            raise BatchError(f"{what}: {uri!r} has a query or fragment; percent-encode ? and # in file names")
        path = unquote(parts.path)
    elif "://" in uri:
        raise BatchError(f"{what}: only local paths and file:// URIs are supported so far, got {uri!r}")
    if ".." in PurePosixPath(path).parts:
        raise BatchError(f"{what}: {uri!r} has a '..' segment; give the path it stands for")
    return Path(path)


def parse_params(raw: dict) -> BatchParams:
    """The DAG's params as BatchParams; what the JSON schema cannot check is checked here."""
    from engine import SamplingParams

    missing = [name for name in ("model", "input_uri", "output_uri", "num_shards") if raw.get(name) in (None, "")]
    if missing:
        raise BatchError(f"missing parameter(s): {', '.join(missing)}")
    # Refuse URIs no worker can read now, not in a shard task later.
    _local_path(raw["input_uri"], "input_uri")
    _local_path(raw["output_uri"], "output_uri")
    given = {k: v for k, v in (raw.get("sampling") or {}).items() if k != "seed"}
    unknown = sorted(set(given) - set(SAMPLING_KEYS))
    if unknown:
        raise BatchError(f"sampling: unknown field(s) {', '.join(unknown)}; known: {', '.join(SAMPLING_KEYS)}, seed")
    sampling = SAMPLING_DEFAULTS | given
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


def _input_pin(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _write_json(path: Path, doc: dict, *, exclusive: bool = False) -> None:
    """`doc` at `path`, whole or not at all: written and synced under a temporary name, then
    renamed into place, or with `exclusive` linked there (FileExistsError if `path` exists)."""
    tmp = path.parent / owned_name(path.name)
    try:
        with open(tmp, "x") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path) if exclusive else os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _refuse_foreign_output(output: Path, key: str) -> None:
    """A directory without a claim may still hold a batch written before claims existed."""
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


def _claimed(output: Path, key: str) -> dict | None:
    """The claim on `output` if it is this run's, None if there is none; refuses another run's."""
    try:
        claim = json.loads((output / CLAIM).read_text())
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise BatchError(f"output_uri {output} is not a directory") from None
    if claim["run_key"] != key:
        raise BatchError(f"output_uri {output} belongs to run {claim['run_key']} (it wrote there first); "
                         "choose another output_uri")
    return claim


def _claim(output: Path, key: str, pin: dict) -> None:
    """Claims `output` for this run and its input (size and sha256), or checks that a retry
    sees the input this run claimed it with."""
    claim = _claimed(output, key)
    if claim is None:
        output.mkdir(parents=True, exist_ok=True)
        _refuse_foreign_output(output, key)
        with contextlib.suppress(FileExistsError):   # another split of this run or another run was first
            _write_json(output / CLAIM, {"run_key": key, "input": pin}, exclusive=True)
        claim = _claimed(output, key)
    if claim["input"] != pin:
        raise BatchError(f"the input changed since this run split it ({claim['input']['bytes']} bytes, sha256 "
                         f"{claim['input']['sha256'][:12]}..., now {pin['bytes']} bytes, {pin['sha256'][:12]}...); "
                         "restore it, or start a new run with another output_uri")


def _owned(output: Path, key: str) -> dict:
    """The claim of a directory this run's split claimed; refuses any other."""
    claim = _claimed(output, key)
    if claim is None:
        raise BatchError(f"output_uri {output} is not claimed by this run: run split_input for it first")
    return claim


def _staging(output: Path, key: str) -> Path:
    """This run's staging directory, refused where it is a symlink: what we write and remove
    there would land elsewhere."""
    for path in (output / STAGING, output / STAGING / key):
        if path.is_symlink():
            raise BatchError(f"{path} is a symbolic link; refusing to write or remove through it")
    return output / STAGING / key


def split_input(params: BatchParams, key: str) -> list[dict]:
    """Validate every input row, then cut the input into contiguous shards (input order is
    kept: part i holds the rows after part i-1's). Returns the shard specs, kept with the
    input's row count in the staging directory for commit_batch.

    The first split claims the output directory with the input's size and sha256; a retry
    returns the shards already written, or fails if the input is no longer the one claimed."""
    from jobs.bench import _utcnow

    started_at = _utcnow()
    output = params.output_dir
    _claimed(output, key)   # another run's directory: refused before the input is read
    try:
        total = count_prompts(params.input_path)
    except InputError as e:
        raise BatchError(str(e)) from None
    pin = _input_pin(params.input_path)
    _claim(output, key, pin)
    staging = _staging(output, key)
    if (staging / SPLIT_FILE).exists():
        return json.loads((staging / SPLIT_FILE).read_text())["shards"]
    n = min(params.num_shards, total)   # never an empty shard
    bounds = [i * total // n for i in range(n + 1)]
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
    if _input_pin(params.input_path) != pin:
        raise BatchError(f"{params.input_path} changed while it was being split; restore it and retry, "
                         "or start a new run with another output_uri")
    # What commit checks the parts against, kept beside the shards' inputs.
    _write_json(staging / SPLIT_FILE, {"shards": shards, "input_rows": total, "started_at": started_at.isoformat()})
    return shards


def _output_tokens(part: Path) -> int:
    return pq.read_table(part, columns=["output_tokens"]).column(0).to_numpy().sum().item()


def _committed_part(shard: dict, key: str) -> bool:
    part = Path(shard["part_path"])
    return (part.exists() and _part_run_key(part) == key
            and pq.ParquetFile(part).metadata.num_rows == shard["rows"])


def generate_shard(shard: dict, params: BatchParams, key: str, *,
                   after_row_group: Callable[[int], None] | None = None) -> dict:
    """Generate one shard's part in an attempt directory of its own, then publish it (a hard
    link: a part, once there, is never replaced); skip a shard whose part this run already wrote."""
    from engine import LLM
    from jobs.bench import host_facts
    from jobs.generate import GenerateError, generate_file

    part = Path(shard["part_path"])
    _owned(params.output_dir, key)
    host = host_facts()
    facts = {"index": shard["index"], "rows": shard["rows"],
             **{k: host[k] for k in ("hardware_class", "host", *CODE_FACTS)}}
    if _committed_part(shard, key):
        log.info("shard %d: %s is already written by this run; skipped", shard["index"], part.name)
        return {**facts, "skipped": True, "engine_s": None, "output_tokens": _output_tokens(part)}
    llm = LLM(params.model, backend=params.backend, seed=params.seed)
    # This attempt's own directory: a duplicate attempt of the shard (a task thought dead)
    # writes beside it, not over it.
    attempt = _staging(params.output_dir, key) / owned_name(part.name)
    start = time.perf_counter()
    try:
        counts = generate_file(llm, lambda: read_prompts(shard["input_path"]), attempt / part.name,
                               params.sampling, seed=params.seed, row_group_size=params.row_group_size,
                               file_metadata={RUN_KEY_META: key.encode()}, after_row_group=after_row_group)
        if counts["rows"] != shard["rows"]:
            raise BatchError(f"shard {shard['index']}: wrote {counts['rows']} rows, expected {shard['rows']}")
        engine_s = time.perf_counter() - start
        with contextlib.suppress(FileExistsError):   # a part is never replaced: the first attempt's stays
            os.link(attempt / part.name, part)
    except GenerateError as e:
        raise BatchError(f"shard {shard['index']}: {e}") from None
    finally:
        (attempt / part.name).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            attempt.rmdir()
    if not _committed_part(shard, key):
        raise BatchError(f"shard {shard['index']}: {part} is there but is not this run's part")
    return {**facts, "skipped": False, "engine_s": engine_s, "output_tokens": _output_tokens(part)}


def commit_batch(shard_results: list[dict], params: BatchParams, key: str, dag_id: str, run_id: str,
                 store=None) -> dict:
    """Check every part, record the run in the store, then write the manifest (the commit).

    Idempotent: a re-run finds the batch committed (and its parts as committed) or the run
    recorded, and rewrites the same manifest."""
    from jobs.bench import _utcnow
    from jobs.store import MetricRecord, RunRecord, open_store, record_run, upgrade

    output = params.output_dir
    claim = _owned(output, key)
    staging = _staging(output, key)
    if (output / MANIFEST).exists():
        log.info("batch already committed: %s", output / MANIFEST)
        manifest = _verified_manifest(output)
        _remove_leftovers(output, staging)
        return manifest
    split_path = staging / SPLIT_FILE
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
        config={"parameters": params.as_dict(), "input_sha256": claim["input"]["sha256"],
                "hosts": sorted({r["host"] for r in shard_results})},
        id=str(uuid.uuid5(RUN_ID_NAMESPACE, key)), airflow_dag_id=dag_id, airflow_run_id=run_id,
        **_shards_code(shard_results),
    ), [MetricRecord("ours", "wall_s", (finished - started).total_seconds(), count=total)]
       + ([MetricRecord("ours", "output_tok_s", tokens / engine_s, count=total)] if engine_s > 0 else []))

    manifest = {"run_key": key, "dag_id": dag_id, "run_id": run_id, "store_run_id": store_run_id,
                "committed_at": finished.isoformat(), "rows": total, "output_tokens": tokens,
                "input": {"uri": params.input_uri, "rows": split["input_rows"], **claim["input"]},
                "parameters": params.as_dict(), "parts": parts}
    _write_json(output / MANIFEST, manifest)
    _remove_leftovers(output, staging)
    return manifest


def _shards_code(shard_results: list[dict]) -> dict:
    """The code every shard ran; none where they differ (workers with other checkouts): a run records one.
    A skipped shard reports the code of the attempt that skipped it, not of the one that wrote its part."""
    # .get: results of shards that ran before they reported their code have none.
    codes = {tuple(r.get(k) for k in CODE_FACTS) for r in shard_results}
    if len(codes) == 1:
        return dict(zip(CODE_FACTS, codes.pop()))
    log.warning("the shards ran different code %s; the run records no commit or code hash", sorted(codes, key=str))
    return {}


def _remove_leftovers(output: Path, staging: Path) -> None:
    """After the commit: the shards' inputs, and temporaries whose process is gone (a live
    duplicate attempt's are its own; what it publishes can no longer replace a part)."""
    remove_dead_temporaries(output)
    remove_dead_temporaries(staging)
    for path in [*staging.glob("shard-*.parquet"), staging / SPLIT_FILE]:
        path.unlink(missing_ok=True)
    for directory in (staging, staging.parent):
        with contextlib.suppress(OSError):   # gone already, or not empty: a live attempt, another run's staging
            directory.rmdir()


def _verified_part(output: Path, part: dict) -> bytes:
    """A committed part's bytes, refused unless they are the ones the manifest committed."""
    path = output / part["path"]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BatchError(f"{path} is missing: the committed batch was altered") from None
    if hashlib.sha256(data).hexdigest() != part["sha256"]:
        raise BatchError(f"{path}: its sha256 is not the manifest's; the committed batch was altered")
    return data


def _verified_manifest(output: Path) -> dict:
    manifest = json.loads((output / MANIFEST).read_text())
    for part in manifest["parts"]:
        _verified_part(output, part)
    return manifest


def read_manifest(output_uri: str) -> dict:
    """A committed batch's manifest; refuses an output with no manifest (not committed, or not a batch)."""
    output = _local_path(output_uri, "output_uri")
    manifest_path = output / MANIFEST
    if not manifest_path.exists():
        raise BatchError(f"{output}: no {MANIFEST}; the batch is not committed")
    return json.loads(manifest_path.read_text())


def read_committed(output_uri: str) -> pa.Table:
    """The committed batch, parts in shard order, each checked against the manifest's sha256
    (the bytes read are the bytes checked); refuses an output with no manifest."""
    output = _local_path(output_uri, "output_uri")
    manifest = read_manifest(output_uri)
    return pa.concat_tables([pq.read_table(pa.BufferReader(_verified_part(output, p))) for p in manifest["parts"]])
