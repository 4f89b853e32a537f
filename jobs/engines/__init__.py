"""Engines a benchmark can run: ours and the peers, all emitting the same records.

Each module exposes `run(workload, model, ...) -> EngineRun`; `run_engine` below calls
each with the options it takes.
"""
from __future__ import annotations

import functools
import hashlib
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

# The config keys that identify an engine's figures (part of its series); every other key
# of its config (versions, derived sizes such as the KV blocks that fit) is provenance.
IDENTITY_KEYS = {
    "ours": ("backend", "dtype", "max_num_seqs", "max_num_batched_tokens", "block_size"),
    "hf": ("device", "dtype", "batch_size", "attention", "cache"),
    "hf-static": ("device", "dtype", "batch_size", "attention", "cache"),
    "llamacpp": ("device", "n_threads", "n_batch"),
}


# Identifying where present, and absent from the runs made before they existed: adding one
# must not split those runs' series from the ones that follow.
OPTIONAL_IDENTITY_KEYS = {"ours": ("quantization",), "llamacpp": ("n_parallel",)}


def identity(name: str, config: dict) -> dict:
    return {key: config.get(key) for key in IDENTITY_KEYS[name]} | \
        {key: config[key] for key in OPTIONAL_IDENTITY_KEYS.get(name, ()) if key in config}


def model_digest(model: str) -> str:
    """What the engines loaded, by content: sha256 of the GGUF file (of a HF folder's files,
    in name order); a `dummy:` model is its name (its weights are random by design)."""
    from engine.model_source import alias_path
    if model.startswith("dummy:"):
        return model
    path = alias_path(model)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return _files_digest(tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


@functools.lru_cache(maxsize=8)
def _files_digest(files: tuple[tuple[str, int, int], ...]) -> str:
    """Keyed by (path, size, mtime): hashing the 98 MB GGUF once per process is enough."""
    digest = hashlib.sha256()
    for name, _, _ in files:
        with open(name, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


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
