"""The persistent batch without a model: rows follow the scheduler's diffs through
admission, decode, block growth, preemption and finishing; they hold what the
scheduler's requests hold; and the step inputs built from them equal those of a
per-sequence builder over the scheduler's own state."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.cuda_graphs import DecodeBuckets
from engine.detokenizer import StopChecker
from engine.input_batch import InputBatch
from engine import model_runner
from engine.model_runner import ModelRunner, StepInputs, StepLayout, static_inputs
from engine.ops import AttentionMetadata, SamplingTensors
from engine.sampling_params import SamplingParams
from engine.scheduler import NewRequest, Scheduler, SchedulerOutput
from engine.sequence import Sequence
from engine.sync import HostSyncCounter

BLOCK = 4


def seq(rid: int, n: int, max_tokens: int = 8, **sampling) -> Sequence:
    return Sequence(rid, list(range(100 * rid, 100 * rid + n)), SamplingParams(max_tokens=max_tokens, **sampling),
                    seed=1000 + rid, max_num_tokens=n + max_tokens)


def new_request(rid: int, n: int, block_ids: list[int], temperature: float = 0.0) -> NewRequest:
    return NewRequest(rid, list(range(n)), n, SamplingParams(temperature=temperature), 1000 + rid, block_ids)


def assert_mirrors(batch: InputBatch, scheduler: Scheduler) -> None:
    """The batch holds a row for each running request, with its blocks, known tokens and
    sampling; rows and table entries past the ends are zero."""
    n = batch.num_rows
    bm = scheduler.block_manager
    assert sorted(batch.request_ids[:n]) == sorted(s.request_id for s in scheduler.running)
    assert batch.row_of == {batch.request_ids[r]: r for r in range(n)}
    for r in range(n):
        s = scheduler.requests[batch.request_ids[r]]
        table = bm.block_table(s.request_id)
        assert batch.num_blocks[r] == len(table)
        assert batch.block_table[r, :len(table)].tolist() == table and not batch.block_table[r, len(table):].any()
        assert batch.token_ids[r, :len(s.token_ids)].tolist() == s.token_ids
        assert batch.num_prompt[r] == s.num_prompt_tokens
        assert batch.seeds[r] == s.seed and batch.temperature[r] == s.sampling.temperature
    assert batch.request_ids[n:] == [None] * (len(batch.request_ids) - n)
    assert not batch.block_table[n:].any() and not batch.num_blocks[n:].any()
    assert (batch.pending_source[n:] == -1).all()


class Loop:
    """The engine's step loop with the model left out: each sampled token is the step's
    number, read one step late. `check(batch, step, out, previous)` sees each step's
    layout before it is launched."""

    def __init__(self, num_blocks: int, max_num_seqs: int = 8, token_budget: int = 64, check=None, token_at=None):
        config = EngineConfig("test", max_num_seqs=max_num_seqs, max_num_batched_tokens=token_budget)
        self.scheduler = Scheduler(config, BlockManager(num_blocks, BLOCK), StopChecker(None))
        self.batch = InputBatch(max_num_seqs, max_model_len=256, block_size=BLOCK)
        self.check = check
        self.in_flight = None        # (request ids, rows, layout version, positions) of the last step
        self.next_token = 7
        self.token_at = token_at     # (request id, position) -> the token sampled there; else the step's number

    def run(self) -> None:
        while self.scheduler.has_unfinished() or self.in_flight:
            self.step()

    def step(self) -> SchedulerOutput:
        out = self.scheduler.schedule()
        batch = self.batch
        step = StepLayout.of(batch.apply(out), out)
        assert [batch.request_ids[r] for r in step.rows] == out.request_ids
        assert_mirrors(batch, self.scheduler)
        if self.check and len(step.rows):
            self.check(batch, step, out, self.in_flight)
        sampled_rows = step.rows[step.sampled]
        batch.mark_sampled(sampled_rows)
        launched = None
        if len(sampled_rows):
            launched = ([out.request_ids[i] for i in step.sampled], sampled_rows, batch.num_removals,
                        (step.start + step.query_lens)[step.sampled])
        if self.in_flight:
            ids, positions = self.in_flight[0], self.in_flight[3].tolist()
            tokens = (list(map(self.token_at, ids, positions)) if self.token_at
                      else [self.next_token] * len(ids))
            batch.record_tokens(*self.in_flight, tokens)
            self.scheduler.update_from_output(ids, tokens, 0.0)
            self.next_token += 1
        self.in_flight = launched
        return out


def test_rows_are_added_removed_and_condensed_in_place():
    batch = InputBatch(4, max_model_len=64, block_size=BLOCK)
    rows = batch.apply(SchedulerOutput(new_requests=[new_request(0, 5, [1, 2]), new_request(1, 9, [3, 4, 5]),
                                                     new_request(2, 3, [6], temperature=0.5)],
                                       request_ids=[0, 1, 2]))
    assert rows.tolist() == [0, 1, 2] and batch.request_ids[:3] == [0, 1, 2]
    batch.mark_sampled(np.array([0, 1, 2]))       # each row has a token on the device
    assert batch.pending_source[:3].tolist() == [0, 1, 2]
    # 1 finished: 2 moves into its row, with its token's place on the device.
    rows = batch.apply(SchedulerOutput(request_ids=[2, 0], finished_request_ids=[1], new_block_ids={0: [7]}))
    assert rows.tolist() == [1, 0] and batch.row_of == {0: 0, 2: 1}
    assert batch.pending_source[:3].tolist() == [0, 2, -1]
    assert batch.temperature[1] == 0.5 and batch.block_table[1, :2].tolist() == [6, 0]
    assert batch.block_table[0, :3].tolist() == [1, 2, 7] and batch.num_blocks[:2].tolist() == [3, 1]
    # 0 preempted, 3 arrives: 2 fills row 0, 3 takes row 1.
    rows = batch.apply(SchedulerOutput(new_requests=[new_request(3, 2, [8])], request_ids=[3, 2],
                                       preempted_request_ids=[0]))
    assert rows.tolist() == [1, 0] and batch.request_ids[:2] == [2, 3] and batch.num_removals == 2
    assert batch.token_ids[1, :2].tolist() == [0, 1] and batch.block_table[1, :2].tolist() == [8, 0]
    batch.apply(SchedulerOutput(finished_request_ids=[2, 3]))
    assert batch.num_rows == 0 and batch.row_of == {} and not batch.block_table.any()


def test_tokens_read_back_land_in_their_rows_even_after_the_rows_moved():
    batch = InputBatch(3, max_model_len=16, block_size=BLOCK)
    batch.apply(SchedulerOutput(new_requests=[new_request(i, 4, [i]) for i in range(3)], request_ids=[0, 1, 2]))
    version = batch.num_removals
    positions = np.array([4, 4, 4])
    batch.apply(SchedulerOutput(finished_request_ids=[0]))          # 2 moves into row 0
    batch.record_tokens([0, 1, 2], np.array([0, 1, 2]), version, positions, [50, 51, 52])
    assert batch.token_ids[:3, 4].tolist() == [52, 51, 0]     # 0's token went nowhere


def test_block_table_row_grows_in_place_at_block_boundaries():
    tables = []

    def record(batch, step, out, previous):
        assert batch.row_of == {0: 0}
        tables.append(batch.block_table[0, :batch.num_blocks[0]].tolist())
    loop = Loop(num_blocks=16, check=record)
    loop.scheduler.add(seq(0, 6, max_tokens=12))
    loop.run()
    # 6 prompt tokens, then one per step up to 17 (the 18th is sampled, never computed):
    # a new block at 9, 13 and 17 tokens, and never a rewrite.
    assert [len(t) for t in tables] == [2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5]
    assert all(later[:len(earlier)] == earlier for earlier, later in zip(tables, tables[1:]))


def test_preempted_sequences_leave_and_come_back_with_fresh_rows():
    readmitted = set()

    def watch(batch, step, out, previous):
        for new in out.new_requests:
            s = loop.scheduler.requests[new.request_id]
            if s.num_preemptions:
                # Recomputed from all its tokens, the outputs read so far included.
                assert new.token_ids.tolist() == s.token_ids and len(s.token_ids) > s.num_prompt_tokens
                assert batch.pending_source[batch.row_of[s.request_id]] == -1
                readmitted.add(s.request_id)
    loop = Loop(num_blocks=7, max_num_seqs=4, check=watch)
    seqs = [seq(i, 7, max_tokens=10) for i in range(3)]
    for s in seqs:
        loop.scheduler.add(s)
    loop.run()
    assert loop.scheduler.stats.preemptions > 0 and readmitted
    loop.step()                               # the last one's finish reaches the runner in the next diff
    assert loop.batch.num_rows == 0
    assert all(s.num_output_tokens == 10 and s.num_pending == 0 and s.finish_reason == "length" for s in seqs)


@pytest.mark.parametrize("seed", range(6))
def test_random_requests_get_exactly_their_tokens_through_preemption_and_stops(seed):
    """Each token is a function of its request and position, so a sequence's outputs are known
    in advance: recomputed after preemption, they must come out the same. Every step stays
    within the budget and skips a running sequence with work left only once the budget is spent."""
    rng = np.random.default_rng(seed)
    budget = int(rng.integers(8, 40))

    def token_at(rid: int, position: int) -> int:
        return (rid * 31 + position * 7) % 50

    def check(batch, step, out, previous):
        assert sum(out.num_scheduled_tokens) <= budget and min(out.num_scheduled_tokens) > 0
        assert len(set(out.request_ids)) == len(out.request_ids)
        scheduled = set(out.request_ids)
        bm = loop.scheduler.block_manager
        for s in loop.scheduler.running:
            assert len(bm.block_table(s.request_id)) == -(-s.num_computed_tokens // BLOCK), "blocks it does not need"
            left = s.num_tokens - s.num_computed_tokens
            if s.request_id not in scheduled and not s.samples_no_more and left > 0:
                assert sum(out.num_scheduled_tokens) == budget, "a runnable sequence was skipped"
    loop = Loop(num_blocks=int(rng.integers(30, 60)), max_num_seqs=int(rng.integers(2, 9)), token_budget=budget,
                check=check, token_at=token_at)
    seqs, expected = [], {}
    for rid in range(int(rng.integers(4, 16))):
        n, max_tokens = int(rng.integers(1, 80)), int(rng.integers(1, 20))
        stops = rng.choice(50, int(rng.integers(0, 3)), replace=False).tolist()
        s = seq(rid, n, max_tokens=max_tokens, stop_token_ids=stops)
        outputs = []
        for position in range(n, n + max_tokens):
            outputs.append(token_at(rid, position))
            if outputs[-1] in stops:
                break
        seqs.append(s)
        expected[rid] = (outputs, "stop" if outputs[-1] in stops else "length")
        loop.scheduler.add(s)
    for _ in range(5000):        # bounded: a scheduler that stops making progress fails, not hangs
        if not (loop.scheduler.has_unfinished() or loop.in_flight):
            break
        loop.step()
    assert {s.request_id: (s.output_token_ids, s.finish_reason) for s in seqs} == expected
    assert loop.scheduler.table.slot_of == {} and loop.scheduler.block_manager.num_free_blocks == \
        loop.scheduler.block_manager.num_blocks


# A per-sequence builder over the scheduler's requests, kept as the oracle of the vectorized one.
def reference_inputs(out: SchedulerOutput, requests, previous_ids, block_manager, pad_to=None) -> StepInputs:
    bs = block_manager.block_size
    rows = pad_to or len(out.request_ids)
    pad = rows - len(out.request_ids)
    token_ids, positions, slots = [], [], []
    seq_lens, query_lens = [1] * rows, [1] * rows
    tables = [block_manager.block_table(rid) for rid in out.request_ids]
    block_tables = np.zeros((rows, max(map(len, tables))), np.int32)
    pending_rows = {rid: r for r, rid in enumerate(previous_ids or [])}
    source_rows = {}
    sample_rows = []
    for i, (rid, n, table) in enumerate(zip(out.request_ids, out.num_scheduled_tokens, tables)):
        s = requests[rid]
        start = s.num_computed_tokens - n          # the scheduler has counted the step already
        chunk = s.token_ids[start:start + n]
        if len(chunk) < n:                         # the newest token is still on the device
            source_rows[len(token_ids) + n - 1] = pending_rows[rid]
            chunk.append(0)
        token_ids.extend(chunk)
        pos = np.arange(start, start + n)
        positions.extend(pos.tolist())
        slots.extend((np.asarray(table)[pos // bs] * bs + pos % bs).tolist())
        block_tables[i, :len(table)] = table
        query_lens[i] = n
        seq_lens[i] = start + n
        if out.samples[i]:
            sample_rows.append(i)
    token_ids += [0] * pad
    positions += [0] * pad
    slots += [-1] * pad
    sources = np.full(len(token_ids), -1, np.int64)
    if source_rows:
        sources[list(source_rows)] = list(source_rows.values())
    query_start = np.zeros(rows + 1, np.int32)
    np.cumsum(query_lens, out=query_start[1:])
    n = len(out.request_ids)
    last_tokens = None if max(query_lens) == 1 else query_start[1:n + 1] - 1    # a step with prefill: each row's last
    return StepInputs(np.asarray(token_ids, np.int64), sources, np.asarray(positions, np.int64),
                      np.asarray(slots, np.int64), query_start, np.asarray(seq_lens, np.int32),
                      block_tables, np.asarray(sample_rows, np.int64), last_tokens)


def reference_sampling(seqs, pad_to=None) -> dict[str, np.ndarray]:
    pad = (pad_to or len(seqs)) - len(seqs)
    params = [s.sampling for s in seqs]
    # Each sampled token's index among its outputs: the count of outputs before it.
    return {"temperature": np.asarray([p.temperature for p in params] + [0.0] * pad, np.float32),
            "top_k": np.asarray([p.top_k for p in params] + [0] * pad, np.int32),
            "top_p": np.asarray([p.top_p for p in params] + [1.0] * pad, np.float32),
            "seeds": np.asarray([s.seed for s in seqs] + [0] * pad, np.int64),
            "counters": np.asarray([s.num_tokens - 1 - s.num_prompt_tokens for s in seqs] + [0] * pad, np.int64)}


def assert_same(ours: StepInputs | dict, expected: StepInputs | dict) -> None:
    ours, expected = (x if isinstance(x, dict) else vars(x) for x in (ours, expected))
    assert ours.keys() == expected.keys()
    for name in ours:
        if expected[name] is None:
            assert ours[name] is None, name
            continue
        assert ours[name].dtype == expected[name].dtype, name
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=name)


@pytest.mark.parametrize("builder", ["_vectorized", "_row_by_row"])
@pytest.mark.parametrize("in_place", [False, True], ids=["own-arrays", "in-host-slots"])
@pytest.mark.parametrize("pad_to", [None, 8])
def test_inputs_equal_the_per_sequence_builder_on_mixed_steps(pad_to, in_place, builder, monkeypatch):
    monkeypatch.setattr(model_runner, "_per_token_builder", lambda rows, tokens: getattr(model_runner, builder))
    kinds = set()
    config = EngineConfig("test", max_num_seqs=8, max_num_batched_tokens=16, max_model_len=256, block_size=BLOCK)
    inputs = static_inputs(config, torch.device("cpu"), HostSyncCounter())

    def compare(batch, step, out, previous):
        requests = loop.scheduler.requests
        sampling_seqs = [requests[rid] for rid, samples in zip(out.request_ids, out.samples) if samples]
        # A request samples when the step reaches its last token (then pending).
        assert all(s.num_computed_tokens + 1 == s.num_tokens and s.num_pending for s in sampling_seqs)
        decode_only = all(k == 1 for k in out.num_scheduled_tokens) and all(out.samples)
        kinds.add("decode" if decode_only else "mixed" if 1 in out.num_scheduled_tokens else "prefill")
        pad = pad_to if decode_only else None
        slots = None
        if in_place:        # the host buffer still holds an earlier step's values: every element is rewritten
            slots = inputs.host_slots()
            for slot in slots.values():
                slot.fill(77)
        ours = ModelRunner._step_inputs(batch, step, pad, into=slots)
        sampling = ModelRunner._sampling_arrays(batch, step, pad, into=slots)
        assert_same(ours, reference_inputs(out, requests, previous and previous[0], loop.scheduler.block_manager, pad))
        assert_same(sampling, reference_sampling(sampling_seqs, pad))
        if in_place:        # built where the upload copies from, and copied as built
            assert ours.token_ids.ctypes.data == slots["token_ids"].ctypes.data
            dev = inputs.upload({**vars(ours), **sampling}, in_place=True)
            copied = {name: dev[name].numpy() for name in dev}
            copied["block_tables"] = copied["block_tables"][:, :ours.block_tables.shape[1]]  # the slot's width
            assert_same(copied, {name: a for name, a in {**vars(ours), **sampling}.items() if a is not None})

    # A small token budget chunks the prompts, so decodes run next to prefill chunks.
    loop = Loop(num_blocks=64, token_budget=16, check=compare)
    params = [{}, {"temperature": 0.7, "top_k": 5}, {"temperature": 0}, {"top_p": 0.9}, {}]
    for i, (n, p) in enumerate(zip((5, 9, 13, 3, 6), params)):
        loop.scheduler.add(seq(i, n, max_tokens=3 + 2 * i, **p))
    loop.run()
    assert kinds == {"prefill", "mixed", "decode"}


class EagerBuckets(DecodeBuckets):
    """Stands in for engine.cuda_graphs.DecodeGraphs on the CPU: decode-only steps get
    the same bucket-padded inputs in the runner's static buffer, run eagerly on views of
    it as a graph would (the pending tokens taken from `sampled`, where every step
    samples), and return one token per bucket row."""

    def __init__(self, llm, buckets):
        super().__init__(llm.config.max_num_seqs, llm.device)
        self.llm, self.buckets, self.replays = llm, list(buckets), []

    def replay(self, bucket, greedy):
        self.replays.append(bucket)
        v, model = self.llm.runner.inputs.views, self.llm.model
        query_start, seq_lens = v["query_start"][:bucket + 1], v["seq_lens"][:bucket]
        assert query_start.tolist() == list(range(bucket + 1))
        model.ops.take_pending_tokens(v["token_ids"][:bucket], v["source_rows"][:bucket], self.sampled)
        meta = AttentionMetadata(query_start_loc=query_start, seq_lens=seq_lens, block_tables=v["block_tables"][:bucket],
                                 slot_mapping=v["slots"][:bucket], max_query_len=1,
                                 max_seq_len=int(seq_lens.max()),
                                 plan=model.ops.plan_step(np.ones(bucket, np.int64), seq_lens.numpy()))
        hidden = model.forward(v["token_ids"][:bucket], v["positions"][:bucket], meta, self.llm.kv_cache)
        sampling = SamplingTensors(v["temperature"][:bucket], v["top_k"][:bucket], v["top_p"][:bucket],
                                   v["seeds"][:bucket], v["counters"][:bucket], all_greedy=greedy,
                                   any_filter=not greedy)
        return model.ops.sample(model.logits(hidden), sampling, out=self.sampled[:bucket])


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
