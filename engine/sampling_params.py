"""Per-request sampling settings, validated on construction."""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field


@dataclass
class SamplingParams:
    """How to pick each next token and when to stop.

    temperature 0 means greedy; top_k 0 and top_p 1 switch those filters off. Both cut by
    value: top_k keeps every token at least as likely as the k-th (all its ties), top_p every
    token whose more likely tokens hold less than top_p of the probability.
    seed None lets the engine derive one from its own seed and the request.
    """

    max_tokens: int = 64
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop)
        self.stop_token_ids = [int(t) for t in self.stop_token_ids]
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not _finite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _finite(x) -> bool:
    """A real number, not NaN or infinite (NaN passes every comparison-based range check)."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
