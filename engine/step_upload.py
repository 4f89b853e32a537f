"""A step's host arrays to the device in one copy.

The arrays are packed at 16-byte aligned offsets of one pinned host buffer (pinned: the
copy is asynchronous), copied in one transfer, and viewed back as typed tensors on the
device. `StaticInputs`, every step's, keeps one device buffer at fixed offsets, each
array's slot sized for the largest step: CUDA graphs are captured on views of it, so a
replayed step's inputs arrive with its one upload and are not copied again on the device
(a copy per input was most of a decode step's copies), and the runner builds a step's
arrays in its host slots, so they are not copied on the host either. `upload` lays out a
fresh buffer, for arrays no static slot fits (a whole prompt's prefill outside the batch).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping

import numpy as np
import torch

from engine.ops.driver import copy_async
from engine.sync import HostSyncCounter

_ALIGN = 16
_TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
                 np.dtype(np.float32): torch.float32}


class Layout:
    """Where each named array lies in one byte buffer: a slot of a dtype and a (largest) shape."""

    def __init__(self, slots: dict[str, tuple[np.dtype, tuple[int, ...]]]):
        self.dtypes = {name: np.dtype(dtype) for name, (dtype, _) in slots.items()}
        self.shapes = {name: tuple(shape) for name, (_, shape) in slots.items()}
        self.offsets, total = {}, 0
        for name in slots:
            self.offsets[name] = total
            total += -(-self.slot_nbytes(name) // _ALIGN) * _ALIGN
        self.nbytes = max(total, _ALIGN)

    def slot_nbytes(self, name: str) -> int:
        return math.prod(self.shapes[name]) * self.dtypes[name].itemsize

    def row_nbytes(self, name: str) -> int:
        return math.prod(self.shapes[name][1:]) * self.dtypes[name].itemsize

    def end_of(self, arrays: dict[str, np.ndarray]) -> int:
        """Bytes from the buffer's start through the last row any of `arrays` fills."""
        return max((self._row_ends[name][0] + len(a) * self._row_ends[name][1] for name, a in arrays.items()),
                   default=0)

    @functools.cached_property
    def _row_ends(self) -> dict[str, tuple[int, int]]:
        """Each slot's offset and row size in bytes (end_of runs every step)."""
        return {name: (self.offsets[name], self.row_nbytes(name)) for name in self.offsets}

    def host_views(self, buffer: torch.Tensor) -> dict[str, np.ndarray]:
        """`views` of a host buffer as numpy arrays (the same memory), for `fill`."""
        return {name: view.numpy() for name, view in self.views(buffer).items()}

    def fill(self, slots: dict[str, np.ndarray], arrays: dict[str, np.ndarray]) -> None:
        """Each array into the leading corner of its slot (`host_views`): a [B, w] block table
        in a [rows, width] slot keeps the slot's row stride."""
        for name, a in arrays.items():
            slot = slots[name]
            if a.dtype != slot.dtype or a.ndim != slot.ndim or any(map(int.__gt__, a.shape, slot.shape)):
                raise ValueError(f"step input {name} {a.dtype}{list(a.shape)} does not fit its slot "
                                 f"{slot.dtype}{list(slot.shape)}")
            if a.ndim == 1:
                slot[:len(a)] = a
            else:
                slot[tuple(slice(0, n) for n in a.shape)] = a

    def views(self, buffer: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each slot as a typed tensor of its full shape over `buffer` (uint8, on any device).
        One typed view of the buffer per dtype, each slot a slice of it: every torch op costs
        microseconds of host time, and a step has a dozen arrays."""
        typed = {dtype: buffer.view(_TORCH_DTYPES[dtype]) for dtype in set(self.dtypes.values())}
        views = {}
        for name, dtype in self.dtypes.items():
            start, size = self.offsets[name] // dtype.itemsize, math.prod(self.shapes[name])
            view = typed[dtype][start:start + size]
            views[name] = view.view(self.shapes[name]) if len(self.shapes[name]) > 1 else view
        return views


def upload(arrays: dict[str, np.ndarray | None], device: torch.device) -> dict[str, torch.Tensor]:
    """The arrays on the device, in one copy of a buffer laid out for them alone (those a
    step does not have, None, left out)."""
    arrays = {name: a for name, a in arrays.items() if a is not None}
    layout = Layout({name: (a.dtype, a.shape) for name, a in arrays.items()})
    staging = torch.empty(layout.nbytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
    layout.fill(layout.host_views(staging), arrays)
    return layout.views(staging.to(device, non_blocking=True))


class StaticInputs:
    """One device buffer holding a step's inputs at fixed places, for any step up to the
    largest: `views` are its slots at full size, what CUDA graphs are captured on."""

    def __init__(self, slots: dict[str, tuple[np.dtype, tuple[int, ...]]], device: torch.device,
                 syncs: HostSyncCounter):
        self.layout = Layout(slots)
        self.device = device
        self.buffer = torch.zeros(self.layout.nbytes, dtype=torch.uint8, device=device)
        self.views = self.layout.views(self.buffer)
        # Two pinned host buffers of the same layout, used in turn, with their slots' views
        # made once (a fresh pinned buffer and its views each step cost ~100 µs of host time
        # on a slow host). A step fills one while the copy of the step before may still be
        # queued from the other; `_copied` says when a buffer's last copy has run.
        cuda = device.type == "cuda"
        self._staging = [torch.empty(self.layout.nbytes, dtype=torch.uint8, pin_memory=cuda) for _ in range(2)]
        self._host_views = [self.layout.host_views(s) for s in self._staging]
        self._copied = [torch.cuda.Event() for _ in range(2)] if cuda else None
        self._stream = torch.cuda.current_stream(device) if cuda else None    # recorded on (see ModelRunner)
        self._syncs = syncs      # the engine's, where it waits (engine.sync)
        self._turn = 0

    def host_slots(self) -> dict[str, np.ndarray]:
        """The host slots the next `upload` copies from, at full size, to build a step's arrays
        in (each in its slot's leading corner; a 2-D array keeps the slot's row stride): then
        `upload(..., in_place=True)` has nothing to fill, where filling a buffer the cache has
        not held since two steps ago cost ~40 µs of a 4,000-token step on the development host.
        Waits for the copy from this buffer of two steps ago where it has not run, which it
        almost always has (the step between read that step's tokens, sampled after it): asked
        first, so no wait is made for nothing, and counted where one is made, as a lagged one
        (the step that reads the copy is queued behind it). Waiting on it every step uncounted
        made CUPTI's cudaEventSynchronize calls twice the engine's count (session 42)."""
        copied = self._copied[self._turn] if self._copied else None
        if copied is not None and not copied.query():
            self._syncs.wait(copied, work_queued_behind=True)
        return self._host_views[self._turn]

    def upload(self, arrays: dict[str, np.ndarray | None], in_place: bool = False) -> Mapping[str, torch.Tensor]:
        """Copy the arrays into the leading corners of their slots (`in_place`: they were built
        there, in `host_slots()`), once, through the last row any of them fills; their views,
        each cut to the array's rows (a 2-D slot keeps its full width: a graph captured on it
        reads that row stride). A step without one of the arrays (None) has no view of its slot,
        whose device copy then holds whatever its host slot held."""
        arrays = {name: arrays[name] for name in self.layout.shapes if arrays[name] is not None}
        nbytes = self.layout.end_of(arrays)
        if not in_place:
            self.layout.fill(self.host_slots(), arrays)
        turn, self._turn = self._turn, 1 - self._turn
        if self._copied:
            copy_async(self.buffer.data_ptr(), self._staging[turn].data_ptr(), nbytes, self.buffer.device.index)
            self._copied[turn].record(self._stream)
        else:
            self.buffer[:nbytes].copy_(self._staging[turn][:nbytes])
        return CutViews(self.views, {name: len(a) for name, a in arrays.items()})


class CutViews(Mapping):
    """Slots' views, each cut to its array's rows when it is asked for: a graph-replayed
    decode step reads two of its thirteen, and every torch slice costs host time."""

    def __init__(self, views: dict[str, torch.Tensor], rows: dict[str, int]):
        self._views, self._rows = views, rows

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._views[name][:self._rows[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)
