"""A tiny model for tests where the faults, not the text, are under test: SmolLM2's
architecture and tokenizer with 2 layers of width 64 and random weights (loads in a
fraction of a second; tests/test_model_sources.py checks such files load right)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, model_path) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny.gguf", model_path)


def write_tiny_model(path: Path, real_path: Path, scale: dict[str, float] | None = None) -> Path:
    """The tiny model as a GGUF at `path`, the tokenizer taken from the real GGUF at
    `real_path`; `scale` multiplies the named (HF-named) weights."""
    from engine.gguf_file import GGUFFile
    from tests.test_model_sources import tiny_hf_weights, write_tiny_gguf
    real = GGUFFile(real_path)
    weights = tiny_hf_weights(len(real.fields["tokenizer.ggml.tokens"]))
    weights = {name: w * (scale or {}).get(name, 1.0) for name, w in weights.items()}
    write_tiny_gguf(path, real.fields, weights, "F32")
    return path
