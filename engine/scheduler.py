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

import numpy as np

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import StopChecker
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence, SequenceStatus


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
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.requests: dict[int, Sequence] = {}     # unfinished requests by id
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._finished_ids: list[int] = []          # for the next SchedulerOutput
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.requests[seq.request_id] = seq
        self.stop_checker.add(seq)
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput(finished_request_ids=self._finished_ids)
        self._finished_ids = []
        budget = self.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        bm = self.block_manager
        tables, block_size = bm.tables, bm.block_size
        # Preemption pops from the tail of `running`, which this loop has not reached yet.
        for seq in self.running:
            if budget == 0:
                break
            num_tokens = len(seq.token_ids) + seq.num_pending
            if num_tokens >= seq.max_num_tokens:     # seq.samples_no_more, inlined: its last token is in flight
                continue
            rid = seq.request_id
            n = min(num_tokens - seq.num_computed_tokens, budget)
            need = seq.num_computed_tokens + n
            # Most decodes fit in the blocks the sequence has: only a step that crosses
            # into a new block needs the block manager.
            if need > len(tables[rid]) * block_size:
                while not bm.can_allocate(rid, need) and self.running[-1] is not seq:
                    self._preempt(self.running.pop(), out)
                if not bm.can_allocate(rid, need):
                    self._preempt(self.running.pop(), out)   # seq itself: nothing left to take from
                    break
                out.new_block_ids[rid] = bm.allocate(rid, need)
            scheduled.append((seq, n))
            budget -= n

        # Admitting new work right after a preemption would only thrash. A preempted
        # sequence comes back once its in-flight token is read (it is recomputed with it).
        while (self.waiting and budget > 0 and not out.preempted_request_ids
               and len(self.running) < self.max_num_seqs and not self.waiting[0].num_pending):
            seq = self.waiting[0]
            rid = seq.request_id
            known = seq.tokens_holder(len(seq.token_ids))
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
            # The prompt's own array while it has no outputs (read-only); else a copy, so
            # that tokens appended later are not in it.
            out.new_requests.append(NewRequest(rid, np.asarray(known, np.int32), seq.num_prompt_tokens,
                                               seq.sampling, seq.seed, list(tables[rid])))
            scheduled.append((seq, n))
            budget -= n

        self._count_scheduled(scheduled, out)
        self.stats.steps += 1
        return out

    def _count_scheduled(self, scheduled: list[tuple[Sequence, int]], out: SchedulerOutput) -> None:
        """The step's tokens are as good as computed (later steps run after it, in stream
        order); one that reaches the end of its sequence samples a token, pending until read.
        (One loop over plain attributes: it runs for every sequence at every step.)"""
        ids, counts, starts, samples = out.request_ids, out.num_scheduled_tokens, out.num_computed_tokens, out.samples
        bm = self.block_manager
        caching, block_size = bm.enable_prefix_caching, bm.block_size
        for seq, n in scheduled:
            start = seq.num_computed_tokens
            ids.append(seq.request_id)
            counts.append(n)
            starts.append(start)
            seq.num_computed_tokens = computed = start + n
            known = len(seq.token_ids)
            sample = computed == known + seq.num_pending
            samples.append(sample)
            if sample:
                seq.num_pending += 1
            # Only blocks whose tokens are all known can be hashed: a block that ends in the
            # token being computed now is published at the sequence's next step.
            ready = computed if computed < known else known
            if ready >= seq.num_published_tokens + block_size and caching:
                bm.publish_full_blocks(seq.request_id, seq.tokens_holder(ready), ready)
                seq.num_published_tokens = ready - ready % block_size

    def update_from_output(self, request_ids: list[int], token_ids: list[int], now: float) -> list[Sequence]:
        """Take in a step's sampled tokens (one per request, in its order); returns the
        sequences they finished."""
        finished = []
        for rid, token in zip(request_ids, token_ids):
            seq = self.requests.get(rid)
            if seq is None:          # it stopped at an earlier token; this one was speculative
                continue
            seq.num_pending -= 1
            seq.token_ids.append(token)
            seq.token_times.append(now)
            if self.stop_checker.stops(seq, token):
                reason = "stop"
            elif len(seq.token_ids) >= seq.max_num_tokens:
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
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        del self.requests[seq.request_id]
        self.stop_checker.drop(seq.request_id)
        self._finished_ids.append(seq.request_id)

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.block_manager.release(seq.request_id)
        seq.num_computed_tokens = seq.num_published_tokens = 0
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        out.preempted_request_ids.append(seq.request_id)
        self.stats.preemptions += 1
