"""Sharded batch generation as plain functions; dags/batch_generation.py only wires them.

    parse_params -> split_input -> generate_shard per shard (one GPU each) -> commit_batch

Output layout under the output directory (a local path or file:// URI, or an object-store
prefix such as s3://bucket/prefix: jobs.storage):

    _claim.json                       the DAG run the directory belongs to, and its input's size and sha256
    part-00000-of-00003.parquet ...   one per shard, each written atomically, never replaced
                                      (on an object store part-00000-of-00003-<attempt>.parquet)
    _manifest.json                    written last: the batch is committed when it exists
    _staging/<run key>/               the shards' inputs and the split, removed at commit

The first split claims the directory for its DAG run; a task of any other run is refused
there, and a retried split that finds the input changed fails instead of mixing rows of
two inputs. Every part carries its DAG run's key in its Parquet footer. A shard is
generated into an attempt directory of its own and published without replacing anything
(jobs.storage's publish): locally by a hard link to the part's name, which a duplicate
attempt cannot replace; on an object store, which has no create-if-absent, by an upload to a
key of the attempt's own, beside any other attempt's. A shard whose part this run already
published is skipped; the manifest names the one part per shard that counts (the one its
generate task reported), commit removes the others, and readers trust only the manifest
(read_committed checks every part's sha256), so a retried, re-run or duplicated task never
delivers a row twice. A killed task leaves only temporary files named after their process
(jobs.tempfiles; for an object store, on the worker's own disk): the shard's next attempt
and the commit remove those whose process is gone.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
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

from jobs.errors import BatchError, GenerateError, InputError, StorageError
from jobs.gpu_lease import holding_a_gpu
from jobs.prompts_io import count_prompts, read_prompts
from jobs.storage import LocalPath, Location, location, write_table
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
# The code a shard ran, as bench records it (jobs.host_facts: git state and jobs.code_identity's hash).
CODE_FACTS = ("git_sha", "git_dirty", "code_hash")


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
    def input(self) -> Location:
        return _location(self.input_uri, "input_uri")

    @property
    def output(self) -> Location:
        return _location(self.output_uri, "output_uri")

    def as_dict(self) -> dict:
        return asdict(self)


def _location(uri: str, what: str) -> Location:
    """What a path or URI names (jobs.storage.location, which refuses a query, a fragment or
    a file URI of another host), or BatchError. Refused here too: '..' segments (through a
    symlink they name another place than they seem to; an object store keeps them as they are)."""
    if ".." in PurePosixPath(unquote(urlsplit(uri).path)).parts:
        raise BatchError(f"{what}: {uri!r} has a '..' segment; give the path it stands for")
    try:
        return location(uri, what)
    except StorageError as e:
        raise BatchError(str(e)) from None


def parse_params(raw: dict) -> BatchParams:
    """The DAG's params as BatchParams; what the JSON schema cannot check is checked here."""
    from engine import SamplingParams

    missing = [name for name in ("model", "input_uri", "output_uri", "num_shards") if raw.get(name) in (None, "")]
    if missing:
        raise BatchError(f"missing parameter(s): {', '.join(missing)}")
    # Refuse URIs no worker can use now, not in a shard task later.
    for what in ("input_uri", "output_uri"):
        try:
            _location(raw[what], what).check_reachable()
        except StorageError as e:
            raise BatchError(f"{what}: {e}") from None
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


def _footer(part: Location) -> pq.FileMetaData | None:
    """A part's Parquet footer; None where there is no file, or it has none (not Parquet, or an
    upload cut short)."""
    try:
        with part.open() as f:
            return pq.read_metadata(f)
    except (FileNotFoundError, pa.ArrowInvalid):
        return None


def _part_run_key(part: Location) -> str | None:
    footer = _footer(part)
    value = (footer.metadata or {}).get(RUN_KEY_META) if footer else None
    return value.decode() if value is not None else None


