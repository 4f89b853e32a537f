"""EngineConfig: validated once, overridable from the environment, resolved by LLM into
what the engine really runs with, and the one object its parts read their settings from."""
from __future__ import annotations

import warnings

import pytest

from engine import LLM
from engine.config import EngineConfig


@pytest.mark.parametrize("settings, message", [
    ({"backend": "tpu"}, "unknown backend 'tpu'"),
    ({"dtype": "int3"}, "unknown dtype 'int3'"),
    ({"max_num_seqs": 0}, "max_num_seqs and max_num_batched_tokens must be >= 1"),
    ({"max_model_len": 0}, "max_model_len must be >= 1"),
    ({"kv_cache_tokens": 8}, "KV cache of 8 tokens holds less than one block of 16"),
    ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization must be in \(0, 1\]"),
    ({"decode_slack": 0.5}, "decode_slack must be >= 1"),
    ({"decode_few_rows": -1}, "decode_few_rows, gemv_max_rows and gemm_max_rows >= 0"),
    ({"decode_few_chunk": 100}, "decode_few_chunk must be a positive multiple of 16, not 100"),
    ({"decode_few_chunk": 0}, "decode_few_chunk must be a positive multiple of 16, not 0"),
    ({"prefill_ws_keys": 96}, "prefill_ws_keys must be 64 or 128, not 96"),
    ({"prefill_gemm_tma": True}, "prefill_gemm_tma must be one of off, mlp, all, not True"),
    ({"prefill_m_tiles": 4}, r"prefill_m_tiles must be 0 \(chosen per step\), 1, 2 or 3, not 4"),
    ({"prefill_silu_width": 192}, r"prefill_silu_width must be 0 \(chosen per step\), 128 or 256, not 192"),
])
def test_bad_settings_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig("m", **settings)


def test_environment_overrides_fill_only_what_the_caller_left_unset():
    env = {"ROADGATE_DECODE_SLACK": "1.75", "ROADGATE_CUDA_DEBUG": "1", "ROADGATE_DECODE_FEW_ROWS": "0",
           "ROADGATE_MAX_NUM_BATCHED_TOKENS": "16384"}
    config = EngineConfig.from_env("m", environ=env, gemv_max_rows=4)
    assert (config.decode_slack, config.cuda_debug, config.gemv_max_rows) == (1.75, True, 4)
    assert config.max_num_batched_tokens == 16384
    assert config.decode_few_rows == 0
    with pytest.warns(UserWarning, match="ROADGATE_DECODE_SLACK='1.75' is not applied: the caller sets decode_slack=2.0"):
        assert EngineConfig.from_env("m", environ=env, decode_slack=2.0).decode_slack == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")        # the caller asking for what the environment says: nothing to warn of
        assert EngineConfig.from_env("m", environ=env, decode_slack=1.75).decode_slack == 1.75
    for pinned in ({}, {"decode_slack": 2.0}):   # refused whether or not the caller sets the knob too
        with pytest.raises(ValueError, match="ROADGATE_DECODE_SLACK='many' is not a valid decode_slack"):
            EngineConfig.from_env("m", environ={"ROADGATE_DECODE_SLACK": "many"}, **pinned)
    # The GEMM scope by name, or 0 / 1 as the other switches take.
    for value, scope in [("mlp", "mlp"), ("1", "all"), ("0", "off"), ("all", "all")]:
        assert EngineConfig.from_env("m", environ={"ROADGATE_PREFILL_GEMM_TMA": value}).prefill_gemm_tma == scope
    with pytest.raises(ValueError, match="ROADGATE_PREFILL_GEMM_TMA='qkv' is not a valid prefill_gemm_tma"):
        EngineConfig.from_env("m", environ={"ROADGATE_PREFILL_GEMM_TMA": "qkv"})
    with pytest.raises(TypeError, match="unknown engine settings: max_seqs"):
        EngineConfig.from_env("m", environ={}, max_seqs=3)
    with pytest.raises(AttributeError):   # frozen: built once, never poked afterwards
        config.gemv_max_rows = 8


def test_llm_resolves_the_config_and_passes_it_whole():
    llm = LLM("dummy:smollm2-135m", backend="torch", dtype="fp32", kv_cache_tokens=256,
              max_num_seqs=3, max_num_batched_tokens=64)
    c = llm.config
    assert (c.backend, c.dtype, c.device, c.num_kv_blocks) == ("torch", "float32", "cpu", 16)
    assert c.max_model_len == 256 == llm.max_model_len       # the model's 8192, capped by the KV cache
    assert (llm.scheduler.max_num_seqs, llm.scheduler.max_num_batched_tokens) == (3, 64)
    assert llm.runner.max_model_len == c.max_model_len and llm.runner.block_size == c.block_size
    assert llm.stats["kv_cache_blocks"] == 16
