"""Engines a benchmark can run: ours and the peers, all emitting the same records.

Each module exposes `run(workload, model, device, **options) -> EngineRun`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from jobs.metrics import Completion

ENGINES = {"ours": "jobs.engines.ours", "hf": "jobs.engines.hf", "llamacpp": "jobs.engines.llamacpp"}


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
