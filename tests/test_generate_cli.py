"""`roadgate generate`: inputs, outputs, and every kind of bad input."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.atomic import atomic_parquet_writer
from jobs.cli import main

FAST = ["--model", "smollm2-135m-instruct", "--backend", "torch", "--max-tokens", "4"]


def run(tmp_path, input_path, *extra):
    out = tmp_path / "out.parquet"
    code = main(["generate", "--input", str(input_path), "--output", str(out), *FAST, *extra])
    return code, out


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def assert_nothing_written(tmp_path, out):
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.parquet")]


def test_jsonl_csv_and_parquet_inputs_give_ordered_complete_outputs(tmp_path):
    rows = [{"id": "a", "prompt": "Hello there"},
            {"id": "b", "messages": [{"role": "user", "content": "What is 2+2?"}]},
            {"prompt": "No id here"}]
    code, out = run(tmp_path, write_jsonl(tmp_path / "in.jsonl", rows))
    assert code == 0
    t = pq.read_table(out)
    assert t.column_names == ["id", "prompt", "messages", "output_text", "output_token_ids", "finish_reason",
                              "prompt_tokens", "output_tokens", "ttft_s", "e2e_s"]
    got = t.to_pylist()
    assert [r["id"] for r in got] == ["a", "b", "2"]
    assert got[1]["messages"] == rows[1]["messages"] and got[0]["prompt"] == "Hello there"
    assert all(r["output_tokens"] == len(r["output_token_ids"]) <= 4 for r in got)
    assert all(r["finish_reason"] in ("stop", "length") and 0 < r["ttft_s"] <= r["e2e_s"] for r in got)

    csv_in = tmp_path / "in.csv"
    csv_in.write_text('id,prompt,messages\nx,Hello there,\ny,,"[{""role"": ""user"", ""content"": ""What is 2+2?""}]"\n')
    assert run(tmp_path, csv_in, "--overwrite")[0] == 0   # replaces the JSONL run's output
    from_csv = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["output_token_ids"] for r in from_csv] == [r["output_token_ids"] for r in got[:2]]

    pq_in = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": "p", "prompt": "Hello there"}]), pq_in)
    assert run(tmp_path, pq_in, "--overwrite")[0] == 0
    assert pq.read_table(tmp_path / "out.parquet").column("output_token_ids").to_pylist() == \
        [got[0]["output_token_ids"]]


def test_a_model_whose_logits_turn_nan_fails_in_one_line_and_writes_nothing(tmp_path, capsys):
    from tests.test_model_sources import OVERFLOWING, tiny_hf_folder
    folder = tiny_hf_folder(tmp_path / "m", scale=OVERFLOWING)
    out = tmp_path / "out.parquet"
    code = main(["generate", "--input", str(write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": "ab c"}])),
                 "--output", str(out), "--model", str(folder), "--backend", "torch", "--max-tokens", "4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith(f"roadgate generate: error: model {folder}: the model's logits held no token to sample")
    assert_nothing_written(tmp_path, out)


def test_seeded_sampling_is_reproducible_per_row(tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "r1", "prompt": "Once upon a time"}])
    runs = []
    for _ in range(2):
        code, out = run(tmp_path, inp, "--temperature", "1.0", "--top-p", "0.9", "--seed", "7", "--overwrite")
        runs.append(pq.read_table(out).column("output_token_ids").to_pylist())
    assert code == 0 and runs[0] == runs[1]


BAD_ROWS = [
    ('{"prompt": "ok"}\n{"prompt": "ok"}\n{"prompt": oops}\n', "line 3: malformed JSON"),
    ('{"id": 1, "text": "hi"}\n', "line 1: row has neither a 'prompt' nor a 'messages' column"),
    ('{"prompt": ""}\n', "line 1: the prompt is empty"),
    ('{"prompt": "   "}\n', "line 1: 'prompt' is empty"),
    ('{"messages": []}\n', "line 1: 'messages' must be a non-empty list"),
    ('{"messages": [{"role": "user"}]}\n', "line 1: message 0 must have string 'role' and 'content'"),
    ('[1, 2]\n', "line 1: expected a JSON object"),
]


@pytest.mark.parametrize("content, message", BAD_ROWS)
def test_bad_rows_name_the_line_and_write_nothing(tmp_path, capsys, content, message):
    inp = tmp_path / "in.jsonl"
    inp.write_text(content)
    code, out = run(tmp_path, inp)
    assert code == 2
    assert message in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


def test_bad_row_after_good_rows_writes_nothing(tmp_path, capsys):
    rows = [{"prompt": f"good {i}"} for i in range(5)] + [{"prompt": 3}]
    code, out = run(tmp_path, write_jsonl(tmp_path / "in.jsonl", rows))
    assert code == 2 and "line 6: 'prompt' must be a string" in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


def test_prompt_longer_than_max_model_len_is_refused(tmp_path, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": "short", "prompt": "hi"},
                                              {"id": "long", "prompt": "word " * 100}])
    code, out = run(tmp_path, inp, "--max-model-len", "64")
    err = capsys.readouterr().err
    assert code == 2 and "row id 'long'" in err and "max_model_len is 64" in err
    assert_nothing_written(tmp_path, out)


@pytest.mark.parametrize("setup, message", [
    (lambda p: p / "missing.jsonl", "input file not found"),
    (lambda p: p / "in.txt", "unknown input format '.txt'"),
    (lambda p: (p / "bad.parquet").write_bytes(b"not parquet at all") and p / "bad.parquet",
     "not a readable Parquet file"),
])
def test_missing_or_unreadable_input(tmp_path, capsys, setup, message):
    code, out = run(tmp_path, setup(tmp_path))
    assert code == 2 and message in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


@pytest.mark.parametrize("flags, message", [
    (["--temperature", "-1"], "temperature must be a finite number >= 0"),
    (["--top-p", "0"], "top_p must be in (0, 1]"),
    (["--top-p", "1.01"], "top_p must be in (0, 1]"),
    (["--top-k", "-2"], "top_k must be an integer >= 0"),
    (["--max-tokens", "0"], "max_tokens must be an integer >= 1"),
])
def test_out_of_range_sampling_values(tmp_path, capsys, flags, message):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "hi"}])
    code, out = run(tmp_path, inp, *flags)
    assert code == 2 and message in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


def test_unknown_model_and_unreadable_model_file(tmp_path, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "hi"}])
    out = tmp_path / "out.parquet"
    assert main(["generate", "--model", "no-such-model", "--input", str(inp), "--output", str(out)]) == 2
    assert "unknown model 'no-such-model'" in capsys.readouterr().err
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 7)
    assert main(["generate", "--model", str(junk), "--input", str(inp), "--output", str(out)]) == 2
    assert "cannot read GGUF file" in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


def test_quantization_a_model_cannot_take_is_one_line_and_exit_2(tmp_path, capsys):
    inp = write_jsonl(tmp_path / "in.jsonl", [{"prompt": "hi"}])
    out = tmp_path / "out.parquet"
    assert main(["generate", "--model", "dummy:smollm2-135m", "--input", str(inp), "--output", str(out),
                 "--backend", "torch", "--quantization", "gguf"]) == 2
    assert "quantization 'gguf' needs a GGUF model with 4-bit (Q4_0/Q4_1) weights" in capsys.readouterr().err
    assert_nothing_written(tmp_path, out)


def test_atomic_writer_leaves_nothing_on_failure(tmp_path):
    schema = pa.schema([("x", pa.int32())])
    target = tmp_path / "part.parquet"
    with pytest.raises(RuntimeError):
        with atomic_parquet_writer(target, schema) as w:
            w.write_table(pa.table({"x": pa.array([1, 2], pa.int32())}))
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []
    with atomic_parquet_writer(target, schema) as w:
        w.write_table(pa.table({"x": pa.array([1, 2], pa.int32())}))
    assert pq.read_table(target).column("x").to_pylist() == [1, 2]
