"""Batch generation: a prompts file in, a Parquet file of generations out.

The input is read twice, streaming: once to validate every row (so bad input
fails before any GPU time is spent, and nothing is written), once to generate.
The CLI reads it once more before the model loads, for what needs no model:
the rows' form, unique ids, at least one row; and it checks the output path then.
Outputs are written in input order, in row groups, to a temporary file that
is renamed into place only when every row is done.
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib
from collections import deque
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa

from jobs.atomic import atomic_parquet_writer
from jobs.errors import GenerateError, InputError, UsageError
from jobs.prompts_io import PromptRow, count_prompts, read_prompts

MESSAGES_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
OUTPUT_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("prompt", pa.string()),
    ("messages", MESSAGES_TYPE),
    ("output_text", pa.string()),
    ("output_token_ids", pa.list_(pa.int32())),
    ("finish_reason", pa.string()),
    ("prompt_tokens", pa.int32()),
    ("output_tokens", pa.int32()),
    ("ttft_s", pa.float64()),
    ("e2e_s", pa.float64()),
])
ROW_GROUP_SIZE = 256


def request_seed(base_seed: int, row_id: str) -> int:
    """Per-row seed from the job seed and the row id, so a row's sample does not
    depend on which shard or batch it lands in."""
    return (base_seed * 0x9E3779B1 + zlib.crc32(row_id.encode())) & 0x7FFFFFFFFFFFFFFF


def generate_file(llm, source: Callable[[], Iterator[PromptRow]], output_path: str | Path,
                  sampling: dict, seed: int = 0, progress: bool = False, *,
                  row_group_size: int = ROW_GROUP_SIZE, file_metadata: dict[str, str] | None = None,
                  after_row_group: Callable[[int], None] | None = None) -> dict:
    """Generate for every row that `source()` yields into `output_path`.

    `source` is called twice (validate, then generate), so it must return a
    fresh iterator each time, e.g. `lambda: read_prompts(path)`. `sampling`
    holds SamplingParams fields other than the seed. Returns counts. Raises
    GenerateError, with nothing written, for any bad row, and for a model whose
    logits hold no token to sample (engine.ModelOutputError).

    `file_metadata` lands in the Parquet footer (batch jobs stamp their run on
    each part); `after_row_group(n)` is called once row group n is written.
    """
    from engine import ModelOutputError, PromptError, SamplingParams

    total = 0
    try:
        for row in source():
            try:
                llm.encode_prompt(row.engine_prompt)
            except PromptError as e:
                raise GenerateError(f"row id {row.id!r}: {e}") from None
            total += 1
    except InputError as e:
        raise GenerateError(str(e)) from None

    pending: deque[PromptRow] = deque()   # rows handed to the engine, not yet written
    written = 0

    def engine_requests():
        for row in source():
            pending.append(row)
            yield row.engine_prompt, SamplingParams(**sampling, seed=request_seed(seed, row.id))

    schema = OUTPUT_SCHEMA.with_metadata(file_metadata) if file_metadata else OUTPUT_SCHEMA
    row_groups = 0

    def write(buffer: list[dict]) -> None:
        nonlocal written, row_groups
        writer.write_table(pa.Table.from_pylist(buffer, schema))
        written += len(buffer)
        row_groups += 1
        if after_row_group:
            after_row_group(row_groups)

    try:
        with atomic_parquet_writer(output_path, schema) as writer:
            buffer = []
            for out in llm.stream(engine_requests(), show_progress=progress, total=total):
                row = pending.popleft()
                buffer.append(_output_record(row, out))
                if len(buffer) >= row_group_size:
                    write(buffer)
                    buffer.clear()
            if buffer or written == 0:
                write(buffer)
    except ModelOutputError as e:   # the writer has removed its partial file
        raise GenerateError(f"model {llm.source.name}: {e}") from None
    return {"rows": written}


def _output_record(row: PromptRow, out) -> dict:
    return {
        "id": row.id, "prompt": row.prompt, "messages": row.messages,
        "output_text": out.text, "output_token_ids": out.token_ids,
        "finish_reason": out.finish_reason, "prompt_tokens": len(out.prompt),
        "output_tokens": len(out.token_ids), "ttft_s": out.ttft, "e2e_s": out.e2e,
    }


# ---------------------------------------------------------------- CLI

def check_output_path(output: str, input_path: str, overwrite: bool) -> None:
    """Refuses an output the job could not write, or should not: checked before the model
    loads, so that a user does not learn it after a whole generation."""
    out = Path(output)
    if out.is_dir() or output.endswith(os.sep):
        raise GenerateError(f"output {output} is a directory; name a file")
    if out.exists():
        if not out.is_file():   # a device or a FIFO: replacing it is never what was meant
            raise GenerateError(f"output {output} exists and is not a regular file")
        # Same file identity, so a hard link or a symlink to the input is caught too.
        if os.path.exists(input_path) and os.path.samefile(out, input_path):
            raise GenerateError(f"output {output} is the input file; name another file")
        if not overwrite:
            raise GenerateError(f"output {output} exists; pass --overwrite to replace it")
    # The nearest existing ancestor: the writer creates the missing folders below it.
    ancestor = out.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise GenerateError(f"output {output}: {ancestor} is not a directory")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise GenerateError(f"output {output}: {ancestor} is not writable")


def register(sub) -> None:
    p = sub.add_parser("generate", help="generate for a prompts file (JSONL, CSV or Parquet) into Parquet",
                       description="Generate one output per prompt row into a Parquet file that appears "
                                   "whole or not at all. Bad input exits with status 2, writing nothing.")
    p.add_argument("--model", required=True,
                   help="alias (smollm2-135m-instruct), GGUF path, Hugging Face folder or dummy:<preset>")
    p.add_argument("--input", required=True,
                   help="prompts file (.jsonl, .csv or .parquet) with a 'prompt' or 'messages' column "
                        "and an optional 'id'")
    p.add_argument("--output", required=True, help="Parquet file to write")
    p.add_argument("--overwrite", action="store_true", help="replace --output if it exists (never the input)")
    p.add_argument("--backend", default="auto", choices=["auto", "cuda", "torch"],
                   help="auto: cuda where a GPU, PyCUDA and nvcc exist, else torch")
    p.add_argument("--dtype", default="auto",
                   help="float32, bfloat16 or float16; auto: bfloat16 on a GPU, float32 on CPU")
    p.add_argument("--quantization", default="none", choices=["none", "gguf"],
                   help="gguf: run a GGUF's own 4-bit (Q4_0/Q4_1) weights as stored, on the torch backend "
                        "on CPU (auto dtype: bfloat16 where the CPU has it natively, else float32)")
    p.add_argument("--max-tokens", type=int, default=256, help="most output tokens per row")
    p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 keeps every token)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k likeliest tokens (0: all)")
    p.add_argument("--seed", type=int, default=0,
                   help="job seed; each row's seed derives from it and the row id")
    p.add_argument("--max-num-seqs", type=int, default=256, help="most requests in one engine step")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="longest prompt plus output, in tokens (default: the model's context length)")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    from engine import LLM, ModelSourceError, SamplingParams

    sampling = {"max_tokens": args.max_tokens, "temperature": args.temperature,
                "top_p": args.top_p, "top_k": args.top_k}
    try:
        SamplingParams(**sampling)
        # Everything that needs no model fails before it loads: the output path, then every row.
        check_output_path(args.output, args.input, args.overwrite)
        count_prompts(args.input)
    except (ValueError, OSError) as e:   # InputError and GenerateError are ValueErrors
        raise UsageError(str(e)) from None
    try:
        llm = LLM(args.model, backend=args.backend, dtype=args.dtype, max_num_seqs=args.max_num_seqs,
                  max_model_len=args.max_model_len, seed=args.seed, quantization=args.quantization)
    except (ModelSourceError, ValueError, RuntimeError) as e:
        raise UsageError(str(e)) from None
    try:
        counts = generate_file(llm, lambda: read_prompts(args.input), args.output, sampling, seed=args.seed,
                               progress=sys.stderr.isatty())
    except GenerateError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {counts['rows']} rows to {args.output} (backend {llm.backend})")
    return 0
