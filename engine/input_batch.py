"""The model runner's persistent state: one stable row per request the scheduler runs.

A request gets a row when the scheduler admits it (a `NewRequest`) and keeps it
until it finishes or is preempted; a step's diff (`SchedulerOutput`) adds rows,
grows block tables and drops rows, and nothing else is copied from the
scheduler. Rows live in numpy arrays edited in place, so the runner builds a
step's inputs with vectorized numpy over them, as vLLM v1's InputBatch. A
dropped row is filled by the last row, together with everything indexed by row.

The host's copy of each request's tokens lives here too: the prompt on
admission, each sampled token once it is read. A token not read yet is on the
device; `pending_source` says where (see ModelRunner).
"""
from __future__ import annotations

import math

import numpy as np

from engine.scheduler import NewRequest, SchedulerOutput


class InputBatch:
    def __init__(self, max_num_seqs: int, max_model_len: int, block_size: int):
        self.block_size = block_size
        self.max_num_seqs = max_num_seqs
        self.request_ids: list[int | None] = [None] * max_num_seqs
        self.row_of: dict[int, int] = {}                 # request id -> row
        self.num_rows = 0
        self.num_removals = 0      # rows move only when one is removed: a layout version

        def rows(dtype, fill=0):
            return np.full(max_num_seqs, fill, dtype)
        self.num_prompt = rows(np.int64)
        # Index of the row's newest token among the last launched step's sampled tokens
        # (still on the device), or -1 where the host has it.
        self.pending_source = rows(np.int64, -1)
        self.temperature = rows(np.float32)
        self.top_k = rows(np.int32)
        self.top_p = rows(np.float32, 1)
        self.seeds = rows(np.int64)
        self.token_ids = np.zeros((max_num_seqs, max_model_len), np.int32)
        # Entries past a row's num_blocks, and rows past num_rows, stay 0: they are the
        # padding of the step's block tables.
        self.block_table = np.zeros((max_num_seqs, math.ceil(max_model_len / block_size)), np.int32)
        self.num_blocks = rows(np.int64)
        self._row_arrays = (self.num_prompt, self.pending_source, self.temperature, self.top_k, self.top_p,
                            self.seeds, self.token_ids, self.block_table, self.num_blocks)

    def apply(self, out: SchedulerOutput) -> np.ndarray:
        """Follow the scheduler's diff; returns the rows of the step's requests, in batch order."""
        for rid in (*out.finished_request_ids, *out.preempted_request_ids):
            row = self.row_of.get(rid)     # a request preempted before it finished has no row
            if row is not None:
                self.remove(row)
        for new in out.new_requests:
            self.add(new)
        for rid, block_ids in out.new_block_ids.items():
            row, have = self.row_of[rid], int(self.num_blocks[self.row_of[rid]])
            self.block_table[row, have:have + len(block_ids)] = block_ids
            self.num_blocks[row] = have + len(block_ids)
        return np.fromiter(map(self.row_of.__getitem__, out.request_ids), np.int64, len(out.request_ids))

    def add(self, new: NewRequest) -> None:
        row = self.num_rows
        self.num_rows += 1
        self.request_ids[row] = new.request_id
        self.row_of[new.request_id] = row
        self.num_prompt[row] = new.num_prompt_tokens
        self.pending_source[row] = -1            # a request's tokens are read before it comes back
        p = new.sampling
        self.temperature[row], self.top_k[row], self.top_p[row] = p.temperature, p.top_k, p.top_p
        self.seeds[row] = new.seed
        self.token_ids[row, :len(new.token_ids)] = new.token_ids
        self.block_table[row, :len(new.block_ids)] = new.block_ids
        self.num_blocks[row] = len(new.block_ids)

    def remove(self, row: int) -> None:
        """Drop the row and move the last row into its place."""
        del self.row_of[self.request_ids[row]]
        last = self.num_rows - 1
        if row != last:
            for values in self._row_arrays:
                values[row] = values[last]
            self.request_ids[row] = self.request_ids[last]
            self.row_of[self.request_ids[row]] = row
        self.request_ids[last] = None
        self.block_table[last] = 0
        self.num_blocks[last] = 0
        self.pending_source[last] = -1
        self.num_rows = last
        self.num_removals += 1

    def mark_sampled(self, rows: np.ndarray) -> None:
        """A step was launched that sampled these rows, in this order: their newest tokens
        are on the device, at these indices of its output; every other row's, the host has."""
        self.pending_source[:self.num_rows] = -1
        self.pending_source[rows] = np.arange(len(rows))

    def record_tokens(self, request_ids: list[int], rows: np.ndarray, num_removals: int,
                      positions: np.ndarray, token_ids: list[int]) -> None:
        """Sampled tokens read back: token i of request_ids[i] at positions[i]; `rows` are
        their rows when the layout version was `num_removals`. Requests that have left
        since (finished or preempted) are skipped."""
        if num_removals != self.num_removals:
            kept = [(self.row_of[r], i) for i, r in enumerate(request_ids) if r in self.row_of]
            rows = np.array([row for row, _ in kept], np.int64)
            index = np.array([i for _, i in kept], np.int64)
            positions, token_ids = positions[index], np.asarray(token_ids, np.int64)[index]
        self.token_ids[rows, positions] = token_ids
