"""Continuous batching with chunked prefill, prefix caching and preemption.

The scheduler alone owns request state (engine.sequence). Each step it decides
what runs and tells the model runner as a diff, a `SchedulerOutput`; when the
step's sampled tokens come back (one step later) it applies them and decides
which requests are done.

Each step has a budget of tokens. Running sequences are served first, in
order (a decode costs one token, an unfinished prefill a chunk of what is
left); then waiting sequences are admitted while the budget, the sequence
limit and free KV blocks allow. When a running sequence needs a block and none
is free, the most recently admitted running sequence is preempted: its blocks
are released and it goes back to the front of the queue, to be recomputed.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import StopChecker
from engine.sampling_params import SamplingParams
from engine.running_table import RunningTable
from engine.sequence import COMPUTED, PENDING, PUBLISHED, Sequence, SequenceStatus


@dataclass
class NewRequest:
    """What the runner copies once, when a request gets a row: its known tokens (the
    prompt, and after a preemption the outputs so far), sampling and blocks."""
    request_id: int
    token_ids: np.ndarray                 # int32
    num_prompt_tokens: int
    sampling: SamplingParams
    seed: int
    block_ids: list[int]


@dataclass
class SchedulerOutput:
    """One step, as a diff against what the runner already holds."""
    new_requests: list[NewRequest] = field(default_factory=list)       # rows to add
    request_ids: list[int] = field(default_factory=list)               # the step's requests, in batch order
    num_scheduled_tokens: list[int] = field(default_factory=list)      # tokens each computes this step
    num_computed_tokens: list[int] = field(default_factory=list)       # each one's tokens already in the cache
    samples: list[bool] = field(default_factory=list)                  # whether the step samples for it
    new_block_ids: dict[int, list[int]] = field(default_factory=dict)  # grown tables of rows already held
    finished_request_ids: list[int] = field(default_factory=list)      # finished since the last step
    preempted_request_ids: list[int] = field(default_factory=list)     # out of the batch until readmitted


@dataclass
class SchedulerStats:
    steps: int = 0
    preemptions: int = 0


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager, stop_checker: StopChecker):
        self.block_manager = block_manager
        self.stop_checker = stop_checker
        self._eos = np.fromiter(stop_checker.eos_token_ids, np.int64)
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.requests: dict[int, Sequence] = {}     # unfinished requests by id
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.table = RunningTable(config.max_num_seqs)    # the running sequences' counters
        self._running_slots: np.ndarray | None = None     # their slots in `running` order, None if stale
        self._finished_ids: list[int] = []          # for the next SchedulerOutput
        self._to_publish: list[tuple[Sequence, int]] = []   # (sequence, its known computed tokens)
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.requests[seq.request_id] = seq
        self.stop_checker.add(seq)
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def schedule(self) -> SchedulerOutput:
        self.publish_computed_blocks()      # the last step's, where the engine has not yet
        out = SchedulerOutput(finished_request_ids=self._finished_ids)
        self._finished_ids = []
        slots, counts = self._schedule_running(out)
        budget = self.max_num_batched_tokens - int(counts.sum())
        bm = self.block_manager
        tables = bm.tables
        admitted_slots, admitted_counts = [], []
        # Admitting new work right after a preemption would only thrash. A preempted
        # sequence comes back once its in-flight token is read (it is recomputed with it).
        while (self.waiting and budget > 0 and not out.preempted_request_ids
               and len(self.running) < self.max_num_seqs and not self.waiting[0].num_pending):
            seq = self.waiting[0]
            rid = seq.request_id
            known = seq.tokens_holder(seq.num_known)
            if rid not in tables:
                seq.num_computed_tokens = seq.num_published_tokens = bm.acquire_cached_prefix(rid, known)
            n = min(seq.num_uncomputed_tokens, budget)
            if not bm.can_allocate(rid, seq.num_computed_tokens + n):
                bm.release(rid)
                seq.num_computed_tokens = seq.num_published_tokens = 0
                break
            self.waiting.popleft()
            bm.allocate(rid, seq.num_computed_tokens + n)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            self._running_slots = None
            self.table.enter(seq, len(tables[rid]) * bm.block_size, self.stop_checker.sees_every_token(seq))
            # The prompt's own array while it has no outputs (read-only); else a copy, so
            # that tokens appended later are not in it.
            out.new_requests.append(NewRequest(rid, np.asarray(known, np.int32), seq.num_prompt_tokens,
                                               seq.sampling, seq.seed, list(tables[rid])))
            admitted_slots.append(seq.slot)
            admitted_counts.append(n)
            budget -= n

        if admitted_slots:
            slots = np.concatenate([slots, np.array(admitted_slots, np.int64)])
            counts = np.concatenate([counts, np.array(admitted_counts, np.int64)])
        self._count_scheduled(slots, counts, out)
        self.stats.steps += 1
        return out

    def _schedule_running(self, out: SchedulerOutput) -> tuple[np.ndarray, np.ndarray]:
        """The running sequences' share of the step, in order, within the token budget: the
        slots of those that compute tokens and how many each. A decode costs one token, an
        unfinished prefill a chunk of what is left; one that has sampled its last token (still
        in flight) gets none. Only a sequence that crosses into a new block is visited alone."""
        if not self.running:        # a first step: none of the array work below (the GPU is idle)
            return np.empty(0, np.int64), np.empty(0, np.int64)
        t, bm = self.table, self.block_manager
        if self._running_slots is None:
            self._running_slots = np.fromiter((seq.slot for seq in self.running), np.int64, len(self.running))
        slots = self._running_slots
        computed = t.counts[slots, COMPUTED]
        num_tokens = t.num_known[slots] + t.counts[slots, PENDING]
        wanted = np.where(num_tokens < t.max_num_tokens[slots], num_tokens - computed, 0)
        # Each takes what it wants of the budget left by those before it.
        counts = np.minimum(wanted, np.maximum(self.max_num_batched_tokens - (np.cumsum(wanted) - wanted), 0))
        needed = computed + counts
        crossing = np.flatnonzero((counts > 0) & (needed > t.capacity[slots]))
        bs = bm.block_size
        new_blocks = -(-needed[crossing] // bs) - t.capacity[slots[crossing]] // bs
        if new_blocks.sum() <= bm.num_free_blocks:
            # Enough free blocks for all of them (the rule when nothing is short): no preemption.
            for rid, n in zip(t.request_ids[slots[crossing]].tolist(), new_blocks.tolist()):
                out.new_block_ids[rid] = bm.grow(rid, n)
            t.capacity[slots[crossing]] += new_blocks * bs
            crossing = crossing[:0]
        # Else one at a time, in order, preempting from the tail of `running`, which this
        # loop has not reached yet.
        for i in crossing.tolist():
            if i >= len(self.running):
                break
            seq, need = self.running[i], int(needed[i])
            rid = seq.request_id
            while not bm.can_allocate(rid, need) and self.running[-1] is not seq:
                self._preempt(self.running.pop(), out)
            if not bm.can_allocate(rid, need):
                self._preempt(self.running.pop(), out)   # seq itself: nothing left to take from
                break
            out.new_block_ids[rid] = bm.allocate(rid, need)
            t.capacity[seq.slot] = len(bm.tables[rid]) * bs
        kept = np.flatnonzero(counts[:len(self.running)] > 0)
        return slots[kept], counts[kept]

    def _count_scheduled(self, slots: np.ndarray, counts: np.ndarray, out: SchedulerOutput) -> None:
        """The step's tokens are as good as computed (later steps run after it, in stream
        order); one that reaches the end of its sequence samples a token, pending until read."""
        t, bm = self.table, self.block_manager
        start = t.counts[slots, COMPUTED]
        computed = start + counts
        t.counts[slots, COMPUTED] = computed
        known = t.num_known[slots]
        samples = computed == known + t.counts[slots, PENDING]
        t.counts[slots, PENDING] += samples
        out.request_ids = t.request_ids[slots].tolist()
        out.num_scheduled_tokens = counts.tolist()
        out.num_computed_tokens = start.tolist()
        out.samples = samples.tolist()
        if not bm.enable_prefix_caching:
            return
        # Only blocks whose tokens are all known can be hashed: a block that ends in the
        # token being computed now is published at the sequence's next step.
        ready = np.minimum(computed, known)
        self._to_publish = [(t.seqs[slots[i]], int(ready[i]))
                            for i in np.flatnonzero(ready >= t.counts[slots, PUBLISHED] + bm.block_size).tolist()]

    def publish_computed_blocks(self) -> None:
        """Put the full blocks the last `schedule` counted as computed in the prefix cache.
        Separate from `schedule` so the engine can call it once the step is launched:
        hashing a long prompt's blocks (~0.5 ms for 4,000 tokens) is host work the GPU need
        not wait for. The next `schedule` calls it first, before it admits requests that may hit them."""
        bm = self.block_manager
        for seq, n in self._to_publish:
            if seq.request_id not in bm.tables:     # released since: its blocks are not its own
                continue
            bm.publish_full_blocks(seq.request_id, seq.tokens_holder(n), n)
            seq.num_published_tokens = n - n % bm.block_size
        self._to_publish = []

    def update_from_output(self, request_ids: list[int], token_ids: list[int], now: float) -> list[Sequence]:
        """Take in a step's sampled tokens (one per request, in its order); returns the
        sequences they finished."""
        seqs = list(map(self.requests.get, request_ids))
        for seq, token in zip(seqs, token_ids):
            if seq is not None:     # else it stopped at an earlier token; this one was speculative
                seq.append_token(token, now)
        t = self.table
        slots = np.fromiter(map(t.slot_of.get, request_ids, repeat(-1)), np.int64, len(request_ids))
        running = np.flatnonzero(slots >= 0)
        live = slots[running]
        t.counts[live, PENDING] -= 1
        t.num_known[live] += 1
        # Which may stop: a stop token or string to check, an end of sequence, the length.
        tokens = np.asarray(token_ids, np.int64)[running]
        is_eos = (tokens[:, None] == self._eos).any(axis=1)
        may_stop = (t.checks_every_token[live] | (is_eos & ~t.ignores_eos[live])
                    | (t.num_known[live] >= t.max_num_tokens[live]))
        visit = np.zeros(len(seqs), bool)
        visit[running[may_stop]] = True
        # A preempted sequence with a token in flight is waiting: it has no slot.
        for i in np.flatnonzero(slots < 0).tolist():
            if seqs[i] is not None:
                seqs[i].num_pending -= 1
                visit[i] = True
        finished = []
        for i in np.flatnonzero(visit).tolist():
            seq, token = seqs[i], token_ids[i]
            if self.stop_checker.stops(seq, token):
                reason = "stop"
            elif seq.num_known >= seq.max_num_tokens:
                reason = "length"
            else:
                continue
            self._finish(seq, reason, now)
            finished.append(seq)
        return finished

    def _finish(self, seq: Sequence, reason: str, now: float) -> None:
        """Drop a finished sequence, running or (preempted with a token in flight) waiting;
        tokens still in flight for it are speculative and will be ignored."""
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason, seq.finish_time = reason, now
        seq.num_pending = 0
        self.block_manager.release(seq.request_id)
        if seq.slot >= 0:
            self.running.remove(seq)
            self._running_slots = None
            self.table.leave(seq)
        else:
            self.waiting.remove(seq)
        del self.requests[seq.request_id]
        self.stop_checker.drop(seq.request_id)
        self._finished_ids.append(seq.request_id)

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.block_manager.release(seq.request_id)
        self._running_slots = None
        self.table.leave(seq)
        seq.num_computed_tokens = seq.num_published_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        out.preempted_request_ids.append(seq.request_id)
        self.stats.preemptions += 1
