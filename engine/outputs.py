"""What a finished request returns, and the error of a step whose model output had no token."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class ModelOutputError(RuntimeError):
    """The model's logits held no token to sample (a NaN, or nothing above -inf): broken
    weights, or activations past the dtype's range. The message names the requests."""


@dataclass
class RequestOutput:
    request_id: int
    prompt: np.ndarray              # the prompt's token ids, int32 (read-only): see prompt_token_ids
    text: str
    token_ids: list[int]
    finish_reason: str              # "stop" or "length"
    # time.perf_counter() seconds
    arrival_time: float
    token_times: list[float]        # when each output token reached the host
    finish_time: float
    num_preemptions: int = 0

    @property
    def prompt_token_ids(self) -> list[int]:
        """The prompt's token ids as Python ints, made when asked for (a batch's thousands of
        prompt tokens are not made into Python ints for callers that never read them)."""
        return self.prompt.tolist()

    @property
    def first_token_time(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def ttft(self) -> float | None:
        return None if not self.token_times else self.token_times[0] - self.arrival_time

    @property
    def e2e(self) -> float:
        return self.finish_time - self.arrival_time
