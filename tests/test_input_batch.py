"""The persistent batch without a model: rows follow the scheduler through admission,
decode, block growth, preemption and finishing, and the step inputs built from it
equal those of the per-sequence builder it replaced."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.input_batch import InputBatch
from engine.model_runner import ModelRunner, StepInputs
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledBatch, Scheduler
from engine.sequence import PENDING_TOKEN, Sequence

BLOCK = 4


def seq(rid: int, n: int, max_tokens: int = 8, **sampling) -> Sequence:
    return Sequence(rid, list(range(100 * rid, 100 * rid + n)), SamplingParams(max_tokens=max_tokens, **sampling),
                    seed=1000 + rid)


def assert_consistent(rows: InputBatch) -> None:
    """Every row mirrors its sequence; rows and table entries past the ends are zero."""
    n = rows.num_rows
    assert rows.row_of == {rows.seqs[r].request_id: r for r in range(n)}
    for r in range(n):
        s = rows.seqs[r]
        k = len(s.block_table)
        assert rows.num_blocks[r] == k
        assert rows.block_table[r, :k].tolist() == s.block_table and not rows.block_table[r, k:].any()
        assert rows.num_tokens[r] == s.num_tokens and rows.num_prompt[r] == s.num_prompt_tokens
        assert rows.seeds[r] == s.seed and rows.temperature[r] == s.sampling.temperature
    assert rows.seqs[n:] == [None] * (len(rows.seqs) - n)
    assert not rows.block_table[n:].any() and not rows.num_blocks[n:].any()
    assert (rows.pending_source[n:] == -1).all()


class Loop:
    """The engine's step loop with the model left out: tokens are read one step late.
    `check(rows, sampled, previous)` sees each step's rows before it is launched."""

    def __init__(self, num_blocks: int, max_num_seqs: int = 8, token_budget: int = 64, check=None):
        self.scheduler = Scheduler(EngineConfig("test", max_num_seqs=max_num_seqs, max_num_batched_tokens=token_budget),
                                   BlockManager(num_blocks, BLOCK))
        self.rows = InputBatch(max_num_seqs, max_model_len=256, block_size=BLOCK)
        self.check = check
        self.in_flight = None                      # (sequences, token indices) of the last step
        self.next_token = 7

    def run(self) -> None:
        while self.scheduler.has_unfinished() or self.in_flight:
            self.step()

    def step(self) -> ScheduledBatch:
        batch = self.scheduler.schedule()
        rows = self.rows
        rows.update(batch)
        assert sorted(map(id, rows.seqs[:rows.num_rows])) == sorted(map(id, batch.seqs))
        assert_consistent(rows)
        n = rows.num_rows
        sampled = np.flatnonzero(rows.num_computed[:n] + rows.num_scheduled[:n] == rows.num_tokens[:n])
        if self.check and n:
            self.check(rows, sampled, self.in_flight)
        seqs, indices = rows.advance(sampled)
        if self.in_flight:
            for s, index in zip(*self.in_flight):
                if not s.is_finished:
                    s.resolve_token(index, self.next_token, 0.0)
                    if index + 1 - s.num_prompt_tokens >= s.sampling.max_tokens:
                        s.finish("length", 0.0, index)
                        self.scheduler.finish(s)
            self.next_token += 1
        self.scheduler.commit(batch)
        self.in_flight = (seqs, indices) if seqs else None
        return batch


def test_rows_are_added_removed_and_condensed_in_place():
    rows = InputBatch(4, max_model_len=64, block_size=BLOCK)
    bm = BlockManager(32, BLOCK)
    a, b, c = seq(0, 5), seq(1, 9), seq(2, 3, temperature=0.5)
    for s in (a, b, c):
        bm.allocate(s, s.num_tokens)
    rows.update(ScheduledBatch([a, b, c], [5, 9, 3]))
    assert rows.seqs[:3] == [a, b, c] and rows.num_rows == 3
    assert_consistent(rows)
    rows.pending_source[:3] = [10, 11, 12]       # as if each row had a token on the device
    rows.update(ScheduledBatch([a, c], [1, 1]))  # b finished: c moves into its row
    assert rows.seqs[:2] == [a, c] and rows.row_of == {0: 0, 2: 1}
    assert rows.pending_source[:3].tolist() == [10, 12, -1]
    assert rows.temperature[1] == 0.5 and rows.num_scheduled[:2].tolist() == [1, 1]
    assert_consistent(rows)
    d = seq(3, 2)
    bm.allocate(d, 2)
    rows.update(ScheduledBatch([d, c], [2, 1]))  # a left, d arrives: c fills row 0, d takes row 1
    assert rows.seqs[:2] == [c, d] and rows.num_scheduled[:2].tolist() == [1, 2]
    assert_consistent(rows)
    rows.update(ScheduledBatch([], []))
    assert rows.num_rows == 0 and rows.row_of == {}
    assert_consistent(rows)


