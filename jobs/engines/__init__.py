"""Engines a benchmark can run: ours and the peers, all emitting the same records.

Each module exposes `run(workload, model, ...) -> EngineRun`; `run_engine` below calls
each with the options it takes.
"""
from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field

from jobs.metrics import Completion
from jobs.workloads import TOKEN_RANGE

ENGINES = {"ours": "jobs.engines.ours", "hf": "jobs.engines.hf", "hf-static": "jobs.engines.hf",
           "llamacpp": "jobs.engines.llamacpp"}


@dataclass
class EngineRun:
    engine: str
    config: dict                      # what, besides the workload, decides the figures
    completions: list[Completion]
    wall_s: float
    extra_metrics: dict = field(default_factory=dict)   # name -> value (peak memory, syncs...)


def engine_module(name: str):
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {', '.join(ENGINES)}")
    return importlib.import_module(ENGINES[name])


def run_engine(name: str, workload, model: str, backend: str, device: str, dtype: str) -> EngineRun:
    """One engine on one workload, with the options that engine takes."""
    module = engine_module(name)
    if name == "ours":
        return module.run(workload, model, backend=backend, dtype=dtype)
    if name == "llamacpp":
        return module.run(workload, model)   # always on CPU, in the GGUF's own types: it is the CPU floor
    return module.run(workload, model, device=device, dtype=dtype, static_cache=name == "hf-static")


def warmup_prompts(prompts: list[list[int]]) -> list[list[int]]:
    """Prompts of the measured prompts' lengths made of other, random tokens: an engine
    warms up on exactly the shapes it is measured on, and no measured prompt's prefix
    is left in any cache by it. Every engine warms up on the same prompts."""
    rng = random.Random(0x5EED)
    return [[rng.randint(*TOKEN_RANGE) for _ in p] for p in prompts]
