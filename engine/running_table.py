"""The running sequences' counters in numpy arrays, one stable slot per sequence.

A step at batch 256 touches every running sequence twice (scheduling it, then taking in
its sampled token). As Python loops over Sequence objects that cost ~0.33 ms of host time a
step on a 2-core EPYC, 40% of the step's host work. Over these arrays scheduling is a few
vectorized operations, and only the sequences that need something of their own (a new
block while blocks are short, a block to publish, a possible stop) are visited one by one.
(Taking in the tokens still appends each to its sequence's list, in Python.)

A sequence takes a slot when it starts running and gives it back when it stops (finished
or preempted). While it holds one, its `Sequence.counts` row is a view of the slot's row
here, so the Sequence and the table never disagree.
"""
from __future__ import annotations

import numpy as np

from engine.sequence import Sequence


class RunningTable:
    def __init__(self, max_num_seqs: int):
        self.counts = np.zeros((max_num_seqs, 3), np.int64)     # Sequence.counts of each slot
        self.num_known = np.zeros(max_num_seqs, np.int64)       # seq.num_known
        self.max_num_tokens = np.zeros(max_num_seqs, np.int64)
        self.capacity = np.zeros(max_num_seqs, np.int64)        # tokens its KV blocks hold
        self.request_ids = np.zeros(max_num_seqs, np.int64)
        # Where the stop checker must see each token: stop token ids or stop strings.
        self.checks_every_token = np.zeros(max_num_seqs, bool)
        self.ignores_eos = np.zeros(max_num_seqs, bool)
        self.seqs: list[Sequence | None] = [None] * max_num_seqs
        self.slot_of: dict[int, int] = {}                         # request id -> slot
        self._free = list(range(max_num_seqs - 1, -1, -1))

    def enter(self, seq: Sequence, capacity: int, checks_every_token: bool) -> None:
        slot = self._free.pop()
        self.counts[slot] = seq.counts
        seq.counts, seq.slot = self.counts[slot], slot
        self.num_known[slot] = seq.num_known
        self.max_num_tokens[slot] = seq.max_num_tokens
        self.capacity[slot] = capacity
        self.request_ids[slot] = seq.request_id
        self.checks_every_token[slot] = checks_every_token
        self.ignores_eos[slot] = seq.sampling.ignore_eos
        self.seqs[slot] = seq
        self.slot_of[seq.request_id] = slot

    def leave(self, seq: Sequence) -> None:
        """The sequence keeps its counters in a row of its own."""
        seq.counts = seq.counts.copy()
        self.seqs[seq.slot] = None
        del self.slot_of[seq.request_id]
        self._free.append(seq.slot)
        seq.slot = -1
