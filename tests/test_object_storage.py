"""Batch generation and the results store on object storage (issue 18), against a real S3 HTTP
endpoint: moto's standalone server, started here on 127.0.0.1 at a free port, reached through
pyarrow's S3 client with the standard AWS settings and AWS_ENDPOINT_URL.

A whole batch (split, generate, commit, read_committed) with s3:// input and output; the
store's request rows under an s3:// Parquet root; bad URIs refused in one line before any work;
the local defences' object-store stand-ins (claim, pinned input, parts never replaced,
duplicate attempts); and a shard SIGKILLed at each of its events (tests/fault_points.py, as
tests/test_fault_injection.py does for local files), then retried to exactly-once output.
"""
from __future__ import annotations

import hashlib
import json
import re
import signal
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer
from sqlalchemy import text

from jobs.batch import BatchParams, commit_batch, generate_shard, parse_params, read_committed, run_key, split_input
from jobs.cli import main
from jobs.errors import BatchError, StoreUnavailable
from jobs.storage import ObjectPath, location
from jobs.store import record_run
from jobs.store.parquet import read_run_requests
from jobs.store.ready import open_ready_store
from tests.conftest import CHAT_PROMPTS
from tests.store_support import metrics, nightly
from tests.test_fault_injection import in_child, kill_points
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow

BUCKET = "roadgate-test"
DAG_ID, RUN_ID = "batch_generation", "manual__s3"
KEY = run_key(DAG_ID, RUN_ID)
PART = re.compile(r"part-(?P<index>\d{5})-of-00002-[0-9a-f]{16}\.parquet")


