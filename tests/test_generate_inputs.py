"""`roadgate generate` refuses bad inputs, output paths and numbers before the model loads:
exit 2, one line naming the problem, nothing written, the input untouched.

Each refusal here comes before the model is loaded, so these tests are fast; were a check
missing, the model would load and generate (or traceback), and the test would fail."""
from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import stat
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine import SamplingParams
from jobs.atomic import atomic_parquet_writer
from jobs.cli import main
from jobs.prompts_io import MAX_ROW_SIZE, read_prompts

FAST = ["--model", "smollm2-135m-instruct", "--backend", "torch", "--max-tokens", "1"]
GOOD = b'{"id": "a", "prompt": "hi"}\n'


def generate(inp: Path, out: Path, *extra: str) -> int:
    return main(["generate", "--input", str(inp), "--output", str(out), *FAST, *extra])


def assert_refused(capsys, inp: Path, out: Path, message: str, *extra: str) -> None:
    """Exit 2 with one line holding `message`; no output or temporary file; input as it was."""
    before = inp.read_bytes() if inp.is_file() else None
    leftovers_before = set(out.parent.glob(f".{out.name}.*")) if out.parent.is_dir() else set()
    out_before = out.read_bytes() if out.is_file() else None
    assert generate(inp, out, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert (inp.read_bytes() if inp.is_file() else None) == before
    assert (out.read_bytes() if out.is_file() else None) == out_before
    if out.parent.is_dir():
        assert set(out.parent.glob(f".{out.name}.*")) == leftovers_before


# ---------------------------------------------------------------- input files

def write_bad_parquet_utf8(path: Path) -> None:
    raw = pa.array([b"fine", b"\xff\xfe"], pa.binary())
    pq.write_table(pa.table({"prompt": pa.Array.from_buffers(pa.string(), 2, raw.buffers())}), path)


LATE = b"".join(b'{"prompt": "row %d"}\n' % i for i in range(3000))   # far past the first block read
INPUT_CASES = {
    # encoding: a bad byte anywhere, UTF-16, lone surrogates (JSON escapes can spell them)
    "late bad byte": ("in.jsonl", LATE + b'{"prompt": "caf\xe9"}\n', "line 3001: byte 0xe9"),
    "bad byte in CSV": ("in.csv", b"prompt\nhi\nna\xefve\n", "line 3: byte 0xef"),
    "UTF-16 file": ("in.jsonl", '{"prompt": "hi"}\n'.encode("utf-16"), "the file is UTF-16"),
    "surrogate prompt": ("in.jsonl", b'{"prompt": "a\\ud800b"}\n', "line 1: 'prompt' holds a lone surrogate"),
    "surrogate message": ("in.jsonl", b'{"messages": [{"role": "user", "content": "\\udfff"}]}\n',
                          "line 1: message 0 holds a lone surrogate"),
    "surrogate id": ("in.jsonl", b'{"id": "\\ud83d", "prompt": "hi"}\n', "line 1: 'id' holds a lone surrogate"),
    # structure: nesting, integers past Python's digit limit, sizes
    "deep JSON line": ("in.jsonl", b'{"prompt": "hi", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",
                       "line 1: JSON nested too deeply"),
    "deep CSV messages": ("in.csv", b'messages\n"' + b"[" * 100_000 + b"]" * 100_000 + b'"\n',
                          "line 2: 'messages': JSON nested too deeply"),
    "huge integer": ("in.jsonl", b'{"id": ' + b"9" * 5000 + b', "prompt": "hi"}\n', "line 1: malformed JSON"),
    "huge line": ("in.jsonl", lambda p: p.write_bytes(GOOD + b'{"prompt": "' + b"a" * MAX_ROW_SIZE + b'"}\n'),
                  "line 2 is longer than 16 MiB"),
    "huge CSV field": ("in.csv", lambda p: p.write_bytes(b'prompt\n"' + (b"a" * 2**20 + b"\n") * 17 + b'"\n'),
                       "malformed CSV (field larger than field limit"),
    # empty inputs, refused as the batch split refuses them
    "0 bytes": ("in.jsonl", b"", "in.jsonl: no rows"),
    "blank lines": ("in.jsonl", b"\n  \n\r\n", "in.jsonl: no rows"),
    "header-only CSV": ("in.csv", b"id,prompt\n", "in.csv: no rows"),
    "0-byte CSV": ("in.csv", b"", "in.csv: no rows"),
    "0-row Parquet": ("in.parquet", lambda p: pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), p),
                      "in.parquet: no rows"),
    "bad UTF-8 in Parquet": ("in.parquet", write_bad_parquet_utf8, "rows 1-2: a string column holds bytes"),
    # ids: repeated (as the text they are written out as) and of no one text form
    "repeated id": ("in.jsonl", GOOD + b'{"id": "b", "prompt": "x"}\n' + GOOD, "id 'a' appears twice"),
    "1 and '1'": ("in.jsonl", b'{"id": 1, "prompt": "x"}\n{"id": "1", "prompt": "y"}\n', "id '1' appears twice"),
    "implicit id taken": ("in.jsonl", b'{"prompt": "x"}\n{"id": "0", "prompt": "y"}\n', "id '0' appears twice"),
    "repeated Parquet id": ("in.parquet", lambda p: pq.write_table(pa.table({"id": [7, 7], "prompt": ["a", "b"]}), p),
                            "id '7' appears twice"),
    "CSV repeated id": ("in.csv", b"id,prompt\nx,a\nx,b\n", "id 'x' appears twice"),
    "float id": ("in.jsonl", b'{"id": 1.0, "prompt": "x"}\n', "line 1: 'id' must be a string or an integer, got float"),
    "bool id": ("in.jsonl", b'{"id": true, "prompt": "x"}\n', "'id' must be a string or an integer, got bool"),
    "list id": ("in.jsonl", b'{"id": [1], "prompt": "x"}\n', "'id' must be a string or an integer, got list"),
}


