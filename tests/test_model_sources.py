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


def write_tiny_gguf(path, f: dict, weights: dict, qtype: str, head_count: int = TINY["heads"]
                    ) -> dict[str, np.ndarray]:
    """A tiny llama GGUF with the tokenizer of GGUF fields `f`; returns what each tensor
    dequantizes to. `head_count` is what the metadata claims (the Q rows are permuted for TINY's)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(TINY["layers"])
    w.add_context_length(512)
    w.add_embedding_length(TINY["hidden"])
    w.add_feed_forward_length(TINY["ffn"])
    w.add_head_count(head_count)
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
    expected = write_tiny_gguf(path, real_gguf.fields, weights, qtype)
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


# ---------------------------------------------------------------- damaged model folders and files
# Each is refused by resolve() with one line, before any weight is read; a template that
# fails on the input's messages is a PromptError, which `generate` reports before generating.

VOCAB = ["<unk>", "<s>", "</s>", "ab"] + [chr(c) for c in range(ord("a"), ord("a") + 60)]   # 64 tokens
TINY_CONFIG = {"model_type": "llama", "hidden_size": TINY["hidden"], "num_hidden_layers": TINY["layers"],
               "num_attention_heads": TINY["heads"], "num_key_value_heads": TINY["kv_heads"],
               "intermediate_size": TINY["ffn"], "vocab_size": len(VOCAB), "max_position_embeddings": 256,
               "tie_word_embeddings": True}


def tiny_hf_folder(path, chat_template: str | None = None, scale: dict[str, float] | None = None):
    """config.json, one safetensors file and a word-level tokenizer.json: a model in a few KiB.
    `scale` multiplies the named weights."""
    import json
    from safetensors.torch import save_file
    from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers
    path.mkdir()
    (path / "config.json").write_text(json.dumps(TINY_CONFIG))
    weights = {k: torch.from_numpy(v) * (scale or {}).get(k, 1.0) for k, v in tiny_hf_weights(len(VOCAB)).items()}
    save_file(weights, str(path / "model.safetensors"))
    tok = HFTokenizer(models.WordLevel({t: i for i, t in enumerate(VOCAB)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    config = {"eos_token": "</s>"} | ({"chat_template": chat_template} if chat_template else {})
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path


def refused(model: str, message: str) -> str:
    with pytest.raises(ModelSourceError, match=message) as e:
        resolve(model)
    assert "\n" not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("config, message", [
    (b"{not json", "config.json: not a readable JSON file"),
    (b"\xff\xfe{}", "config.json: not a readable JSON file"),
    (b"[1, 2]", "config.json: expected a JSON object, got list"),
    (b'"llama"', "config.json: expected a JSON object, got str"),
    ({"hidden_size": None}, "config.json lacks 'hidden_size'"),
    ({"num_hidden_layers": None}, "config.json lacks 'num_hidden_layers'"),
    ({"hidden_size": "64"}, "hidden_size must be an integer >= 1, got '64'"),
    ({"num_attention_heads": 0}, "num_heads must be an integer >= 1, got 0"),
    ({"vocab_size": -1}, "vocab_size must be an integer >= 1, got -1"),
    ({"rope_theta": "fast"}, "could not convert string to float"),
    ({"rms_norm_eps": float("nan")}, "rms_norm_eps must be a positive finite number"),
    ({"rope_scaling": "yes"}, "rope_scaling must be an object"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama3 rope_scaling lacks low_freq_factor"),
    ({"architectures": 5, "model_type": None}, "is not of the Llama family"),
    ({"vocab_size": 65}, "tensor model.embed_tokens.weight has shape \\[64, 64\\]; the model's config implies \\[65, 64\\]"),
    ({"tie_word_embeddings": False}, "tensor lm_head.weight is missing"),
])
def test_a_bad_config_json_is_one_line(tmp_path, config, message):
    import json
    folder = tiny_hf_folder(tmp_path / "m")
    if isinstance(config, dict):   # TINY_CONFIG with these keys changed (None: removed)
        config = json.dumps({k: v for k, v in (TINY_CONFIG | config).items() if v is not None}).encode()
    (folder / "config.json").write_bytes(config)
    refused(str(folder), message)


def test_corrupt_truncated_or_mismatched_safetensors_are_refused_from_the_header(tmp_path):
    from safetensors.torch import save_file
    folder = tiny_hf_folder(tmp_path / "m")
    weights_file = folder / "model.safetensors"
    whole = weights_file.read_bytes()
    for damaged, message in [(whole[: len(whole) // 2], "incomplete metadata, file not fully covered"),
                             (whole[:6], "header too small"), (b"\x00" * 4096, "header"),
                             (whole + b"\x00", "incomplete metadata")]:
        weights_file.write_bytes(damaged)
        assert refused(str(folder), message).startswith(f"cannot read safetensors file {weights_file}")
    weights = {k: torch.from_numpy(v) for k, v in tiny_hf_weights(len(VOCAB)).items()}
    save_file({k: v for k, v in weights.items() if k != "model.layers.1.mlp.down_proj.weight"}, str(weights_file))
    refused(str(folder), "tensor model.layers.1.mlp.down_proj.weight is missing")
    weights["model.layers.0.self_attn.o_proj.weight"] = weights["model.layers.0.self_attn.o_proj.weight"][:, :32].contiguous()
    save_file(weights, str(weights_file))
    refused(str(folder), "tensor model.layers.0.self_attn.o_proj.weight has shape \\[64, 32\\]")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_weight_that_is_not_finite_is_refused_before_any_work(tmp_path, bad):
    name = "model.layers.1.mlp.up_proj.weight"
    folder = tiny_hf_folder(tmp_path / "m", scale={name: bad})
    with pytest.raises(ModelSourceError, match=f"weight {name} holds {128 * 64} NaN or infinite values$"):
        LLM(str(folder), backend="torch", kv_cache_tokens=64)


# Finite weights whose attention scores overflow float32: every logit comes out NaN.
OVERFLOWING = {"model.layers.0.self_attn.q_proj.weight": 1e30, "model.layers.0.self_attn.k_proj.weight": 1e30}


def test_logits_with_no_token_to_sample_stop_the_engine_with_one_line(tmp_path):
    from engine import ModelOutputError
    llm = LLM(str(tiny_hf_folder(tmp_path / "m", scale=OVERFLOWING)), backend="torch", kv_cache_tokens=256)
    with pytest.raises(ModelOutputError, match="no token to sample .* for request 0 at sequence position 3, "
                                               "request 1 at sequence position 2: its weights are broken") as e:
        llm.generate([[5, 6, 7], [8, 9]], SamplingParams(max_tokens=4, temperature=0))
    assert "\n" not in str(e.value)


def test_broken_tokenizer_files_and_a_template_that_does_not_compile_are_refused(tmp_path):
    folder = tiny_hf_folder(tmp_path / "m", chat_template="{% for m in messages %}{{ m.content }")
    refused(str(folder), "cannot load the tokenizer \\(the chat template does not compile: unexpected '}'")
    (folder / "tokenizer_config.json").write_text("[]")
    refused(str(folder), "tokenizer_config.json: expected a JSON object, got list")
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": 5}')
    refused(str(folder), "cannot load the tokenizer")


@pytest.mark.parametrize("template, message", [
    (None, "this model has no chat template"),
    ("{{ raise_exception('only user turns, please') }}", "the chat template failed: TemplateError: only user turns"),
    ("{{ 1 / 0 }}", "the chat template failed: ZeroDivisionError"),
    ("{{ messages[3].content }}", "the chat template failed: UndefinedError"),
    ("{{ messages + 1 }}", "the chat template failed: TypeError"),
])
def test_a_missing_or_failing_chat_template_is_a_prompt_error(tmp_path, capsys, template, message):
    from engine import PromptError
    from jobs.cli import main
    folder = tiny_hf_folder(tmp_path / "m", chat_template=template)
    eng = LLM(str(folder), backend="torch", kv_cache_tokens=64)
    with pytest.raises(PromptError, match=message):
        eng.encode_prompt([{"role": "user", "content": "hi"}])
    assert eng.encode_prompt("b c") == [5, 6]   # plain prompts still work
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "q", "messages": [{"role": "user", "content": "hi"}]}\n')
    out = tmp_path / "out.parquet"
    assert main(["generate", "--model", str(folder), "--input", str(inp), "--output", str(out),
                 "--backend", "torch", "--max-tokens", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"row id 'q': " in err and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "m"]


SMALL_GGUF_FIELDS = {"tokenizer.ggml.pre": "default", "tokenizer.ggml.tokens": VOCAB,
                     "tokenizer.ggml.token_type": [1] * len(VOCAB), "tokenizer.ggml.merges": ["a b"],
                     "tokenizer.chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}


def test_gguf_metadata_or_tensors_that_disagree_are_refused_from_the_header(tmp_path):
    weights = tiny_hf_weights(len(VOCAB))
    ok = tmp_path / "ok.gguf"
    write_tiny_gguf(ok, SMALL_GGUF_FIELDS, weights, "F32")
    assert resolve(str(ok)).config.num_heads == TINY["heads"]
    zero_heads = tmp_path / "zero-heads.gguf"
    write_tiny_gguf(zero_heads, SMALL_GGUF_FIELDS, weights, "F32", head_count=0)
    refused(str(zero_heads), "bad GGUF metadata \\(num_heads must be an integer >= 1, got 0\\)")
    missing = tmp_path / "missing.gguf"
    write_tiny_gguf(missing, SMALL_GGUF_FIELDS, {k: v for k, v in weights.items() if "layers.1.mlp.up" not in k}, "F32")
    refused(str(missing), "tensor model.layers.1.mlp.up_proj.weight is missing")
    reshaped = tmp_path / "reshaped.gguf"
    write_tiny_gguf(reshaped, SMALL_GGUF_FIELDS, weights | {"model.norm.weight": weights["model.norm.weight"][:32]}, "F32")
    refused(str(reshaped), "tensor model.norm.weight has shape \\[32\\]; the model's config implies \\[64\\]")


def retype(path, tensor: str, type_id: int) -> bytes:
    """The GGUF at `path` with one header field changed: `tensor`'s type."""
    info = next(t for t in GGUFFile(path).tensors if t.name == tensor)
    data = bytearray(path.read_bytes())
    at = data.index(tensor.encode()) + len(tensor) + 4 + 8 * len(info.shape)   # past name, n_dims, dims
    data[at:at + 4] = type_id.to_bytes(4, "little")
    return bytes(data)


def test_a_damaged_gguf_tensor_type_is_refused_from_the_header(tmp_path):
    weights = tiny_hf_weights(len(VOCAB))
    f16 = tmp_path / "f16.gguf"
    write_tiny_gguf(f16, SMALL_GGUF_FIELDS, weights, "F16")
    grown = tmp_path / "grown.gguf"   # F16 -> F32: twice the bytes, into the next tensor's
    grown.write_bytes(retype(f16, "token_embd.weight", 0))
    refused(str(grown), "tensors token_embd.weight and .* overlap")
    odd = tmp_path / "odd.gguf"       # 48 elements are no whole number of Q8_0's 32-element blocks
    write_tiny_gguf(odd, SMALL_GGUF_FIELDS, weights | {"model.norm.weight": weights["model.norm.weight"][:48]}, "F32")
    (tmp_path / "odd-q8.gguf").write_bytes(retype(odd, "output_norm.weight", 8))
    refused(str(tmp_path / "odd-q8.gguf"), "tensor output_norm.weight of shape \\[48\\] is not a whole number of Q8_0 blocks")
