"""The `cuda` ops backend: kernels from cuda_src/, launched on torch's current stream.

torch owns the memory and the CUDA context; PyCUDA retains torch's primary
context (so both libraries see one context) and reports the device's arch;
cuda_build compiles, caches, loads and launches. Set ROADGATE_CUDA_DEBUG=1 to
synchronize and check for errors after every launch.
"""
from __future__ import annotations

import atexit
import math
import os

import torch

from engine.ops import cuda_build
from engine.ops.base import AttentionMetadata, SamplingTensors

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_PREFILL_TILE = 64
_DECODE_THREADS = 128
_DECODE_GROUPS = (3, 4, 8)   # query heads per KV head the decode kernel is built for
_MAX_PARTITION = 1024   # both as in attention_decode.cu
_MIN_BLOCK_SIZE = 8


def _dtype_name(t: torch.Tensor) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"cuda ops support bf16, fp16 and float32 tensors, not {t.dtype}")
    return _DTYPES[t.dtype]


class CudaOps:
    name = "cuda"

    def __init__(self):
        if not torch.cuda.is_available():
            raise RuntimeError("CudaOps needs a CUDA GPU visible to torch")
        torch.zeros(1, device="cuda")  # torch first: it creates the primary context and makes it current
        import pycuda.driver as drv
        drv.init()
        device = drv.Device(torch.cuda.current_device())
        self._context = device.retain_primary_context()
        self._context.push()
        atexit.register(self._context.pop)
        major, minor = device.compute_capability()
        self.num_sms = device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        # Decode split policy (see decode_partition); benchmarks/kernels.py sweeps them.
        self.decode_waves = float(os.environ.get("ROADGATE_DECODE_WAVES", 2))
        self.decode_fill_context = int(os.environ.get("ROADGATE_DECODE_FILL_CONTEXT", 1 << 30))
        try:
            cubins = cuda_build.build_all(f"sm_{major}{minor}")
        except RuntimeError as e:
            raise RuntimeError(f"CudaOps: compiling cuda_src failed: {e}") from e
        driver = cuda_build.Driver(debug=os.environ.get("ROADGATE_CUDA_DEBUG", "") not in ("", "0"))
        mods = {stem: driver.load(path) for stem, path in cubins.items()}
        k = {}
        k["embed"] = mods["embedding"].kernel("embed_rows", "PPPi")
        k["decode_inputs"] = mods["decode_inputs"].kernel("build_decode_inputs", "PPPiiPPPi")
        for dt in _DTYPES.values():
            k["rms_norm", dt] = mods["rms_norm"].kernel(f"rms_norm_{dt}", "PPPPPif")
            k["silu", dt] = mods["silu_mul"].kernel(f"silu_and_mul_{dt}", "PPil")
            k["rope", dt] = mods["rope_cache"].kernel(f"rope_and_cache_{dt}", "PPPPPPPPiiilll")
            k["sample", dt] = mods["sample"].kernel(f"sample_{dt}", "PiPPPPPPi")
            k["reduce", dt] = mods["attention_decode"].kernel(f"attn_decode_reduce_{dt}", "PPPPPiiii")
            for d in (64, 128):
                k["prefill", dt, d] = mods["attention_prefill"].kernel(f"attn_prefill_{dt}_d{d}", "PlPPPiPPPiiif")
                for g in _DECODE_GROUPS:
                    k["decode", dt, d, g] = mods["attention_decode"].kernel(
                        f"attn_decode_{dt}_d{d}_g{g}", "PlPPPiPPPPPiiiiif")
        self._k = k

    def embed(self, token_ids, weight):
        out = torch.empty((token_ids.shape[0], weight.shape[1]), dtype=weight.dtype, device=weight.device)
        if out.numel():
            self._k["embed"](token_ids.shape[0], 128, token_ids.long().contiguous(), weight.contiguous(), out,
                             weight.shape[1] * weight.element_size())
        return out

    def rms_norm(self, x, weight, eps, residual):
        x = x.contiguous()
        out = torch.empty_like(x)
        r = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        H = x.shape[-1]
        rows = x.numel() // H
        if residual is not None and residual.dtype != torch.float32:
            raise TypeError("the residual stream is float32")
        if rows:
            self._k["rms_norm", _dtype_name(x)](rows, 256, x, None if residual is None else residual.contiguous(),
                                                weight, out, r, H, float(eps))
        return out, r

    def rope_and_cache(self, q, k, v, positions, cos_sin, k_cache, v_cache, slot_mapping):
        T, nh, d = q.shape
        nkv = k.shape[1]
        for t in (q, k, v):
            if t.stride(2) != 1 or t.stride(1) != d:
                raise ValueError("rope_and_cache needs each token's heads as contiguous d-vectors")
        if T:
            self._k["rope", _dtype_name(q)](T, 128, q, k, v, positions.long().contiguous(), cos_sin.float().contiguous(),
                                            k_cache, v_cache, slot_mapping.long().contiguous(), nh, nkv, d,
                                            q.stride(0), k.stride(0), v.stride(0))

    def attention(self, q, k_cache, v_cache, meta: AttentionMetadata, scale):
        T, nh, d = q.shape
        nkv, bs = k_cache.shape[2], k_cache.shape[1]
        if q.stride(2) != 1 or q.stride(1) != d:
            q = q.contiguous()
        out = torch.empty((T, nh, d), dtype=q.dtype, device=q.device)
        B = meta.seq_lens.shape[0]
        if T == 0 or B == 0:
            return out
        dt = _dtype_name(q)
        if d not in (64, 128):
            raise ValueError(f"cuda attention supports head_dim 64 and 128, not {d}")
        if bs < _MIN_BLOCK_SIZE or bs & (bs - 1):
            raise ValueError(f"cuda attention needs KV blocks of a power of two >= {_MIN_BLOCK_SIZE} tokens, not {bs}")
        tables, max_blocks = meta.block_tables, meta.block_tables.shape[1]
        if meta.max_query_len == 1:
            self._decode(q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs)
        else:
            grid = (math.ceil(meta.max_query_len / _PREFILL_TILE), nh, B)
            self._k["prefill", dt, d](grid, 128, q, q.stride(0), k_cache, v_cache, tables, max_blocks,
                                      meta.seq_lens, meta.query_start_loc, out, nh, nkv, bs,
                                      float(scale * math.log2(math.e)))
        return out

    def decode_partition(self, batch: int, nkv: int, max_seq_len: int) -> int:
        """Keys per split of decode attention: enough blocks to fill the GPU
        DECODE_WAVES times over at a context of up to DECODE_FILL_CONTEXT."""
        want_splits = max(1, math.ceil(self.decode_waves * self.num_sms / (batch * nkv)))
        context = min(max_seq_len, self.decode_fill_context)
        return min(_MAX_PARTITION, max(32, 16 * math.ceil(context / want_splits / 16)))

    def _decode(self, q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs, partition=None):
        G = nh // nkv
        if G > 8:
            raise ValueError(f"cuda decode attention supports up to 8 query heads per KV head, not {G}")
        partition = partition or self.decode_partition(B, nkv, meta.max_seq_len)
        splits = math.ceil(meta.max_seq_len / partition)
        if splits > 1:
            part_o = torch.empty((B, nh, splits, d), dtype=torch.float32, device=q.device)
            part_ml = torch.empty((B, nh, splits, 2), dtype=torch.float32, device=q.device)
        else:
            part_o = part_ml = None
        self._k["decode", dt, d, next(g for g in _DECODE_GROUPS if g >= G)](
            (splits, nkv, B), _DECODE_THREADS, q, q.stride(0), k_cache, v_cache, meta.block_tables,
            meta.block_tables.shape[1], meta.seq_lens, meta.query_start_loc, out, part_o, part_ml,
            nh, nkv, bs, partition, splits, float(scale), shared=G * partition * 4)
        if splits > 1:
            self._k["reduce", dt]((nh, B), d, part_o, part_ml, meta.seq_lens, meta.query_start_loc, out,
                                  nh, d, partition, splits)

    def silu_and_mul(self, x):
        x = x.contiguous()
        I = x.shape[-1] // 2
        if I % 8:
            raise ValueError(f"cuda silu_and_mul needs the intermediate size to be a multiple of 8, not {I}")
        out = torch.empty((*x.shape[:-1], I), dtype=x.dtype, device=x.device)
        chunks = out.numel() // 8
        if chunks:
            blocks = min(math.ceil(chunks / 256), self.num_sms * 8)
            self._k["silu", _dtype_name(x)](blocks, 256, x, out, I, chunks)
        return out

    def sample(self, logits, sampling: SamplingTensors):
        logits = logits.contiguous()
        B, V = logits.shape
        out = torch.empty(B, dtype=torch.int64, device=logits.device)
        if B:
            self._k["sample", _dtype_name(logits)](
                B, 1024, logits, V, sampling.temperature.float().contiguous(), sampling.top_k.int().contiguous(),
                sampling.top_p.float().contiguous(), sampling.seeds.long().contiguous(),
                sampling.counters.long().contiguous(), out, int(sampling.all_greedy))
        return out

    def build_decode_inputs(self, sampled: torch.Tensor, seq_lens: torch.Tensor, block_tables: torch.Tensor,
                            block_size: int, input_ids: torch.Tensor, positions: torch.Tensor,
                            slot_mapping: torch.Tensor) -> None:
        """Write the next decode step's inputs on the device, without a host round trip.

        sampled [R] int64: last token of each running row; seq_lens [R] int32: tokens
        already in the cache, advanced by one in place; block_tables [R, max_blocks]
        int32. Writes input_ids [R] int64 (= sampled), positions [R] int64 (= old
        seq_lens) and slot_mapping [R] int64 (-1 where the table has no block yet).
        """
        for t, dtype in ((sampled, torch.int64), (seq_lens, torch.int32), (block_tables, torch.int32),
                         (input_ids, torch.int64), (positions, torch.int64), (slot_mapping, torch.int64)):
            if t.dtype != dtype or not t.is_contiguous():
                raise TypeError(f"build_decode_inputs expects contiguous {dtype} tensors")
        R = sampled.shape[0]
        if R:
            self._k["decode_inputs"](math.ceil(R / 256), 256, sampled, seq_lens, block_tables, block_tables.shape[1],
                                     block_size, input_ids, positions, slot_mapping, R)
