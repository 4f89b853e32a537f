"""One request as the scheduler sees it: tokens, KV blocks, progress, timestamps."""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from engine.sampling_params import SamplingParams


# Stands in token_ids for a token sampled on the device whose value the host has
# not read yet (the step loop reads tokens one step late).
PENDING_TOKEN = -1


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    request_id: int
    prompt_token_ids: list[int]
    sampling: SamplingParams
    seed: int                      # effective RNG seed (request's or derived)
    arrival_time: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        self.token_ids: list[int] = list(self.prompt_token_ids)
        self.status = SequenceStatus.WAITING
        # Tokens whose K/V are in the cache. Reset to 0 (or the prefix-cache
        # hit) when the sequence is preempted and later recomputed.
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []   # prefix-cache hashes of full blocks
        self.finish_reason: str | None = None
        self.token_times: list[float] = []
        self.finish_time: float | None = None
        self.num_preemptions = 0
        # Set when the pending token is the last this sequence may produce (max_tokens
        # or the context limit): the scheduler gives it no further step.
        self.out_of_budget = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_pending(self) -> int:
        """Make room for a token sampled on the device; return its index."""
        self.token_ids.append(PENDING_TOKEN)
        return len(self.token_ids) - 1

    def resolve_token(self, index: int, token_id: int, now: float) -> None:
        self.token_ids[index] = token_id
        self.token_times.append(now)

    def finish(self, reason: str, now: float, last_index: int) -> None:
        """Finish at token `last_index`, dropping tokens launched after it."""
        del self.token_ids[last_index + 1:]
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
        self.finish_time = now
