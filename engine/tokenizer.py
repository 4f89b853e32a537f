"""Tokenizer and chat template, taken from the model file itself."""
from __future__ import annotations

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import AddedToken, decoders, models, pre_tokenizers

# Pre-tokenizer regexes by GGUF `tokenizer.ggml.pre`, as llama.cpp names them.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _byte_level_pre_tokenizer(pre: str):
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(_LLAMA3_SPLIT, behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if pre in ("gpt2", "default", ""):
        return byte_level
    raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}")


class Tokenizer:
    """Encode/decode plus the model's chat template and special token ids."""

    def __init__(self, backend: HFTokenizer, eos_token_ids: list[int], bos_token_id: int | None,
                 add_bos: bool, chat_template: str | None):
        self.backend = backend
        self.eos_token_ids = eos_token_ids
        self.bos_token_id = bos_token_id
        self.add_bos = add_bos
        self.chat_template = chat_template
        self._template = None
        if chat_template:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
            env.globals["raise_exception"] = _raise_template_error
            try:
                self._template = env.from_string(chat_template)
            except jinja2.TemplateSyntaxError as e:
                raise ValueError(f"the chat template does not compile: {e} (template line {e.lineno})") from None

    @classmethod
    def from_gguf_fields(cls, fields: dict) -> "Tokenizer":
        kind = fields.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ValueError(f"unsupported GGUF tokenizer model {kind!r} (only byte-level BPE, 'gpt2', is supported)")
        tokens: list[str] = fields["tokenizer.ggml.tokens"]
        merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
        vocab = {tok: i for i, tok in enumerate(tokens)}
        backend = HFTokenizer(models.BPE(vocab, merges, fuse_unk=False, byte_fallback=False))
        backend.pre_tokenizer = _byte_level_pre_tokenizer(fields.get("tokenizer.ggml.pre", "default"))
        backend.decoder = decoders.ByteLevel()
        types = fields.get("tokenizer.ggml.token_type", [1] * len(tokens))
        # Type 3 = control, 4 = user-defined: matched whole, never split by BPE.
        backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                    for i, t in enumerate(types) if t == 3])
        backend.add_tokens([AddedToken(tokens[i], normalized=False) for i, t in enumerate(types) if t == 4])
        eos = fields.get("tokenizer.ggml.eos_token_id")
        eot = fields.get("tokenizer.ggml.eot_token_id")
        eos_ids = sorted({int(t) for t in (eos, eot) if t is not None})
        bos = fields.get("tokenizer.ggml.bos_token_id")
        return cls(backend, eos_ids, bos, bool(fields.get("tokenizer.ggml.add_bos_token", False)),
                   fields.get("tokenizer.chat_template"))

    @classmethod
    def from_hf_folder(cls, tokenizer_json: str, tokenizer_config: dict, generation_config: dict,
                       model_config: dict) -> "Tokenizer":
        backend = HFTokenizer.from_file(tokenizer_json)

        def token_id(value) -> int | None:
            if isinstance(value, dict):
                value = value.get("content")
            return backend.token_to_id(value) if isinstance(value, str) else None

        eos = generation_config.get("eos_token_id", model_config.get("eos_token_id"))
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        tid = token_id(tokenizer_config.get("eos_token"))
        if tid is not None:
            eos_ids.add(tid)
        return cls(backend, sorted(eos_ids), token_id(tokenizer_config.get("bos_token")),
                   bool(tokenizer_config.get("add_bos_token", False)),
                   tokenizer_config.get("chat_template"))

    @property
    def vocab_size(self) -> int:
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if self.add_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if self._template is None:
            raise ValueError("this model has no chat template; pass plain prompts instead of messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise ValueError(f"chat message {i} must be a mapping with 'role' and 'content'")
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self._token_text(self.bos_token_id),
                eos_token=self._token_text(self.eos_token_ids[0] if self.eos_token_ids else None))
        except Exception as e:  # the template is the model file's code: whatever it raises, it refused these messages
            raise ValueError(f"the chat template failed: {type(e).__name__}: {e}") from None

    def encode_chat(self, messages: list[dict]) -> list[int]:
        # The rendered template already carries any BOS it wants.
        return self.backend.encode(self.apply_chat_template(messages), add_special_tokens=False).ids

    def _token_text(self, token_id: int | None) -> str:
        return "" if token_id is None else (self.backend.id_to_token(token_id) or "")


def _raise_template_error(message: str):
    raise jinja2.TemplateError(message)
