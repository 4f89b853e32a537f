"""Our engine (torch backend) against HF transformers on the real model."""
from __future__ import annotations

import torch

from engine import SamplingParams
from tests.conftest import chat_messages

NEW_TOKENS = 48


def test_tokenizer_and_chat_template_match_hf(llm, hf):
    _, tok = hf
    texts = ["Hello 12345 world!!  \n\n x", "naïve café — ünïcödé", "<|im_start|>user\nhi<|im_end|>",
             "def f(x):\n\treturn x**2  # square", "   leading spaces", "emoji 🙂 and 漢字"]
    for text in texts:
        assert llm.tokenizer.encode(text) == tok.encode(text, add_special_tokens=False), text
        ids = llm.tokenizer.encode(text)
        assert llm.tokenizer.decode(ids) == tok.decode(ids, skip_special_tokens=True)
    for messages in chat_messages(8):
        ours = llm.tokenizer.encode_chat(messages)
        theirs = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        theirs = theirs["input_ids"] if isinstance(theirs, dict) or hasattr(theirs, "keys") else theirs
        assert ours == list(theirs)


def test_greedy_chat_matches_hf_token_for_token(llm, hf):
    model, tok = hf
    prompts = chat_messages(8)
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0))
    for messages, out in zip(prompts, outs):
        ids = torch.tensor([llm.tokenizer.encode_chat(messages)])
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=llm.tokenizer.eos_token_ids, pad_token_id=2)
        expected = ref[0, ids.shape[1]:].tolist()
        assert out.token_ids == expected, (messages[0]["content"], out.text)
        assert out.finish_reason == ("stop" if expected[-1] in llm.tokenizer.eos_token_ids else "length")


def test_first_token_logits_match_hf(llm, hf):
    model, _ = hf
    ids = llm.tokenizer.encode_chat(chat_messages(1)[0])
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0, -1]
    ours = llm.next_token_logits(ids)
    assert (ours - ref).norm() / ref.norm() < 1e-4