@pytest.mark.parametrize("filename, content, message", INPUT_CASES.values(), ids=INPUT_CASES)
def test_bad_input_files_are_refused_in_one_line_before_the_model_loads(tmp_path, capsys, filename, content, message):
    inp = tmp_path / filename
    if callable(content):
        content(inp)
    else:
        inp.write_bytes(content)
    assert_refused(capsys, inp, tmp_path / "out.parquet", message)


def test_a_utf8_byte_order_mark_is_read_past_and_long_csv_fields_are_read_whole(tmp_path):
    # Excel's "CSV UTF-8" starts with a BOM; before, it became part of the first column's name.
    bom_csv = tmp_path / "bom.csv"
    bom_csv.write_bytes(b"\xef\xbb\xbfid,prompt\nx,hello\n")
    bom_jsonl = tmp_path / "bom.jsonl"
    bom_jsonl.write_bytes(b"\xef\xbb\xbf" + GOOD)
    assert [(r.id, r.prompt) for r in read_prompts(bom_csv)] == [("x", "hello")]
    assert [(r.id, r.prompt) for r in read_prompts(bom_jsonl)] == [("a", "hi")]
    long = tmp_path / "long.csv"   # over csv's default field limit (131072 characters)
    long.write_text('prompt\n"' + "word " * 40_000 + '"\n')
    assert [len(r.prompt) for r in read_prompts(long)] == [200_000]


# ---------------------------------------------------------------- output paths

