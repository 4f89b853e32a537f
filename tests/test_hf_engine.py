"""The HF peer (jobs/engines/hf.py) loads the GGUF without drawing transformers' progress bars
into the bench's and the nightly task's output, and leaves transformers' own switch as it was."""
from __future__ import annotations

import pytest
import torch

from tests.tiny_model import tiny_model  # noqa: F401 (a fixture)

BARS = ("de-quantizing", "Loading weights")


def test_loading_draws_no_progress_bar(tiny_model, capfd):  # noqa: F811
    transformers = pytest.importorskip("transformers")
    from transformers.utils import logging as hf_logging

    from jobs.engines import hf

    # Without it, the same load draws both bars here: the check below is not vacuous.
    transformers.AutoModelForCausalLM.from_pretrained(tiny_model.parent, gguf_file=tiny_model.name)
    drawn = capfd.readouterr().err
    assert all(bar in drawn for bar in BARS)

    model, _ = hf.load(tiny_model, "cpu", torch.float32)
    printed = capfd.readouterr()
    assert not any(bar in printed.err + printed.out for bar in BARS)
    assert model.config.num_hidden_layers == 2 and hf_logging.is_progress_bar_enabled()
