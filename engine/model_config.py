"""Llama-family architecture description, and presets of real architectures."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

LLAMA3_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_position: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    # Llama 3 style frequency scaling: factor, low/high_freq_factor,
    # original_max_position_embeddings. Empty means plain RoPE.
    rope_scaling: dict = field(default_factory=dict, hash=False, compare=False)
    head_dim: int = 0

    def __post_init__(self) -> None:
        # A model file's metadata arrives here unchecked: a zero, negative or non-integer size
        # would fail later, deep in the model's set-up, with an error that names no field.
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "intermediate_size",
                     "vocab_size", "max_position"):
            _require(name, getattr(self, name), minimum=1)
        _require("head_dim", self.head_dim, minimum=0)
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, cfg: dict) -> "ModelConfig":
        scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
        if not isinstance(scaling, dict):
            raise ValueError(f"rope_scaling must be an object, got {scaling!r}")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in ("default", "llama3"):
            raise ValueError(f"unsupported rope scaling type {kind!r}")
        if kind == "llama3" and (missing := [k for k in LLAMA3_SCALING_KEYS if k not in scaling]):
            raise ValueError(f"llama3 rope_scaling lacks {', '.join(missing)}")
        theta = cfg.get("rope_theta", scaling.get("rope_theta", 10000.0))
        return cls(
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"],
            num_kv_heads=cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            intermediate_size=cfg["intermediate_size"],
            vocab_size=cfg["vocab_size"],
            max_position=cfg.get("max_position_embeddings", 2048),
            rope_theta=float(theta),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_scaling=dict(scaling) if kind == "llama3" else {},
            head_dim=cfg.get("head_dim") or 0,
        )


def _require(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


_SMOLLM2_135M = ModelConfig(
    hidden_size=576, num_layers=30, num_heads=9, num_kv_heads=3, intermediate_size=1536,
    vocab_size=49152, max_position=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
    tie_word_embeddings=True)

PRESETS: dict[str, ModelConfig] = {
    "smollm2-135m": _SMOLLM2_135M,
    "smollm2-360m": replace(_SMOLLM2_135M, hidden_size=960, num_layers=32, num_heads=15,
                            num_kv_heads=5, intermediate_size=2560, head_dim=0),
    "llama-3.2-1b": ModelConfig(
        hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8, intermediate_size=8192,
        vocab_size=128256, max_position=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}),
}
