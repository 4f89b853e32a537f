"""The batch's defences against harder faults (issue 16): the input pinned at the split, the
output directory claimed by the run that first writes it, parts that are never replaced,
URIs that name what they seem to, and a committed batch read back only as committed.
Killing the tasks is tests/test_fault_injection.py's part."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.batch import BatchParams, commit_batch, generate_shard, parse_params, read_committed, run_key, split_input
from jobs.errors import BatchError
from tests.conftest import CHAT_PROMPTS
from tests.tiny_model import tiny_model  # noqa: F401  (a fixture)

pytestmark = pytest.mark.slow
DAG_ID = "batch_generation"


@pytest.fixture
def prompts(tmp_path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(CHAT_PROMPTS.read_text().splitlines(keepends=True)[:4]))
    return path


@pytest.fixture
def params(tmp_path, prompts, tiny_model):
    def make(**overrides) -> BatchParams:
        return parse_params({"model": str(tiny_model), "input_uri": str(prompts), "output_uri": str(tmp_path / "out"),
                             "num_shards": 2, "backend": "torch", "sampling": {"max_tokens": 2}} | overrides)
    return make


def run_batch(p: BatchParams, run_id: str) -> dict:
    """One DAG run's tasks in order; returns the manifest."""
    key = run_key(DAG_ID, run_id)
    results = [generate_shard(shard, p, key) for shard in split_input(p, key)]
    return commit_batch(results, p, key, DAG_ID, run_id)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_a_retry_that_sees_another_input_fails_instead_of_mixing_rows(prompts, params, default_store):
    p, key = params(), run_key(DAG_ID, "manual__1")
    shards = split_input(p, key)
    original = prompts.read_bytes()
    prompts.write_bytes(original.replace(b"?", b"!", 1))   # the same rows, one prompt changed
    with pytest.raises(BatchError, match="the input changed since this run split it"):
        split_input(p, key)
    with pytest.raises(BatchError, match="the input changed"):   # a fresh staging would not help
        shutil.rmtree(p.output.path / "_staging")
        split_input(p, key)
    prompts.write_bytes(original)
    assert split_input(p, key) == shards
    manifest = run_batch(p, "manual__1")
    assert manifest["input"]["bytes"] == len(original)
    assert manifest["input"]["sha256"] == hashlib.sha256(original).hexdigest()
    prompts.write_text(prompts.read_text() + CHAT_PROMPTS.read_text().splitlines(keepends=True)[4])   # a row more
    with pytest.raises(BatchError, match="the input changed"):   # re-running the committed run
        split_input(p, key)


def test_an_output_directory_belongs_to_the_run_that_first_wrote_it(params, default_store):
    p = params()
    first, other = run_key(DAG_ID, "manual__first"), run_key(DAG_ID, "manual__other")
    shards = split_input(p, first)
    with pytest.raises(BatchError, match=f"belongs to run {first}"):
        split_input(p, other)
    # The other run's shard and commit tasks (as its retries would run them) write nothing there.
    with pytest.raises(BatchError, match=f"belongs to run {first}"):
        generate_shard(shards[0], p, other)
    with pytest.raises(BatchError, match=f"belongs to run {first}"):
        commit_batch([], p, other, DAG_ID, "manual__other")
    assert not list(p.output.path.glob("part-*"))
    committed = run_batch(p, "manual__first")
    before = snapshot(p.output.path)
    with pytest.raises(BatchError, match=f"belongs to run {first}"):
        generate_shard(shards[0], p, other)
    assert snapshot(p.output.path) == before
    assert read_committed(p.output_uri).num_rows == committed["rows"] == 4


def test_a_duplicate_attempt_never_replaces_a_published_part(params, default_store):
    p, key = params(row_group_size=1), run_key(DAG_ID, "manual__1")
    shard = split_input(p, key)[0]
    part = Path(shard["part_path"])
    generate_shard(shard, p, key)
    first = part.read_bytes()
    aside = part.with_name("first-attempt")
    part.rename(aside)

    def first_attempt_publishes_meanwhile(row_groups: int) -> None:
        if row_groups == 1:
            aside.rename(part)
    result = generate_shard(shard, p, key, after_row_group=first_attempt_publishes_meanwhile)
    assert part.read_bytes() == first and result["rows"] == 2
    assert sorted(q.name for q in (p.output.path / "_staging").rglob("*") if q.is_file()) == [
        "shard-00000.parquet", "shard-00001.parquet", "split.json"]   # this attempt left nothing


@pytest.mark.parametrize("uri, named", [
    ("file://localhost/data/in.jsonl", "/data/in.jsonl"),
    ("file:///data/my%20prompts.jsonl", "/data/my prompts.jsonl"),
    ("file:/data/in.jsonl", "/data/in.jsonl"),
    ("data/in.jsonl", "data/in.jsonl"),
])
def test_file_uris_resolve_to_the_path_they_name(tmp_path, uri, named):
    p = parse_params({"model": "m", "input_uri": uri, "output_uri": str(tmp_path), "num_shards": 1})
    assert p.input.path == Path(named)