@pytest.fixture
def inp(tmp_path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(GOOD)
    return path


def test_output_paths_that_cannot_or_must_not_be_written(tmp_path, capsys, inp):
    (tmp_path / "dir").mkdir()
    assert_refused(capsys, inp, tmp_path / "dir", "is a directory")
    assert main(["generate", "--input", str(inp), "--output", f"{tmp_path}/new/", *FAST]) == 2
    assert "is a directory" in capsys.readouterr().err and not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    assert_refused(capsys, inp, tmp_path / "file" / "sub" / "out.parquet", f"{tmp_path / 'file'} is not a directory")
    assert_refused(capsys, inp, Path("/dev/null"), "exists and is not a regular file", "--overwrite")
    # The input itself, by its path, a symlink or a hard link; --overwrite does not change that.
    (tmp_path / "link.jsonl").symlink_to(inp)
    os.link(inp, tmp_path / "hard.jsonl")
    for same in (inp, tmp_path / "link.jsonl", tmp_path / "hard.jsonl", tmp_path / "dir" / ".." / "in.jsonl"):
        assert_refused(capsys, inp, same, "is the input file", "--overwrite")
    existing = tmp_path / "old.parquet"
    existing.write_bytes(b"yesterday's results")
    assert_refused(capsys, inp, existing, "exists; pass --overwrite to replace it")


def generate_as_nobody(inp: str, out: str, queue) -> None:
    """In a child: generate as an unprivileged user (root may write anywhere)."""
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = generate(Path(inp), Path(out))
    queue.put((code, err.getvalue()))


def test_an_unwritable_output_directory_is_refused_before_the_model_loads():
    with tempfile.TemporaryDirectory() as top:   # under /tmp: an unprivileged user can reach it
        os.chmod(top, 0o755)
        inp = Path(top) / "in.jsonl"
        inp.write_bytes(GOOD)
        inp.chmod(0o644)
        locked = Path(top) / "locked"
        locked.mkdir(mode=0o555)
        ctx = multiprocessing.get_context("fork")
        queue = ctx.Queue()
        child = ctx.Process(target=generate_as_nobody, args=(str(inp), str(locked / "sub" / "out.parquet"), queue))
        child.start()
        try:
            code, err = queue.get(timeout=60)
        finally:
            child.kill()   # it has answered, or it hangs: either way it is done
            child.join()
        assert code == 2 and err.strip().endswith(f"{locked} is not writable") and len(err.splitlines()) == 1
        assert list(locked.iterdir()) == []


@pytest.mark.slow
def test_overwrite_replaces_an_existing_output_with_the_umask_mode(tmp_path, capsys, inp):
    out = tmp_path / "out.parquet"
    out.write_bytes(b"yesterday's results")
    old = os.umask(0o027)
    try:
        assert generate(inp, out, "--overwrite") == 0
    finally:
        os.umask(old)
    assert pq.read_table(out).column("id").to_pylist() == ["a"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_parquet_outputs_get_the_processs_umask_not_0600(tmp_path, mask):
    old = os.umask(mask)
    try:
        with atomic_parquet_writer(tmp_path / "part.parquet", pa.schema([("x", pa.int32())])):
            (temporary,) = tmp_path.glob(".part.parquet.*.tmp")
            assert stat.S_IMODE(temporary.stat().st_mode) == 0o666 & ~mask
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "part.parquet").stat().st_mode) == 0o666 & ~mask


# ---------------------------------------------------------------- numbers

@pytest.mark.parametrize("flags, message", [
    (["--temperature", "nan"], "temperature must be a finite number >= 0, got nan"),
    (["--temperature", "inf"], "temperature must be a finite number >= 0, got inf"),
    (["--temperature=-inf"], "temperature must be a finite number >= 0"),
    (["--top-p", "nan"], "top_p must be in (0, 1], got nan"),
    (["--top-p", "inf"], "top_p must be in (0, 1], got inf"),
    (["--top-p=-inf"], "top_p must be in (0, 1]"),
    (["--max-model-len", "0"], "max_model_len must be >= 1, got 0"),
    (["--max-model-len=-5"], "max_model_len must be >= 1, got -5"),
])
def test_nan_infinite_and_non_positive_numbers_are_refused(tmp_path, capsys, inp, flags, message):
    assert_refused(capsys, inp, tmp_path / "out.parquet", message, *flags)


@pytest.mark.parametrize("field, value", [("temperature", "0.5"), ("temperature", True), ("top_p", "1"),
                                          ("temperature", float("nan"))])
def test_sampling_values_of_the_wrong_type_are_a_value_error(field, value):
    # The batch DAG passes its sampling dict straight through: a TypeError there was a traceback.
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})
