"""Model sources: GGUF tensor types, HF folders, dummy presets, bad model files."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine import LLM, ModelSourceError, SamplingParams
from engine.gguf_file import GGUFFile
from engine.model_config import PRESETS
from engine.model_source import resolve

gguf = pytest.importorskip("gguf")
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128)
TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order (what convert_hf_to_gguf writes)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_hf_weights(vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, f, d = TINY["hidden"], TINY["ffn"], TINY["hidden"] // TINY["heads"]
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (vocab, h)), "model.norm.weight": 1 + rng.normal(0, 0.1, h)}
    for i in range(TINY["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        w[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, h)
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, h ** -0.5, (h, h))
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, h ** -0.5, (TINY["kv_heads"] * d, h))
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, h ** -0.5, (TINY["kv_heads"] * d, h))
        w[p + "self_attn.o_proj.weight"] = rng.normal(0, h ** -0.5, (h, h))
        w[p + "mlp.gate_proj.weight"] = rng.normal(0, h ** -0.5, (f, h))
        w[p + "mlp.up_proj.weight"] = rng.normal(0, h ** -0.5, (f, h))
        w[p + "mlp.down_proj.weight"] = rng.normal(0, f ** -0.5, (h, f))
    return {k: v.astype(np.float32) for k, v in w.items()}


GGUF_NAME = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}


def write_tiny_gguf(path, source: GGUFFile, weights: dict, qtype: str) -> dict[str, np.ndarray]:
    """A tiny llama GGUF with the real tokenizer; returns what each tensor dequantizes to."""
    f = source.fields
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(TINY["layers"])
    w.add_context_length(512)
    w.add_embedding_length(TINY["hidden"])
    w.add_feed_forward_length(TINY["ffn"])
    w.add_head_count(TINY["heads"])
    w.add_head_count_kv(TINY["kv_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(f["tokenizer.ggml.pre"])
    w.add_token_list(f["tokenizer.ggml.tokens"])
    w.add_token_types(f["tokenizer.ggml.token_type"])
    w.add_token_merges(f["tokenizer.ggml.merges"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(f["tokenizer.chat_template"])
    qt = gguf.GGMLQuantizationType[qtype]
    expected = {}
    for name, arr in weights.items():
        if name.startswith("model.layers."):
            _, _, i, *rest = name.split(".")
            gname = f"blk.{i}.{GGUF_NAME['.'.join(rest[:-1])]}.weight"
        else:
            gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}[name]
        if "attn_q" in gname:
            arr = _permute(arr, TINY["heads"])
        elif "attn_k" in gname:
            arr = _permute(arr, TINY["kv_heads"])
        if arr.ndim == 1:
            w.add_tensor(gname, arr)
            expected[gname] = arr
        else:
            data = gguf.quants.quantize(arr, qt)
            w.add_tensor(gname, data, raw_dtype=qt)
            expected[gname] = gguf.quants.dequantize(data, qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.fixture(scope="module")
def real_gguf(model_path):
    return GGUFFile(model_path)


@pytest.mark.parametrize("qtype", TYPES)
def test_gguf_tensor_types_dequantize_exactly(tmp_path, real_gguf, qtype):
    weights = tiny_hf_weights(len(real_gguf.fields["tokenizer.ggml.tokens"]))
    path = tmp_path / f"tiny-{qtype}.gguf"
    expected = write_tiny_gguf(path, real_gguf, weights, qtype)
    loaded = GGUFFile(path)
    assert {t.name: t.type_name for t in loaded.tensors}["blk.0.attn_q.weight"] == qtype
    for t in loaded.tensors:
        assert torch.equal(loaded.load(t), torch.from_numpy(np.asarray(expected[t.name], np.float32))), t.name
    # Through the model source the Q/K permutation is undone: back to HF layout.
    hf_named = dict(resolve(str(path)).load_weights(torch.device("cpu"), torch.float32))
    tol = {"F32": 0, "F16": 1e-3, "BF16": 1e-2, "Q8_0": 1e-2, "Q4_0": 0.2, "Q4_1": 0.2}[qtype]
    for name, ref in weights.items():
        got = hf_named[name]
        err = ((got - torch.from_numpy(ref)).norm() / np.linalg.norm(ref)).item()
        assert err <= tol + 1e-7, (name, err)
    out = LLM(str(path), backend="torch", kv_cache_tokens=512).generate(
        ["Hello"], SamplingParams(max_tokens=4, temperature=0, ignore_eos=True))[0]
    assert len(out.token_ids) == 4


def test_hf_folder_gives_the_same_tokens_as_the_gguf(tmp_path, hf, llm):
    """HF's own dequantization of the GGUF, saved as a plain safetensors folder."""
    import json
    from safetensors.torch import save_file
    model, tok = hf
    folder = tmp_path / "hf"
    tok.save_pretrained(folder)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(folder / "model.safetensors"))
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    (folder / "config.json").write_text(json.dumps(config))
    from_folder = LLM(str(folder), backend="torch", dtype="float32", kv_cache_tokens=2048)
    assert from_folder.tokenizer.eos_token_ids == llm.tokenizer.eos_token_ids
    prompt = [{"role": "user", "content": "Name three colors."}]
    params = SamplingParams(max_tokens=24, temperature=0)
    assert from_folder.tokenizer.encode_chat(prompt) == llm.tokenizer.encode_chat(prompt)
    assert from_folder.generate([prompt], params)[0].token_ids == llm.generate([prompt], params)[0].token_ids


@pytest.mark.parametrize("preset", ["smollm2-135m", "smollm2-360m"])
def test_dummy_presets_run_from_token_ids(preset):
    eng = LLM(f"dummy:{preset}", backend="torch", kv_cache_tokens=256)
    assert eng.model.num_parameters > 100e6 and eng.tokenizer is None
    out = eng.generate([[1, 2, 3, 4]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))[0]
    assert len(out.token_ids) == 3 and out.text == ""


def test_llama_3_2_1b_preset_describes_the_real_architecture():
    c = PRESETS["llama-3.2-1b"]
    assert (c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (2048, 16, 32, 8, 64)
    from engine.model import rope_cos_sin
    table = rope_cos_sin(c, 16, "cpu")            # llama3 frequency scaling applies
    assert table.shape == (16, 64) and torch.isfinite(table).all()


@pytest.mark.parametrize("name, message", [
    ("dummy:gpt-9", "unknown dummy preset 'gpt-9'"),
    ("nope", "unknown model 'nope'"),
    ("/does/not/exist.gguf", "model file or folder not found"),
])
def test_bad_model_names(name, message):
    with pytest.raises(ModelSourceError, match=message):
        resolve(name)


def test_text_prompt_on_tokenizerless_model_is_refused():
    eng = LLM("dummy:smollm2-135m", backend="torch", kv_cache_tokens=64)
    from engine import PromptError
    with pytest.raises(PromptError, match="no tokenizer"):
        eng.generate(["hello"])


def test_truncated_gguf_is_refused(tmp_path, model_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model_path.read_bytes()[:5_000_000])
    with pytest.raises(ModelSourceError, match="truncated"):
        resolve(str(cut))
