"""Continuous batching with chunked prefill, prefix caching and preemption.

Each step has a budget of tokens. Running sequences are served first, in
order (a decode costs one token, an unfinished prefill a chunk of what is
left); then waiting sequences are admitted while the budget, the sequence
limit and free KV blocks allow. When a running sequence needs a block and none
is free, the most recently admitted running sequence is preempted: its blocks
are released and it goes back to the front of the queue, to be recomputed.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, SequenceStatus


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    num_new_tokens: list[int]     # tokens computed this step, per sequence

    @property
    def total_tokens(self) -> int:
        return sum(self.num_new_tokens)


@dataclass
class SchedulerStats:
    steps: int = 0
    preemptions: int = 0


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.block_manager = block_manager
        self.max_num_seqs = config.max_num_seqs
        self.max_num_batched_tokens = config.max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.stats = SchedulerStats()

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch:
        budget = self.max_num_batched_tokens
        batch = ScheduledBatch([], [])
        preempted = False
        block_size = self.block_manager.block_size
        # Preemption pops from the tail of `running`, which this loop has not reached yet.
        for seq in self.running:
            if budget == 0:
                break
            if seq.out_of_budget:      # its last token is in flight; nothing to compute
                continue
            n = min(seq.num_uncomputed_tokens, budget)
            # Most decodes fit in the blocks the sequence has: only a step that crosses
            # into a new block needs the block manager.
            if seq.num_computed_tokens + n > len(seq.block_table) * block_size:
                while not self.block_manager.can_allocate(seq, n) and self.running[-1] is not seq:
                    self._preempt(self.running.pop())
                    preempted = True
                if not self.block_manager.can_allocate(seq, n):
                    self._preempt(self.running.pop())   # seq itself: nothing left to take from
                    preempted = True
                    break
                self.block_manager.allocate(seq, n)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n

        # Admitting new work right after a preemption would only thrash.
        while self.waiting and budget > 0 and not preempted and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not seq.block_table:
                self.block_manager.acquire_cached_prefix(seq)
            n = min(seq.num_uncomputed_tokens, budget)
            if not self.block_manager.can_allocate(seq, n):
                self.block_manager.release(seq)
                break
            self.waiting.popleft()
            self.block_manager.allocate(seq, n)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.seqs.append(seq)
            batch.num_new_tokens.append(n)
            budget -= n
        self.stats.steps += 1
        return batch

    def commit(self, batch: ScheduledBatch) -> None:
        """Record that the batch's tokens are now in the KV cache (sequences that
        finished meanwhile are gone: their blocks are released)."""
        caching = self.block_manager.enable_prefix_caching
        block_size = self.block_manager.block_size
        for seq, n in zip(batch.seqs, batch.num_new_tokens):
            if seq.status is SequenceStatus.RUNNING:
                seq.num_computed_tokens += n
                # Only a step that fills a block has a block to publish to the prefix cache.
                if caching and seq.num_computed_tokens >= (len(seq.block_hashes) + 1) * block_size:
                    self.block_manager.register_computed_blocks(seq)

    def finish(self, seq: Sequence) -> None:
        """Drop a finished sequence, running or (preempted with a token in flight) waiting."""
        self.block_manager.release(seq)
        if seq in self.waiting:
            self.waiting.remove(seq)
        else:
            self.running.remove(seq)

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.release(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)
        self.stats.preemptions += 1
