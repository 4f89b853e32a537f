"""Stop strings found on text grown token by token: the same text, and the same stop
position, as decoding the whole output each time (which is what it replaced)."""
from __future__ import annotations

import random

import pytest

from engine.detokenizer import StopStringDetector
from engine.model_source import resolve
from tests.conftest import MODEL


@pytest.fixture(scope="module")
def tokenizer():
    return resolve(MODEL).tokenizer


def test_the_grown_text_is_the_whole_decode_at_every_character_boundary(tokenizer):
    # Emoji and accents: their bytes are split over byte-level BPE tokens.
    ids = tokenizer.encode("Héllo wörld! 🎉🎉 naïve café — ok, 東京 and more text " * 3)
    rng = random.Random(0)
    ids += [rng.randrange(tokenizer.vocab_size) for _ in range(200)]   # any tokens, special ones too
    detector = StopStringDetector(tokenizer, ["\x00never"])
    for n, token in enumerate(ids, 1):
        assert detector.append(token) is None
        whole = tokenizer.decode(ids[:n])
        assert whole.startswith(detector.text)
        if not whole.endswith("\ufffd"):
            assert detector.text == whole


@pytest.mark.parametrize("stop", [["wörld"], ["café", "Hé"], ["d! 🎉"], ["text Héllo"]])
def test_a_stop_string_is_found_where_the_whole_decode_finds_it_and_no_later(tokenizer, stop):
    ids = tokenizer.encode("Héllo wörld! 🎉🎉 naïve café — ok, more text Héllo again")
    detector = StopStringDetector(tokenizer, stop)
    for n, token in enumerate(ids, 1):
        whole = tokenizer.decode(ids[:n])
        expected = min((i for i in (whole.find(s) for s in stop) if i >= 0), default=None)
        found = detector.append(token)
        if expected is not None:   # reported on the very token that completes the first one
            assert found == expected
            break
        assert found is None
    else:
        pytest.fail(f"{stop} never found")
