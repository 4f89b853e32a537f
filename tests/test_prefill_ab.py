"""benchmarks/prefill.py's A/B of one tuning knob: the setting it parses, the KV cache each of
its two engines gets, and what it refuses before any GPU work (a comparison to store, --gpu
without --preflight)."""
from __future__ import annotations

import argparse
import sys

import pytest

from benchmarks import prefill
from benchmarks.prefill import kv_tokens_for, parse_setting


@pytest.mark.parametrize("text, expected", [
    ("prefill_gemm_tma=mlp", ("prefill_gemm_tma", "mlp")),
    ("prefill_gemm_tma=1", ("prefill_gemm_tma", "all")),
    ("prefill_ws=0", ("prefill_ws", False)),
    ("max_num_batched_tokens=4096", ("max_num_batched_tokens", 4096)),
    ("decode_slack=1.25", ("decode_slack", 1.25)),
    ("prefill_m_tiles=2", ("prefill_m_tiles", 2)),
    ("prefill_silu_width=0", ("prefill_silu_width", 0)),
])
def test_a_setting_is_read_as_its_environment_variable_would_be(text, expected):
    assert parse_setting(text) == expected


@pytest.mark.parametrize("text, problem", [
    ("prefill_gemm_tma", "not SETTING=VALUE"),
    ("block_size=32", "not SETTING=VALUE"),          # an engine setting, but no tuning knob
    ("max_num_batched_tokens=lots", "'lots' is not a valid max_num_batched_tokens"),
    ("prefill_gemm_tma=qkv", "'qkv' is not a valid prefill_gemm_tma"),
    ("prefill_silu_width=192", r"prefill_silu_width must be 0 \(chosen per step\), 128 or 256, not 192"),  # int refused
    ("prefill_ws_keys=96", "prefill_ws_keys must be 64 or 128, not 96"),
])
def test_a_setting_that_is_no_knob_or_no_value_is_refused(text, problem):
    with pytest.raises(argparse.ArgumentTypeError, match=problem):
        parse_setting(text)


def test_the_kv_cache_holds_the_largest_shapes_prompts_and_output_in_whole_blocks():
    # 64 x (1,000 + 1) tokens: 63 blocks of 16 a prompt; 1 x 8,001: 501 blocks.
    assert kv_tokens_for([(1, 4000), (64, 1000)], 16) == 64 * 63 * 16
    assert kv_tokens_for([(1, 8000), (1, 4000)], 16) == 501 * 16
    assert kv_tokens_for([(2, 15)], 16) == 2 * 16   # 15 tokens and the output fill one block


@pytest.mark.parametrize("argv, problem", [
    (["--ab", "prefill_gemm_tma=1"], "--ab compares two engines and stores neither; pass --no-store"),
    (["--gpu", "1"], "--gpu names the GPU --preflight leases; pass --preflight too"),
])
def test_a_run_it_cannot_do_is_refused_before_any_gpu_work(monkeypatch, capsys, argv, problem):
    monkeypatch.setattr(sys, "argv", ["prefill.py", *argv])
    monkeypatch.setattr(prefill, "LLM", lambda *a, **k: pytest.fail("an engine was built"))
    with pytest.raises(SystemExit) as exit_:
        prefill.main()
    assert exit_.value.code == 2
    assert problem in capsys.readouterr().err
