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
    # The prompt's token ids, kept as a read-only int32 array (the engine's, from validating
    # the prompt): the runner copies it and the block manager hashes its blocks without a loop
    # over tokens, and no Python int is made per prompt token (13 µs a 1,000-token prompt on
    # the development host, before the first step of a batch).
    prompt: np.ndarray | list[int]
    sampling: SamplingParams
    seed: int                      # effective RNG seed (request's or derived)
    max_num_tokens: int            # length at which it samples no more: max_tokens or the context
    arrival_time: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if not (isinstance(self.prompt, np.ndarray) and self.prompt.dtype == np.int32):
            self.prompt = np.array(self.prompt, np.int32)
        self.prompt.flags.writeable = False      # shared with the runner and the block manager
        self.output_token_ids: list[int] = []    # read so far
        # The prompt and outputs in one list, made the first time a caller needs them so
        # (a block of outputs to hash, a preempted sequence's tokens), then kept current.
        self._known: list[int] | None = None
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

    def append_token(self, token: int, now: float) -> None:
        """An output token read back at `now`."""
        self.output_token_ids.append(token)
        self.token_times.append(now)
        if self._known is not None:
            self._known.append(token)

    @property
    def token_ids(self) -> list[int]:
        """Tokens whose values the host knows: the prompt, then the outputs read so far (the
        sequence's own list: read it, do not change it)."""
        if self._known is None:
            self._known = self.prompt.tolist() + self.output_token_ids
        return self._known

    @property
    def num_known(self) -> int:
        return len(self.prompt) + len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Known and pending tokens: the length the sequence has on the device."""
        return self.num_known + self.num_pending

    def tokens_holder(self, n: int) -> np.ndarray | list[int]:
        """What holds its first n known tokens, to be sliced: the prompt's array while they
        are all prompt tokens, else the token list."""
        return self.prompt if n <= len(self.prompt) else self.token_ids

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.prompt.tolist()

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

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