def _pin(place: Location) -> dict:
    """A file's size and sha256, as the claim pins the input and the manifest each part."""
    digest, size = hashlib.sha256(), 0
    with place.open() as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _json(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode()


def _read_json(place: Location) -> dict:
    return json.loads(place.read_bytes())


def _refuse_foreign_output(output: Location, key: str) -> None:
    """A directory without a claim may still hold a batch written before claims existed."""
    manifest = output / MANIFEST
    if manifest.exists():
        owner = _read_json(manifest)["run_key"]
        if owner != key:
            raise BatchError(f"output_uri {output} already holds the committed batch of run {owner}; "
                             "choose another output_uri")
    for part in output.glob("part-*.parquet"):
        owner = _part_run_key(part)
        if owner != key:
            raise BatchError(f"output_uri {output} holds {part.name} from run {owner}; "
                             "choose another output_uri or remove that run's output")


def _claimed(output: Location, key: str) -> dict | None:
    """The claim on `output` if it is this run's, None if there is none; refuses another run's."""
    try:
        claim = _read_json(output / CLAIM)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise BatchError(f"output_uri {output} is not a directory") from None
    if claim["run_key"] != key:
        raise BatchError(f"output_uri {output} belongs to run {claim['run_key']} (it wrote there first); "
                         "choose another output_uri")
    return claim


def _claim(output: Location, key: str, pin: dict) -> None:
    """Claims `output` for this run and its input (size and sha256), or checks that a retry
    sees the input this run claimed it with. Locally the claim is linked into place; an
    object store has no create-if-absent, and candidacies stand in (Location.create_first)."""
    claim = _claimed(output, key)
    if claim is None:
        _refuse_foreign_output(output, key)
        try:
            (output / CLAIM).create_first(_json({"run_key": key, "input": pin}), contender=key)
        except FileExistsError as e:   # another split of this run or another run was first, or is claiming now
            if _claimed(output, key) is None:
                raise BatchError(f"output_uri {output}: {e}; retry") from None
        claim = _claimed(output, key)
    if claim["input"] != pin:
        raise BatchError(f"the input changed since this run split it ({claim['input']['bytes']} bytes, sha256 "
                         f"{claim['input']['sha256'][:12]}..., now {pin['bytes']} bytes, {pin['sha256'][:12]}...); "
                         "restore it, or start a new run with another output_uri")


def _owned(output: Location, key: str) -> dict:
    """The claim of a directory this run's split claimed; refuses any other."""
    claim = _claimed(output, key)
    if claim is None:
        raise BatchError(f"output_uri {output} is not claimed by this run: run split_input for it first")
    return claim


def _staging(output: Location, key: str) -> Location:
    """This run's staging directory, refused where it is a symlink: what we write and remove
    there would land elsewhere."""
    for place in (output / STAGING, output / STAGING / key):
        if place.is_symlink():
            raise BatchError(f"{place} is a symbolic link; refusing to write or remove through it")
    return output / STAGING / key


def split_input(params: BatchParams, key: str) -> list[dict]:
    """Validate every input row, then cut the input into contiguous shards (input order is
    kept: part i holds the rows after part i-1's). Returns the shard specs, kept with the
    input's row count in the staging directory for commit_batch.

    The first split claims the output directory with the input's size and sha256; a retry
    returns the shards already written, or fails if the input is no longer the one claimed."""
    from jobs.store.models import utcnow

    started_at = utcnow()
    _claimed(params.output, key)   # another run's directory: refused before the input is read
    local = None
    try:
        # An object-store input is read once, into this host's scratch: what is pinned is what is split.
        with params.input.local_copy() as local:
            return _split(params, key, local, started_at)
    except (InputError, OSError) as e:   # OSError: an object-store input missing, unreachable or changing
        # Named as the user named it, not as this host's copy of an object.
        message = str(e) if local is None else str(e).replace(str(local), str(params.input))
        raise BatchError(" ".join(message.split())) from None


def _split(params: BatchParams, key: str, input_path: Path, started_at: datetime) -> list[dict]:
    output = params.output
    total = count_prompts(input_path)
    pin = _pin(LocalPath(input_path))
    _claim(output, key, pin)
    staging = _staging(output, key)
    if (staging / SPLIT_FILE).exists():
        return _read_json(staging / SPLIT_FILE)["shards"]
    n = min(params.num_shards, total)   # never an empty shard
    bounds = [i * total // n for i in range(n + 1)]
    shards = []
    rows = read_prompts(input_path)
    for i in range(n):
        shard_rows = [next(rows) for _ in range(bounds[i + 1] - bounds[i])]
        shard_input = staging / f"shard-{i:05d}.parquet"
        # Staging, not output: a retried split writes the same bytes there again.
        write_table(shard_input, pa.Table.from_pylist(
            [{"id": r.id, "prompt": r.prompt, "messages": r.messages} for r in shard_rows], SHARD_INPUT_SCHEMA))
        shards.append({"index": i, "num_shards": n, "rows": len(shard_rows), "first_row": bounds[i],
                       "input_path": str(shard_input), "part_path": str(output / part_name(i, n))})
    if _pin(LocalPath(input_path)) != pin:
        raise BatchError(f"{input_path} changed while it was being split; restore it and retry, "
                         "or start a new run with another output_uri")
    # What commit checks the parts against, kept beside the shards' inputs.
    (staging / SPLIT_FILE).write_bytes(_json({"shards": shards, "input_rows": total,
                                              "started_at": started_at.isoformat()}))
    return shards


def _output_tokens(part: Location) -> int:
    with part.open() as f:
        return pq.read_table(f, columns=["output_tokens"]).column(0).to_numpy().sum().item()


def _is_part_of(part: Location, shard: dict, key: str) -> bool:
    """Whether `part` is a finished part of `shard` that this run wrote."""
    footer = _footer(part)
    return footer is not None and _part_run_key(part) == key and footer.num_rows == shard["rows"]


def _committed_part(shard: dict, key: str) -> Location | None:
    """This run's part of `shard`, where one is published (the first, in name order)."""
    part = _location(shard["part_path"], "part_path")
    return next((p for p in part.published() if _is_part_of(p, shard, key)), None)


# Leased before host_facts or the engine initialise CUDA; the result names the GPU ("gpu").
@holding_a_gpu
def generate_shard(shard: dict, params: BatchParams, key: str, *,
                   after_row_group: Callable[[int], None] | None = None) -> dict:
    """Generate one shard's part in an attempt directory of its own, then publish it (a hard
    link, or an object of its own: a part, once there, is never replaced); skip a shard whose
    part this run already published. The result names the part (commit_batch commits that one)."""
    from engine import LLM
    from jobs.host_facts import host_facts
    from jobs.generate import generate_file

    part = _location(shard["part_path"], "part_path")
    _owned(params.output, key)
    host = host_facts()
    facts = {"index": shard["index"], "rows": shard["rows"],
             **{k: host[k] for k in ("hardware_class", "host", *CODE_FACTS)}}
    staging = _staging(params.output, key)
    # Killed attempts' leftovers where this one writes (for an object store, each worker's disk: there).
    remove_dead_temporaries(staging.attempts_dir())
    done = _committed_part(shard, key)
    if done:
        log.info("shard %d: %s is already written by this run; skipped", shard["index"], done.name)
        return {**facts, "part": done.name, "skipped": True, "engine_s": None, "output_tokens": _output_tokens(done)}
    llm = LLM(params.model, backend=params.backend, seed=params.seed)
    # This attempt's own directory (for an object store, on this host's disk): a duplicate
    # attempt of the shard (a task thought dead) writes beside it, not over it.
    attempt = staging.attempts_dir() / owned_name(part.name)
    start = time.perf_counter()
    try:
        with _location(shard["input_path"], "input_path").local_copy() as shard_input:
            counts = generate_file(llm, lambda: read_prompts(shard_input), attempt / part.name,
                                   params.sampling, seed=params.seed, row_group_size=params.row_group_size,
                                   file_metadata={RUN_KEY_META: key.encode()}, after_row_group=after_row_group)
        if counts["rows"] != shard["rows"]:
            raise BatchError(f"shard {shard['index']}: wrote {counts['rows']} rows, expected {shard['rows']}")
        engine_s = time.perf_counter() - start
        published = part.publish(attempt / part.name)   # never replaces a part: locally the first attempt's stays
    except GenerateError as e:
        raise BatchError(f"shard {shard['index']}: {e}") from None
    finally:
        (attempt / part.name).unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            attempt.rmdir()
    if not _is_part_of(published, shard, key):
        raise BatchError(f"shard {shard['index']}: {published} is there but is not this run's part")
    return {**facts, "part": published.name, "skipped": False, "engine_s": engine_s,
            "output_tokens": _output_tokens(published)}


def commit_batch(shard_results: list[dict], params: BatchParams, key: str, dag_id: str, run_id: str,
                 store=None) -> dict:
    """Check every part, record the run in the store, then write the manifest (the commit).

    Each shard's part is the one its result names (what its generate task published or found):
    two commits of the run, given the same results, commit the same parts. Idempotent: a re-run
    finds the batch committed (and its parts as committed) or the run recorded, and writes the
    same manifest."""
    from jobs.store import MetricRecord, RunRecord, open_store, record_run, upgrade
    from jobs.store.models import utcnow

    output = params.output
    claim = _owned(output, key)
    staging = _staging(output, key)
    if (output / MANIFEST).exists():
        log.info("batch already committed: %s", output / MANIFEST)
        manifest = _verified_manifest(output)
        _remove_leftovers(output, staging, manifest)
        return manifest
    split_path = staging / SPLIT_FILE
    if not split_path.exists():
        raise BatchError(f"{split_path} is missing: run split_input for this run first")
    split = _read_json(split_path)
    reported = {r["index"]: r["part"] for r in shard_results}
    parts = []
    for shard in split["shards"]:
        part = output / reported.get(shard["index"], part_name(shard["index"], shard["num_shards"]))
        if not _is_part_of(part, shard, key):
            raise BatchError(f"shard {shard['index']}: {part} is missing or not this run's")
        parts.append({"path": part.name, "rows": shard["rows"], "first_row": shard["first_row"], **_pin(part)})
    total = sum(p["rows"] for p in parts)
    if total != split["input_rows"]:
        raise BatchError(f"the parts hold {total} rows, the input {split['input_rows']}")

    finished = utcnow()
    started = datetime.fromisoformat(split["started_at"])
    engine_s = sum(r["engine_s"] or 0.0 for r in shard_results)
    tokens = sum(r["output_tokens"] for r in shard_results)
    store = store or open_store()
    upgrade(store.engine)
    store_run_id = record_run(store, RunRecord(
        kind="generate", workload=STORE_WORKLOAD, hardware_class=shard_results[0]["hardware_class"],
        started_at=started, finished_at=finished, preflight_status="skipped",
        config={"parameters": params.as_dict(), "input_sha256": claim["input"]["sha256"],
                "hosts": sorted({r["host"] for r in shard_results}),
                # Each shard's GPU lease (index, host, pid, from, until): no two shared a GPU at once.
                "gpu_leases": [r["gpu"] for r in sorted(shard_results, key=lambda r: r["index"]) if r.get("gpu")]},
        id=str(uuid.uuid5(RUN_ID_NAMESPACE, key)), airflow_dag_id=dag_id, airflow_run_id=run_id,
        **_shards_code(shard_results),
    ), [MetricRecord("ours", "wall_s", (finished - started).total_seconds(), count=total)]
       + ([MetricRecord("ours", "output_tok_s", tokens / engine_s, count=total)] if engine_s > 0 else []))

    manifest = {"run_key": key, "dag_id": dag_id, "run_id": run_id, "store_run_id": store_run_id,
                "committed_at": finished.isoformat(), "rows": total, "output_tokens": tokens,
                "input": {"uri": params.input_uri, "rows": split["input_rows"], **claim["input"]},
                "parameters": params.as_dict(), "parts": parts}
    (output / MANIFEST).write_bytes(_json(manifest))
    _remove_leftovers(output, staging, manifest)
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


def _remove_leftovers(output: Location, staging: Location, manifest: dict) -> None:
    """After the commit: the shards' inputs; on an object store, what other attempts published
    beside the committed parts (a live duplicate attempt may still add one: no manifest names
    it, and the commit's re-run removes it); and temporaries whose process is gone (a live
    duplicate attempt's are its own; what it publishes can no longer replace a part)."""
    committed = {p["path"] for p in manifest["parts"]}
    for i in range(len(manifest["parts"])):
        for other in (output / part_name(i, len(manifest["parts"]))).published():
            if other.name not in committed:
                other.delete()
    output.remove_dead_temporaries()
    staging.remove_dead_temporaries()
    for place in [*staging.glob("shard-*.parquet"), staging / SPLIT_FILE]:
        place.delete()
    # Gone already, or not empty (a live attempt, another run's staging): left.
    staging.remove_empty_dir()
    (output / STAGING).remove_empty_dir()


def _verified_part(output: Location, part: dict) -> bytes:
    """A committed part's bytes, refused unless they are the ones the manifest committed."""
    place = output / part["path"]
    try:
        data = place.read_bytes()
    except FileNotFoundError:
        raise BatchError(f"{place} is missing: the committed batch was altered") from None
    if hashlib.sha256(data).hexdigest() != part["sha256"]:
        raise BatchError(f"{place}: its sha256 is not the manifest's; the committed batch was altered")
    return data


def _verified_manifest(output: Location) -> dict:
    manifest = _read_json(output / MANIFEST)
    for part in manifest["parts"]:
        _verified_part(output, part)
    return manifest


def read_manifest(output_uri: str) -> dict:
    """A committed batch's manifest; refuses an output with no manifest (not committed, or not a batch)."""
    output = _location(output_uri, "output_uri")
    try:
        return _read_json(output / MANIFEST)
    except FileNotFoundError:
        raise BatchError(f"{output}: no {MANIFEST}; the batch is not committed") from None


def read_committed(output_uri: str) -> pa.Table:
    """The committed batch, parts in shard order, each checked against the manifest's sha256
    (the bytes read are the bytes checked); refuses an output with no manifest."""
    output = _location(output_uri, "output_uri")
    manifest = read_manifest(output_uri)
    return pa.concat_tables([pq.read_table(pa.BufferReader(_verified_part(output, p))) for p in manifest["parts"]])