@dataclass
class S3:
    fs: pafs.S3FileSystem
    env: dict[str, str]     # what a child process needs to reach it
    scratch: Path

    def put(self, key: str, data: bytes) -> str:
        with self.fs.open_output_stream(f"{BUCKET}/{key}") as f:
            f.write(data)
        return f"s3://{BUCKET}/{key}"

    def get(self, key: str) -> bytes:
        with self.fs.open_input_stream(f"{BUCKET}/{key}") as f:
            return f.read()

    def keys(self, prefix: str) -> list[str]:
        """The objects under s3://BUCKET/prefix/, relative to it."""
        infos = self.fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True))
        return sorted(i.path.removeprefix(f"{BUCKET}/{prefix}/") for i in infos if i.type == pafs.FileType.File)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    scratch = tmp_path_factory.mktemp("scratch")
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "ROADGATE_SCRATCH_DIR": str(scratch),
           # This module's GPU tasks lease among themselves, not with other suites on the host.
           "ROADGATE_GPU_LEASE_DIR": str(tmp_path_factory.mktemp("leases"))}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        fs = pafs.S3FileSystem(endpoint_override=env["AWS_ENDPOINT_URL"], allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        yield S3(fs, env, scratch)
    server.stop()


def prompts(n: int) -> tuple[bytes, list[str]]:
    rows = [json.loads(line) for line in CHAT_PROMPTS.read_text().splitlines()[:n]]
    return "".join(json.dumps({**r, "id": f"row-{i}"}) + "\n" for i, r in enumerate(rows)).encode(), \
        [f"row-{i}" for i in range(n)]


def batch_params(model: Path, input_uri: str, output_uri: str) -> BatchParams:
    return parse_params({"model": str(model), "input_uri": input_uri, "output_uri": output_uri, "num_shards": 2,
                         "backend": "torch", "sampling": {"max_tokens": 2}, "row_group_size": 1})


def run_batch(p: BatchParams, run_id: str, store) -> dict:
    key = run_key(DAG_ID, run_id)
    return commit_batch([generate_shard(s, p, key) for s in split_input(p, key)], p, key, DAG_ID, run_id, store=store)


def sqlite_store(path: Path):
    return open_ready_store(f"sqlite:///{path}", f"s3://{BUCKET}/requests")


def test_a_batch_with_s3_input_and_output_commits_every_row_once_and_reads_back_through_its_manifest(
        s3, tiny_model, tmp_path):
    data, ids = prompts(4)
    p = batch_params(tiny_model, s3.put("whole/prompts.jsonl", data), f"s3://{BUCKET}/whole/out")
    store = sqlite_store(tmp_path / "roadgate.db")
    manifest = run_batch(p, "manual__1", store)
    assert read_committed(p.output_uri).column("id").to_pylist() == ids
    parts = [part["path"] for part in manifest["parts"]]
    assert [PART.fullmatch(name)["index"] for name in parts] == ["00000", "00001"]
    # The shards' inputs, the split and the claim's candidacies are gone; no part but the committed ones.
    assert s3.keys("whole/out") == sorted(["_claim.json", "_manifest.json", *parts])
    assert manifest["input"] == {"uri": p.input_uri, "rows": 4, "bytes": len(data),
                                 "sha256": hashlib.sha256(data).hexdigest()}
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM runs")).scalar_one() == manifest["store_run_id"]
    # The same batch on local files gives the same rows (greedy sampling).
    local_input = tmp_path / "prompts.jsonl"
    local_input.write_bytes(data)
    local = batch_params(tiny_model, str(local_input), str(tmp_path / "out"))
    run_batch(local, "manual__local", store)
    columns = ["id", "output_text", "output_token_ids"]
    assert read_committed(local.output_uri).select(columns).equals(read_committed(p.output_uri).select(columns))
    # Re-running the whole DAG run skips every shard and commits the same parts.
    assert run_batch(p, "manual__1", store)["parts"] == manifest["parts"]
    assert s3.keys("whole/out") == sorted(["_claim.json", "_manifest.json", *parts])
    assert list(s3.scratch.iterdir()) == []   # nothing left on this host's disk either


def test_the_results_store_keeps_request_rows_under_an_s3_parquet_root(s3, tmp_path):
    root = f"s3://{BUCKET}/store/requests"
    store = open_ready_store(f"sqlite:///{tmp_path / 'roadgate.db'}", root)
    first = record_run(store, nightly(0), metrics(output_tok_s=1.0), pa.table({"request_id": [0, 1]}))
    assert read_run_requests(root, first).column("request_id").to_pylist() == [0, 1]
    with store.engine.connect() as conn:
        recorded = conn.execute(text("SELECT parquet_uri FROM runs")).scalar_one()
    assert recorded == f"{root}/{s3.keys('store/requests')[0]}"
    assert s3.keys("store/requests") == [f"date=2025-01-01/run_id={first}/requests.parquet"]
    # A bench killed between writing its rows and recording its run left them (event 1 is the
    # Parquet write, event 2 the marker it touches next); the next recording removes them.
    orphan = str(uuid.uuid4())
    code, _ = in_child(tmp_path, [tmp_path], "write_requests_and_hold", root, orphan, str(tmp_path / "marker"),
                       env=s3.env, kill_at=2)
    assert code == -signal.SIGKILL
    assert f"date=2025-01-01/run_id={orphan}/requests.parquet" in s3.keys("store/requests")
    second = record_run(store, nightly(1), metrics(output_tok_s=1.0), pa.table({"request_id": [0, 1]}))
    assert s3.keys("store/requests") == sorted(f"date=2025-01-0{day}/run_id={run}/requests.parquet"
                                               for day, run in ((1, first), (2, second)))
    store.engine.dispose()


def test_bad_object_store_uris_are_refused_in_one_line_before_any_work(s3, tiny_model, tmp_path, monkeypatch, capsys):
    def refused(message: str, **uris) -> None:
        given = {"input_uri": f"s3://{BUCKET}/bad/prompts.jsonl", "output_uri": f"s3://{BUCKET}/bad/out"} | uris
        with pytest.raises(BatchError, match=message) as error:
            parse_params({"model": str(tiny_model), "num_shards": 1, **given})
        assert "\n" not in str(error.value)

    refused("output_uri: s3://no-such-bucket/out: bucket 'no-such-bucket' does not exist",
            output_uri="s3://no-such-bucket/out")
    refused("names no bucket", input_uri="s3:///prompts.jsonl")
    refused("has a query or fragment", output_uri=f"s3://{BUCKET}/out?endpoint_override=http://elsewhere")
    refused("no filesystem serves 'nosuchfs://bucket/out'", output_uri="nosuchfs://bucket/out")
    # An input object that is not there: refused by the split, which writes nothing.
    p = batch_params(tiny_model, f"s3://{BUCKET}/bad/none.jsonl", f"s3://{BUCKET}/bad/out")
    with pytest.raises(BatchError, match=f"^s3://{BUCKET}/bad/none.jsonl: no such object$"):
        split_input(p, KEY)
    assert s3.keys("bad") == []
    # The results store's Parquet root, and reading a batch that is not there: exit 2, one line.
    with pytest.raises(StoreUnavailable, match="bucket 'no-such-bucket' does not exist"):
        open_ready_store(f"sqlite:///{tmp_path / 'roadgate.db'}", "s3://no-such-bucket/requests")
    monkeypatch.setenv("ROADGATE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ROADGATE_PARQUET_ROOT", "s3://no-such-bucket/requests")
    assert main(["db", "upgrade"]) == 2
    assert main(["batch", "show", f"s3://{BUCKET}/bad/out"]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and "bucket 'no-such-bucket' does not exist" in errors[0]
    assert f"s3://{BUCKET}/bad/out: no _manifest.json; the batch is not committed" in errors[1]
    # An endpoint nothing answers at: named in seconds, not a hang.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    refused(f"input_uri: s3://{BUCKET}/bad/prompts.jsonl: cannot reach the object store: .*Could not connect")


def test_on_s3_the_claim_the_pinned_input_and_never_replaced_parts_hold_as_on_local_files(s3, tiny_model, tmp_path):
    data, ids = prompts(4)
    p = batch_params(tiny_model, s3.put("defences/prompts.jsonl", data), f"s3://{BUCKET}/defences/out")
    other = run_key(DAG_ID, "manual__other")
    # No create-if-absent on S3: a run claiming the directory at this moment (or killed while
    # claiming) shows as its candidacy, and keeps the others out until it is gone.
    candidacy = s3.put(f"defences/out/_claim.json.contenders/{other}/candidacy-of-a-killed-split", b"")
    with pytest.raises(BatchError, match=f"is being created by another contender \\({re.escape(candidacy)};"):
        split_input(p, KEY)
    assert s3.keys("defences/out") == [f"_claim.json.contenders/{other}/candidacy-of-a-killed-split"]
    s3.fs.delete_file(candidacy.removeprefix("s3://"))
    shards = split_input(p, KEY)
    with pytest.raises(BatchError, match=f"belongs to run {KEY}"):
        split_input(p, other)
    # The input is pinned by its sha256: a retry that sees another object fails.
    s3.put("defences/prompts.jsonl", data.replace(b"?", b"!", 1))
    with pytest.raises(BatchError, match="the input changed since this run split it"):
        split_input(p, KEY)
    s3.put("defences/prompts.jsonl", data)
    assert split_input(p, KEY) == shards
    results = [generate_shard(shard, p, KEY) for shard in shards]
    first = {r["part"]: s3.get(f"defences/out/{r['part']}") for r in results}
    # A duplicate attempt of shard 0 (a task thought dead) publishes a key of its own, beside
    # the first attempt's and never over it; a later attempt finds the part and skips.
    copy = tmp_path / "duplicate.parquet"
    copy.write_bytes(first[results[0]["part"]])
    duplicate = location(shards[0]["part_path"], "part").publish(copy)
    assert duplicate.name != results[0]["part"] and duplicate.name in s3.keys("defences/out")
    assert generate_shard(shards[0], p, KEY)["skipped"]
    store = sqlite_store(tmp_path / "roadgate.db")
    manifest = commit_batch(results, p, KEY, DAG_ID, RUN_ID, store=store)
    assert [part["path"] for part in manifest["parts"]] == [r["part"] for r in results]
    assert duplicate.name not in s3.keys("defences/out")   # commit removed what the manifest does not name
    assert {name: s3.get(f"defences/out/{name}") for name in first} == first
    # One still publishing after the commit: no manifest names it, the commit's re-run removes it.
    copy.write_bytes(first[results[1]["part"]])
    late = location(shards[1]["part_path"], "part").publish(copy)
    assert read_committed(p.output_uri).column("id").to_pylist() == ids
    assert commit_batch(results, p, KEY, DAG_ID, RUN_ID, store=store) == manifest
    assert late.name not in s3.keys("defences/out")
    assert [k for k in s3.keys("defences/out") if k.startswith("part-")] == sorted(first)


def test_a_shard_killed_anywhere_on_s3_leaves_the_committed_parts_and_its_retry_commits_every_row_once(
        s3, tiny_model, tmp_path):
    data, ids = prompts(4)

    def prepare(name: str) -> tuple[BatchParams, list[dict], dict]:
        """Split, and shard 0 generated: shard 1 is the one killed."""
        p = batch_params(tiny_model, s3.put(f"killed/{name}/prompts.jsonl", data), f"s3://{BUCKET}/killed/{name}/out")
        shards = split_input(p, KEY)
        return p, shards, generate_shard(shards[0], p, KEY)

    p, shards, _ = prepare("calibration")
    code, done = in_child(tmp_path, [s3.scratch], "generate", shards[1], p.as_dict(), KEY, env=s3.env)
    assert code == 0 and done, f"the shard failed on its own (exit {code})"
    for n in kill_points(done["events"]):
        p, shards, shard0 = prepare(f"killed-at-{n}")
        out = f"killed/killed-at-{n}/out"
        before = s3.get(f"{out}/{shard0['part']}")
        code, _ = in_child(tmp_path, [s3.scratch], "generate", shards[1], p.as_dict(), KEY, env=s3.env, kill_at=n)
        assert code == -signal.SIGKILL, f"event {n}: exit {code}, not killed"
        # What was committed to the store is as it was; shard 1 has no part, or one whole part of this run.
        assert s3.get(f"{out}/{shard0['part']}") == before, f"event {n}"
        published = [k for k in s3.keys(out) if k.startswith("part-00001")]
        assert len(published) <= 1, f"event {n}: {published}"
        for key in published:
            footer = pq.read_metadata(pa.BufferReader(s3.get(f"{out}/{key}")))
            assert (footer.num_rows, footer.metadata[b"roadgate.batch_run_key"]) == (2, KEY.encode()), f"event {n}"
        assert "_manifest.json" not in s3.keys(out)
        # The task's retry, then the commit: every row once, one part per shard, nothing left behind.
        shard1 = generate_shard(shards[1], p, KEY)
        assert shard1["skipped"] == bool(published), f"event {n}"
        manifest = commit_batch([shard0, shard1], p, KEY, DAG_ID, RUN_ID, store=sqlite_store(tmp_path / f"{n}.db"))
        assert read_committed(p.output_uri).column("id").to_pylist() == ids, f"event {n}"
        assert s3.keys(out) == sorted(["_claim.json", "_manifest.json", *(q["path"] for q in manifest["parts"])])
        assert list(s3.scratch.iterdir()) == [], f"event {n}: the killed attempt's local files are left"


def test_a_filesystem_only_fsspec_serves_gets_the_same_object_store_semantics():
    """fsspec's in-memory filesystem (no server): pyarrow has no memory://, so it goes through fsspec."""
    out = location(f"memory://{uuid.uuid4().hex}/out", "output_uri")
    assert isinstance(out, ObjectPath)
    (out / "_claim.json").create_first(b"first", contender="run-a")
    with pytest.raises(FileExistsError):
        (out / "_claim.json").create_first(b"second", contender="run-b")
    assert (out / "_claim.json").read_bytes() == b"first" and [p.name for p in out.glob("*")] == ["_claim.json"]
    part = out / "part-00000-of-00001.parquet"
    local = Path(__file__)   # any file: what two attempts publish
    published = {part.publish(local).name, part.publish(local).name}
    assert len(published) == 2 and sorted(published) == [p.name for p in part.published()]
