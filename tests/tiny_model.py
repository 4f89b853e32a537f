"""A tiny model for tests where the faults, not the text, are under test: SmolLM2's
architecture and tokenizer with 2 layers of width 64 and random weights (loads in a
fraction of a second; tests/test_model_sources.py checks such files load right)."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, model_path) -> Path:
    from engine.gguf_file import GGUFFile
    from tests.test_model_sources import tiny_hf_weights, write_tiny_gguf
    real = GGUFFile(model_path)
    path = tmp_path_factory.mktemp("tiny-model") / "tiny.gguf"
    write_tiny_gguf(path, real.fields, tiny_hf_weights(len(real.fields["tokenizer.ggml.tokens"])), "F32")
    return path
