"""What a finished request returns."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str              # "stop" or "length"
    # time.perf_counter() seconds
    arrival_time: float
    token_times: list[float]        # when each output token reached the host
    finish_time: float
    num_preemptions: int = 0

    @property
    def first_token_time(self) -> float | None:
        return self.token_times[0] if self.token_times else None

    @property
    def ttft(self) -> float | None:
        return None if not self.token_times else self.token_times[0] - self.arrival_time

    @property
    def e2e(self) -> float:
        return self.finish_time - self.arrival_time
