"""The persistent batch: one row per scheduled sequence, kept from step to step.

A decode step changes little: every row gains one token, a few rows gain a
block, a few sequences arrive or leave. So, as in vLLM v1's InputBatch, the
rows live in numpy arrays edited in place, and the model runner builds a step's
inputs with vectorized numpy over them instead of a Python loop over sequences.

The rows of a step are rows [0, num_rows): a sequence gets a row when it is
scheduled and has none (first admission, or again after preemption), and loses
it at the first step that does not schedule it (finished, preempted, or out of
budget). The last row moves into the hole, together with everything indexed by
row, among it `pending_source`, the row's way to its token on the device.
"""
from __future__ import annotations

import math

import numpy as np

from engine.scheduler import ScheduledBatch
from engine.sequence import Sequence


class InputBatch:
    def __init__(self, max_num_seqs: int, max_model_len: int, block_size: int):
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.seqs: list[Sequence | None] = [None] * max_num_seqs
        self.row_of: dict[int, int] = {}                 # request id -> row
        self.num_rows = 0

        def rows(dtype, fill=0):
            return np.full(max_num_seqs, fill, dtype)
        self.num_computed = rows(np.int64)       # tokens in the KV cache (the step's first position)
        self.num_scheduled = rows(np.int64)      # tokens computed this step
        self.num_tokens = rows(np.int64)         # tokens of the sequence, a pending one included
        self.num_prompt = rows(np.int64)
        self.max_num_tokens = rows(np.int64)     # length at which the sequence samples no more
        # Index of the row's last token among the previous step's sampled tokens (still
        # on the device), or -1 where the host has the token.
        self.pending_source = rows(np.int64, -1)
        self.temperature = rows(np.float32)
        self.top_k = rows(np.int32)
        self.top_p = rows(np.float32, 1)
        self.seeds = rows(np.int64)
        # Entries past a row's num_blocks, and rows past num_rows, stay 0: they are the
        # padding of the step's block tables.
        self.block_table = np.zeros((max_num_seqs, math.ceil(max_model_len / block_size)), np.int32)
        self.num_blocks = rows(np.int64)
        self._row_arrays = (self.num_computed, self.num_scheduled, self.num_tokens, self.num_prompt,
                            self.max_num_tokens, self.pending_source, self.temperature, self.top_k,
                            self.top_p, self.seeds, self.block_table, self.num_blocks)

    def update(self, batch: ScheduledBatch) -> None:
        """Make rows [0, num_rows) the batch's sequences, with its token counts and blocks."""
        rows = np.array([self.row_of.get(s.request_id, -1) for s in batch.seqs], np.int64)
        counts = np.array(batch.num_new_tokens, np.int64)
        known = rows >= 0
        self.num_scheduled[:self.num_rows] = 0
        self.num_scheduled[rows[known]] = counts[known]
        # Highest first, so that the last row, which fills each hole, is never a hole itself.
        for row in np.flatnonzero(self.num_scheduled[:self.num_rows] == 0)[::-1].tolist():
            self.remove(row)
        for i in np.flatnonzero(~known).tolist():
            self.add(batch.seqs[i], batch.num_new_tokens[i])
        self._append_new_blocks()

    def add(self, seq: Sequence, num_scheduled: int) -> None:
        row = self.num_rows
        self.num_rows += 1
        self.seqs[row] = seq
        self.row_of[seq.request_id] = row
        self.num_computed[row] = seq.num_computed_tokens
        self.num_scheduled[row] = num_scheduled
        self.num_tokens[row] = seq.num_tokens
        self.num_prompt[row] = seq.num_prompt_tokens
        p = seq.sampling
        self.max_num_tokens[row] = min(seq.num_prompt_tokens + p.max_tokens, self.max_model_len)
        self.pending_source[row] = -1            # a sequence's tokens are read before it comes back
        self.temperature[row], self.top_k[row], self.top_p[row] = p.temperature, p.top_k, p.top_p
        self.seeds[row] = seq.seed
        self.block_table[row, :len(seq.block_table)] = seq.block_table
        self.num_blocks[row] = len(seq.block_table)

    def remove(self, row: int) -> None:
        """Drop the row and move the last row into its place."""
        del self.row_of[self.seqs[row].request_id]
        last = self.num_rows - 1
        if row != last:
            for values in self._row_arrays:
                values[row] = values[last]
            self.seqs[row] = self.seqs[last]
            self.row_of[self.seqs[row].request_id] = row
        self.seqs[last] = None
        self.block_table[last] = 0
        self.num_blocks[last] = 0
        self.pending_source[last] = -1
        self.num_scheduled[last] = 0
        self.num_rows = last

    def _append_new_blocks(self) -> None:
        """Copy the blocks allocated since a row last grew: only rows whose step
        crosses into a new block have any (decode: one row in block_size per step)."""
        n = self.num_rows
        end = self.num_computed[:n] + self.num_scheduled[:n]
        for row in np.flatnonzero(end > self.num_blocks[:n] * self.block_size).tolist():
            have = int(self.num_blocks[row])
            new = self.seqs[row].block_table[have:]
            self.block_table[row, have:have + len(new)] = new
            self.num_blocks[row] = have + len(new)

    def advance(self, sampled_rows: np.ndarray) -> tuple[list[Sequence], list[int]]:
        """The step is launched: its tokens are computed, and each sampled row has a
        new pending token at its step output index. Returns the sampled sequences and
        where each one's new token goes; those that may sample no more are marked
        out_of_budget (the scheduler gives them no further step)."""
        n = self.num_rows
        self.num_computed[:n] += self.num_scheduled[:n]
        self.pending_source[:n] = -1
        self.pending_source[sampled_rows] = np.arange(len(sampled_rows))
        seqs = self.seqs[:n] if len(sampled_rows) == n else [self.seqs[r] for r in sampled_rows.tolist()]
        indices = list(map(Sequence.append_pending, seqs))
        self.num_tokens[sampled_rows] += 1
        for row in sampled_rows[self.num_tokens[sampled_rows] >= self.max_num_tokens[sampled_rows]].tolist():
            self.seqs[row].out_of_budget = True
        return seqs, indices