@pytest.mark.parametrize("uri, message", [
    ("file://otherhost/data/in.jsonl", "names host 'otherhost'; only this host's files"),
    ("file:///data/in.jsonl#1", "has a query or fragment"),
    ("/data/batches/../in.jsonl", "has a '..' segment"),
    ("file:///data/%2E%2E/in.jsonl", "has a '..' segment"),
    ("s3:///in.jsonl", "names no bucket"),
    ("s3://bucket/in.jsonl?endpoint_override=http://elsewhere", "has a query or fragment"),
    ("s3://bucket/batches/../in.jsonl", "has a '..' segment"),
    ("nosuchfs://bucket/in.jsonl", "no filesystem serves 'nosuchfs://bucket/in.jsonl'"),
])
def test_uris_that_would_name_another_place_are_refused(tmp_path, uri, message):
    with pytest.raises(BatchError, match=message):
        parse_params({"model": "m", "input_uri": uri, "output_uri": str(tmp_path), "num_shards": 1})


def test_a_symlinked_staging_directory_is_refused_and_nothing_lands_where_it_points(tmp_path, params, default_store):
    p, key = params(), run_key(DAG_ID, "manual__1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    p.output.path.mkdir()
    (p.output.path / "_staging").symlink_to(elsewhere)
    with pytest.raises(BatchError, match="_staging is a symbolic link"):
        split_input(p, key)
    assert list(elsewhere.iterdir()) == []
    # Made a link after the split: commit neither reads nor removes through it.
    (p.output.path / "_staging").unlink()
    split_input(p, key)
    (p.output.path / "_staging").rename(elsewhere / "moved")
    (p.output.path / "_staging").symlink_to(elsewhere / "moved")
    with pytest.raises(BatchError, match="_staging is a symbolic link"):
        commit_batch([], p, key, DAG_ID, "manual__1")
    assert sorted(q.name for q in (elsewhere / "moved" / key).iterdir()) == [
        "shard-00000.parquet", "shard-00001.parquet", "split.json"]


def test_reading_a_committed_batch_checks_every_part_against_the_manifest(params, default_store):
    p = params()
    manifest = run_batch(p, "manual__1")
    ids = read_committed(p.output_uri).column("id").to_pylist()
    assert len(ids) == 4
    part = p.output.path / manifest["parts"][1]["path"]
    table = pq.read_table(part)
    # Another part with the same rows, footer and run key, other text: only the checksum tells.
    pq.write_table(table.set_column(3, "output_text", [[f"altered {i}" for i in range(table.num_rows)]]), part)
    with pytest.raises(BatchError, match="part-00001-of-00002.parquet: its sha256 is not the manifest's"):
        read_committed(p.output_uri)
    with pytest.raises(BatchError, match="its sha256 is not the manifest's"):   # re-running the run's commit
        commit_batch([], p, run_key(DAG_ID, "manual__1"), DAG_ID, "manual__1")
    part.unlink()
    with pytest.raises(BatchError, match="part-00001-of-00002.parquet is missing"):
        read_committed(p.output_uri)
    assert json.loads((p.output.path / "_manifest.json").read_text()) == manifest


def test_batch_show_summarizes_a_committed_batch_and_refuses_one_that_is_not(params, default_store, capsys):
    from jobs.cli import main
    p = params()
    assert main(["batch", "show", p.output_uri]) == 2
    assert "no _manifest.json; the batch is not committed" in capsys.readouterr().err
    manifest = run_batch(p, "manual__1")
    assert main(["batch", "show", p.output_uri]) == 0
    shown = capsys.readouterr().out
    assert f"{p.output_uri}: 4 rows, {manifest['output_tokens']} output tokens in 2 parts" in shown
    assert manifest["store_run_id"] in shown and "row " in shown
    (p.output.path / manifest["parts"][0]["path"]).write_bytes(b"not parquet")
    assert main(["batch", "show", p.output_uri]) == 2
    assert "its sha256 is not the manifest's" in capsys.readouterr().err


def test_a_shard_whose_model_gives_nan_logits_fails_in_one_line_and_publishes_no_part(tmp_path, params,
                                                                                       model_path, default_store):
    from tests.test_model_sources import OVERFLOWING
    from tests.tiny_model import write_tiny_model
    broken = write_tiny_model(tmp_path / "broken.gguf", model_path, OVERFLOWING)
    p, key = params(model=str(broken)), run_key(DAG_ID, "manual__nan")
    shards = split_input(p, key)
    before = sorted(p.output.path.rglob("*"))
    with pytest.raises(BatchError, match="shard 0: model .*broken.gguf: the model's logits held no token") as e:
        generate_shard(shards[0], p, key)
    assert "\n" not in str(e.value)
    assert sorted(p.output.path.rglob("*")) == before   # no part, no leftover of one
