"""Output text grown one token at a time, for stop strings: each token decodes a window of
a few tokens, not the whole output, which made a request's stop checks quadratic in its length.

The window is vLLM's: the text of tokens [prefix, read) is already emitted; decoding
[prefix, end) and dropping that text yields the new token's text, held back while it ends
in U+FFFD (a character whose bytes the next token completes).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence as Seq

from engine.tokenizer import Tokenizer

if TYPE_CHECKING:
    from engine.sequence import Sequence

REPLACEMENT = "\ufffd"


class StopStringDetector:
    def __init__(self, tokenizer: Tokenizer, stop: Seq[str]):
        self.tokenizer, self.stop = tokenizer, list(stop)
        # A stop string may end in the new text yet start this much before it.
        self.overlap = max(len(s) for s in self.stop) - 1
        self.ids: list[int] = []
        self.text = ""
        self.prefix = self.read = 0

    def append(self, token_id: int) -> int | None:
        """Takes the next output token; where in the output text the first stop string starts,
        once one has appeared (None until then)."""
        self.ids.append(token_id)
        emitted = self.tokenizer.decode(self.ids[self.prefix:self.read])
        window = self.tokenizer.decode(self.ids[self.prefix:])
        if len(window) <= len(emitted) or window.endswith(REPLACEMENT):
            return None
        start = max(len(self.text) - self.overlap, 0)
        self.text += window[len(emitted):]
        self.prefix, self.read = self.read, len(self.ids)
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        return min(hits) if hits else None


class StopChecker:
    """Whether a request's newest token stops it: a stop token id, an end-of-sequence
    token (unless ignore_eos), or the end of a stop string (without a tokenizer, token
    ids alone)."""

    def __init__(self, tokenizer: Tokenizer | None):
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(tokenizer.eos_token_ids) if tokenizer else frozenset()
        self._detectors: dict[int, StopStringDetector] = {}    # by request id, while it runs

    def add(self, seq: Sequence) -> None:
        if seq.sampling.stop and self.tokenizer:
            self._detectors[seq.request_id] = StopStringDetector(self.tokenizer, seq.sampling.stop)

    def drop(self, request_id: int) -> None:
        self._detectors.pop(request_id, None)

    def sees_every_token(self, seq: Sequence) -> bool:
        """Whether any token may stop it (stop token ids or stop strings), not only end of
        sequence: then `stops` must see each of its tokens."""
        return bool(seq.sampling.stop_token_ids) or seq.request_id in self._detectors

    def stops(self, seq: Sequence, token_id: int) -> bool:
        p = seq.sampling
        if token_id in p.stop_token_ids or (not p.ignore_eos and token_id in self.eos_token_ids):
            return True
        detector = self._detectors.get(seq.request_id)
        return detector is not None and detector.append(token_id) is not None
