"""A small GGUF reader: metadata, tensor index, and dequantization to float32 (or, for
quantized matrices, their blocks as they are: `load_blocks`).

Supports the tensor types F32, F16, BF16, Q8_0, Q4_0 and Q4_1 (32-element
blocks, as ggml lays them out). Reads the file through one memory map.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from engine.quantized import GROUP, BlockWeight

GGUF_MAGIC = b"GGUF"
# ggml type id -> (name, elements per block, bytes per block)
TENSOR_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
                8: ("Q8_0", 32, 34), 30: ("BF16", 1, 2)}
INT4_TYPES = ("Q4_0", "Q4_1")
BLOCK_TYPES = (*INT4_TYPES, "Q8_0")      # what load_blocks keeps as blocks
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class GGUFError(ValueError):
    pass


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]      # row-major (outermost first), as torch sees it
    type_id: int
    offset: int                 # absolute byte offset in the file

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES.get(self.type_id, (f"type {self.type_id}",))[0]


class GGUFFile:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            try:
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:  # empty file
                raise GGUFError(f"{path}: not a GGUF file ({e})") from None
        self._pos = 0
        try:
            self._parse()
        except GGUFError:
            raise
        # Reads past the end, undecodable strings, counts larger than the file (numpy's
        # ValueError), arrays nested without end: whatever a damaged header makes of the parse.
        except (struct.error, ValueError, IndexError, RecursionError) as e:
            raise GGUFError(f"{path}: truncated or corrupt GGUF header ({e})") from None

    # -------------------------------------------------------------- parsing

    def _read(self, fmt: str):
        value = struct.unpack_from(fmt, self._buf, self._pos)[0]
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._read("<Q")
        s = self._buf[self._pos:self._pos + n].decode("utf-8")
        self._pos += n
        return s

    def _value(self, type_id: int):
        if type_id == _STRING:
            return self._string()
        if type_id == _ARRAY:
            elem, count = self._read("<I"), self._read("<Q")
            if elem in _SCALARS:   # one vectorized read instead of a Python loop
                dtype = np.dtype(_SCALARS[elem])
                arr = np.frombuffer(self._buf, dtype, count, self._pos)
                self._pos += count * dtype.itemsize
                return arr.tolist()
            return [self._value(elem) for _ in range(count)]
        if type_id not in _SCALARS:
            raise GGUFError(f"{self.path}: unknown metadata value type {type_id}")
        return self._read(_SCALARS[type_id])

    def _parse(self) -> None:
        if self._buf[:4] != GGUF_MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (bad magic)")
        self._pos = 4
        version = self._read("<I")
        if version not in (2, 3):
            raise GGUFError(f"{self.path}: GGUF version {version} is not supported")
        n_tensors, n_kv = self._read("<Q"), self._read("<Q")
        self.fields: dict = {}
        for _ in range(n_kv):
            key = self._string()
            self.fields[key] = self._value(self._read("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._read("<Q") for _ in range(self._read("<I"))]
            infos.append((name, tuple(reversed(dims)), self._read("<I"), self._read("<Q")))
        align = self.fields.get("general.alignment", 32)
        if not isinstance(align, int) or align < 1:
            raise GGUFError(f"{self.path}: bad general.alignment {align!r}")
        data_start = -(-self._pos // align) * align
        self.tensors = [TensorInfo(n, s, t, data_start + o) for n, s, t, o in infos]
        for t in self.tensors:
            if t.type_id in TENSOR_TYPES and int(np.prod(t.shape)) % TENSOR_TYPES[t.type_id][1]:
                raise GGUFError(f"{self.path}: tensor {t.name} of shape {list(t.shape)} is not a whole "
                                f"number of {t.type_name} blocks")
            if t.offset + self.nbytes(t) > len(self._buf):
                raise GGUFError(f"{self.path}: tensor {t.name} runs past the end of the file (truncated?)")
        # A damaged type or shape can make a tensor claim its neighbour's bytes.
        spans = sorted((t.offset, t.offset + self.nbytes(t), t.name) for t in self.tensors)
        for (_, end, name), (start, _, following) in zip(spans, spans[1:]):
            if end > start:
                raise GGUFError(f"{self.path}: tensors {name} and {following} overlap (corrupt header)")

    # -------------------------------------------------------------- tensors

    @staticmethod
    def nbytes(t: TensorInfo) -> int:
        if t.type_id not in TENSOR_TYPES:
            return 0
        _, block, size = TENSOR_TYPES[t.type_id]
        return int(np.prod(t.shape)) // block * size

    def load(self, t: TensorInfo) -> torch.Tensor:
        """The tensor dequantized to float32, shaped `t.shape`."""
        if t.type_id not in TENSOR_TYPES:
            raise GGUFError(f"{self.path}: tensor {t.name} has unsupported type {t.type_name}")
        raw = np.frombuffer(self._buf, np.uint8, self.nbytes(t), t.offset)
        kind = TENSOR_TYPES[t.type_id][0]
        if kind == "F32":
            out = torch.from_numpy(raw.view(np.float32).copy())
        elif kind == "F16":
            out = torch.from_numpy(raw.view(np.float16).astype(np.float32))
        elif kind == "BF16":
            bits = raw.view(np.uint16).astype(np.uint32) << 16
            out = torch.from_numpy(bits.view(np.float32))
        else:
            out = _dequantize_blocks(kind, raw)
        return out.reshape(t.shape)

    def load_blocks(self, t: TensorInfo) -> BlockWeight:
        """A Q4_0 / Q4_1 / Q8_0 matrix as its blocks, undequantized (engine.quantized)."""
        kind = TENSOR_TYPES.get(t.type_id, ("",))[0]
        if kind not in BLOCK_TYPES or len(t.shape) != 2:
            raise GGUFError(f"{self.path}: tensor {t.name} is {t.type_name} {t.shape}, not a block-quantized matrix")
        raw = np.frombuffer(self._buf, np.uint8, self.nbytes(t), t.offset)
        q, d, m = _q8_blocks(raw) if kind == "Q8_0" else _int4_blocks(kind, raw)
        n, k = t.shape
        return BlockWeight(q.reshape(n, k), d.reshape(n, k // GROUP), m.reshape(n, k // GROUP),
                           bits=8 if kind == "Q8_0" else 4)


def _dequantize_blocks(kind: str, raw: np.ndarray) -> torch.Tensor:
    q, d, m = _q8_blocks(raw) if kind == "Q8_0" else _int4_blocks(kind, raw)
    return (q.float() * d + m).reshape(-1)


def _q8_blocks(raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q8_0 blocks as (q [n, 32] int32 in -128..127, d [n, 1], m [n, 1] = 0): w = q d + m."""
    blocks = raw.reshape(-1, TENSOR_TYPES[8][2])
    d = torch.from_numpy(blocks[:, :2].copy().view(np.float16).astype(np.float32))
    q = torch.from_numpy(blocks[:, 2:].copy().view(np.int8)).to(torch.int32)
    return q, d, torch.zeros_like(d)


def _int4_blocks(kind: str, raw: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q4_0 / Q4_1 blocks as (q [n, 32] int32 in 0..15, d [n, 1], m [n, 1] float32): w = q d + m."""
    blocks = raw.reshape(-1, TENSOR_TYPES[{"Q4_0": 2, "Q4_1": 3}[kind]][2])
    d = torch.from_numpy(blocks[:, :2].copy().view(np.float16).astype(np.float32))
    packed = torch.from_numpy(blocks[:, -16:].copy())
    # Element j < 16 is the low nibble of byte j, element 16 + j its high nibble.
    q = torch.cat((packed & 0x0F, packed >> 4), dim=1).to(torch.int32)
    if kind == "Q4_0":
        return q, d, -8 * d
    return q, d, torch.from_numpy(blocks[:, 2:4].copy().view(np.float16).astype(np.float32))
