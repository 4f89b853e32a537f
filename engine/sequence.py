"""One request as the scheduler sees it: tokens, progress, timestamps.

Only the scheduler writes a Sequence (the block manager keeps its KV blocks; the
model runner keeps its own per-row copy of what it needs). Everyone else reads it.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import numpy as np

from engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


COMPUTED, PENDING, PUBLISHED = range(3)     # columns of Sequence.counts


def counter(column: int) -> property:
    """One of Sequence.counts as an int attribute."""
    def get(seq: Sequence) -> int:
        return int(seq.counts[column])

    def set_(seq: Sequence, value: int) -> None:
        seq.counts[column] = value
    return property(get, set_)


@dataclass(eq=False)     # a request is itself: compared by identity
class Sequence:
    request_id: int
    prompt_token_ids: list[int]
    sampling: SamplingParams
    seed: int                      # effective RNG seed (request's or derived)
    max_num_tokens: int            # length at which it samples no more: max_tokens or the context
    arrival_time: float = field(default_factory=time.perf_counter)
    # The prompt as int32 too (the engine has it from validating the prompt; else made here):
    # the runner copies it and the block manager hashes its blocks without a loop over tokens.
    prompt_array: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.prompt_array is None:
            self.prompt_array = np.array(self.prompt_token_ids, np.int32)
        self.prompt_array.flags.writeable = False      # shared with the runner and the block manager
        # Tokens whose values the host knows: the prompt, then the outputs read so far.
        self.token_ids: list[int] = list(self.prompt_token_ids)
        # Three counters in one int64 row (columns COMPUTED, PENDING, PUBLISHED); while the
        # sequence runs, the row is a view of its slot in the scheduler's RunningTable.
        #   computed:  tokens whose K/V are in the cache, or queued to be: the scheduler counts
        #              a step's tokens when it schedules them. Back to 0 (or the prefix-cache
        #              hit) on preemption.
        #   pending:   tokens sampled on the device whose values the host has not read yet (the
        #              step loop reads one step late): a count, the tokens are on the device.
        #   published: tokens of its leading full blocks that are in the prefix cache (the block
        #              manager holds their hashes); the next block is published once it is
        #              computed and known.
        self.counts = np.zeros(3, np.int64)
        self.slot = -1                 # its row of the RunningTable while running
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.token_times: list[float] = []
        self.finish_time: float | None = None
        self.num_preemptions = 0

    num_computed_tokens = counter(COMPUTED)
    num_pending = counter(PENDING)
    num_published_tokens = counter(PUBLISHED)

    @property
    def num_tokens(self) -> int:
        """Known and pending tokens: the length the sequence has on the device."""
        return len(self.token_ids) + self.num_pending

    def tokens_holder(self, n: int) -> np.ndarray | list[int]:
        """What holds its first n known tokens, to be sliced: the prompt's array while they
        are all prompt tokens, else the token list."""
        return self.prompt_array if n <= len(self.prompt_array) else self.token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def samples_no_more(self) -> bool:
        """Its last token is sampled (perhaps still in flight): no further step."""
        return self.num_tokens >= self.max_num_tokens
