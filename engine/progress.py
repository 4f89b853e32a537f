"""A one-line progress display for a generation stream, drawn on a terminal.

Progress is counted in requests, an unfinished one by the share of its token budget
(max_tokens) it has produced. Continuous batching finishes most requests near the
end of a batch, so counting finished requests alone gives an ETA that is far off
for most of the run (tqdm's said 5:51 for an 11 s job).
"""
from __future__ import annotations

import os
import sys
import time
from typing import Iterable, TextIO

from engine.sequence import Sequence

MIN_BAR_WIDTH = 10


def format_duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def request_share(seq: Sequence) -> float:
    """How much of one request is done: 1 when finished, else its output tokens over its budget."""
    if seq.is_finished:
        return 1.0
    return min(seq.num_output_tokens / max(seq.sampling.max_tokens, 1), 1.0)


class ProgressLine:
    """Redraws one status line in place (at most every `min_interval_s`), fitted to the
    terminal's current width: the fields that matter most stay on a narrow one."""

    def __init__(self, total: int | None, stream: TextIO = sys.stderr, min_interval_s: float = 0.2):
        self.total = total
        self.stream = stream
        self.min_interval_s = min_interval_s
        self.start = time.perf_counter()
        self.last_draw = float("-inf")
        self.drawn_width = 0

    def update(self, finished: int, finished_tokens: int, in_flight: Iterable[Sequence],
               force: bool = False) -> None:
        """`finished` requests (with `finished_tokens` output tokens) are yielded; `in_flight`
        are the others held by the stream, which may include finished ones not yet yielded."""
        now = time.perf_counter()
        if not force and now - self.last_draw < self.min_interval_s:
            return
        self.last_draw = now
        in_flight = list(in_flight)
        done = finished + sum(request_share(s) for s in in_flight)
        tokens = finished_tokens + sum(s.num_output_tokens for s in in_flight)
        completed = finished + sum(s.is_finished for s in in_flight)
        width = self.width()
        self.draw(self.render(done, completed, tokens, now - self.start, width), width)

    def render(self, done: float, completed: int, tokens: int, elapsed: float, width: int) -> str:
        """The line, at most `width - 1` characters (the last column would wrap on some terminals)."""
        limit = max(width - 1, 1)
        fraction = done / self.total if self.total else None
        if fraction:
            eta = f"ETA {format_duration(elapsed * (1 - fraction) / fraction)}"
        else:
            eta = "ETA --"
        head = f"{100 * fraction:3.0f}%" if fraction is not None else ""
        rate = tokens / elapsed if elapsed > 0 else 0.0
        # In order of importance: each is kept only if it still fits.
        optional = [f"{completed}/{self.total} req" if self.total else f"{completed} req",
                    f"{rate:,.0f} tok/s", f"{format_duration(elapsed)} elapsed"]
        fields = [f for f in (head, eta) if f]
        for extra in optional:
            candidate = fields[:-1] + [extra, fields[-1]]
            if len("  ".join(candidate)) <= limit:
                fields = candidate
        line = "  ".join(fields)
        room = limit - len(line) - 2 - 2       # the bar's brackets and its separator
        if fraction is not None and room >= MIN_BAR_WIDTH:
            filled = int(room * min(fraction, 1.0))
            bar = "[" + "#" * filled + "." * (room - filled) + "]"
            line = f"{fields[0]} {bar} " + "  ".join(fields[1:])
        return line[:limit]

    def width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 80

    def draw(self, line: str, width: int) -> None:
        # Blank what a longer earlier line left (but never past the edge: that would wrap).
        self.stream.write("\r" + line.ljust(min(self.drawn_width, max(width - 1, 1))))
        self.stream.flush()
        self.drawn_width = len(line)

    def close(self, finished: int, finished_tokens: int) -> None:
        self.update(finished, finished_tokens, (), force=True)
        self.stream.write("\n")
        self.stream.flush()