def test_block_table_row_grows_in_place_at_block_boundaries():
    tables = []

    def record(rows, sampled, previous):
        assert rows.row_of == {0: 0}
        tables.append(rows.block_table[0, :rows.num_blocks[0]].tolist())
    loop = Loop(num_blocks=16, check=record)
    loop.scheduler.add(seq(0, 6, max_tokens=12))
    loop.run()
    # 6 prompt tokens, then one per step up to 17 (the 18th is sampled, never computed):
    # a new block at 9, 13 and 17 tokens, and never a rewrite.
    assert [len(t) for t in tables] == [2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5]
    assert all(later[:len(earlier)] == earlier for earlier, later in zip(tables, tables[1:]))


def test_preempted_sequences_leave_and_come_back_with_fresh_rows():
    readmitted = set()

    def watch(rows, sampled, previous):
        for r in range(rows.num_rows):
            s = rows.seqs[r]
            assert s.status.value == "running"
            if s.num_preemptions and rows.num_computed[r] == 0:
                assert rows.pending_source[r] == -1 and rows.num_scheduled[r] > 1
                readmitted.add(s.request_id)
    loop = Loop(num_blocks=7, max_num_seqs=4, check=watch)
    seqs = [seq(i, 7, max_tokens=10) for i in range(3)]
    for s in seqs:
        loop.scheduler.add(s)
    loop.run()
    assert loop.scheduler.stats.preemptions > 0 and readmitted
    assert loop.rows.num_rows == 0
    assert all(s.num_output_tokens == 10 and PENDING_TOKEN not in s.token_ids for s in seqs)


# The per-sequence builder that the persistent batch replaced, kept as the oracle.
def reference_inputs(batch: ScheduledBatch, sampling_seqs, previous, block_size, pad_to=None) -> StepInputs:
    bs = block_size
    rows = pad_to or len(batch.seqs)
    pad = rows - len(batch.seqs)
    token_ids, positions, slots = [], [], []
    seq_lens, query_lens = [1] * rows, [1] * rows
    width = max(len(s.block_table) for s in batch.seqs)
    block_tables = np.zeros((rows, width), np.int32)
    pending_rows = {id(s): r for r, s in enumerate(previous.seqs)} if previous else {}
    source_rows = {}
    sampling = {id(s) for s in sampling_seqs}
    sample_rows = []
    for i, (s, n) in enumerate(zip(batch.seqs, batch.num_new_tokens)):
        start = s.num_computed_tokens
        table = np.asarray(s.block_table, np.int64)
        chunk = s.token_ids[start:start + n]
        if chunk[-1] == PENDING_TOKEN:
            source_rows[len(token_ids) + n - 1] = pending_rows[id(s)]
        token_ids.extend(chunk)
        pos = np.arange(start, start + n)
        positions.extend(pos.tolist())
        slots.extend((table[pos // bs] * bs + pos % bs).tolist())
        block_tables[i, :len(table)] = table
        query_lens[i] = n
        seq_lens[i] = start + n
        if id(s) in sampling:
            sample_rows.append(len(token_ids) - 1)
    token_ids += [0] * pad
    positions += [0] * pad
    slots += [-1] * pad
    sources = np.full(len(token_ids), -1, np.int64)
    if source_rows:
        sources[list(source_rows)] = list(source_rows.values())
    query_start = np.zeros(rows + 1, np.int32)
    np.cumsum(query_lens, out=query_start[1:])
    return StepInputs(np.asarray(token_ids, np.int64), sources, np.asarray(positions, np.int64),
                      np.asarray(slots, np.int64), query_start, np.asarray(seq_lens, np.int32),
                      block_tables, np.asarray(sample_rows, np.int64))


def reference_sampling(seqs, pad_to=None) -> dict[str, np.ndarray]:
    pad = (pad_to or len(seqs)) - len(seqs)
    params = [s.sampling for s in seqs]
    return {"temperature": np.asarray([p.temperature for p in params] + [0.0] * pad, np.float32),
            "top_k": np.asarray([p.top_k for p in params] + [0] * pad, np.int32),
            "top_p": np.asarray([p.top_p for p in params] + [1.0] * pad, np.float32),
            "seeds": np.asarray([s.seed for s in seqs] + [0] * pad, np.int64),
            "counters": np.asarray([s.num_output_tokens for s in seqs] + [0] * pad, np.int64)}


def assert_same(ours: StepInputs | dict, expected: StepInputs | dict) -> None:
    ours, expected = (x if isinstance(x, dict) else vars(x) for x in (ours, expected))
    assert ours.keys() == expected.keys()
    for name in ours:
        assert ours[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)


@pytest.mark.parametrize("pad_to", [None, 8])
def test_inputs_equal_the_per_sequence_builder_on_mixed_steps(pad_to):
    kinds = set()

    def compare(rows, sampled, previous):
        n = rows.num_rows
        in_rows = ScheduledBatch(rows.seqs[:n], rows.num_scheduled[:n].tolist())
        sampling_seqs = [rows.seqs[r] for r in sampled]
        assert sampling_seqs == [s for s, k in zip(in_rows.seqs, in_rows.num_new_tokens)
                                 if s.num_computed_tokens + k == s.num_tokens]
        decode_only = all(k == 1 for k in in_rows.num_new_tokens) and len(sampled) == n
        kinds.add("decode" if decode_only else "mixed" if 1 in in_rows.num_new_tokens else "prefill")
        pad = pad_to if decode_only else None
        previous = previous and SimpleNamespace(seqs=previous[0])
        assert_same(ModelRunner._step_inputs(rows, sampled, pad),
                    reference_inputs(in_rows, sampling_seqs, previous, BLOCK, pad))
        assert_same(ModelRunner._sampling_arrays(rows, sampled, pad), reference_sampling(sampling_seqs, pad))

    # A small token budget chunks the prompts, so decodes run next to prefill chunks.
    loop = Loop(num_blocks=64, token_budget=16, check=compare)
    params = [{}, {"temperature": 0.7, "top_k": 5}, {"temperature": 0}, {"top_p": 0.9}, {}]
    for i, (n, p) in enumerate(zip((5, 9, 13, 3, 6), params)):
        loop.scheduler.add(seq(i, n, max_tokens=3 + 2 * i, **p))
    loop.run()
    assert kinds == {"prefill", "mixed", "decode"}


class EagerBuckets:
    """Stands in for engine.cuda_graphs.DecodeGraphs on the CPU: decode-only steps get
    the same bucket-padded inputs, run eagerly, and return one token per bucket row."""

    def __init__(self, llm, buckets):
        self.llm, self.buckets, self.replays = llm, buckets, []

    def bucket_for(self, batch_size):
        return next((b for b in self.buckets if b >= batch_size), None)

    def replay(self, bucket, token_ids, positions, meta, sampling):
        assert token_ids.shape[0] == meta.block_tables.shape[0] == sampling.temperature.shape[0] == bucket
        self.replays.append(bucket)
        model = self.llm.model
        hidden = model.forward(token_ids, positions, meta, self.llm.kv_cache)
        return model.ops.sample(model.logits(hidden), sampling)


def test_bucket_padded_decode_steps_give_the_tokens_of_sequences_run_alone():
    from engine import LLM
    from tests.conftest import MODEL
    prompts = [[(37 * i + 11 * j) % 4000 + 20 for j in range(8 + 9 * i)] for i in range(5)]
    params = [SamplingParams(max_tokens=6 + 3 * i, temperature=0.8 * (i % 2), seed=i, ignore_eos=True)
              for i in range(5)]
    llm = LLM(MODEL, backend="torch", dtype="float32", kv_cache_tokens=2048, max_num_seqs=8)
    alone = [llm.generate([p], q)[0].token_ids for p, q in zip(prompts, params)]
    llm.runner.graphs = EagerBuckets(llm, buckets=(2, 4, 8))
    together = [o.token_ids for o in llm.generate(prompts, params)]
    # Sequences finish one by one, so the batch is condensed under tokens still on the "device".
    assert {8, 4, 2} <= set(llm.runner.graphs.replays)
    assert together == alone
