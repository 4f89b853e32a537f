"""The `cuda` ops backend: kernels from cuda_src/, launched on torch's current stream.

torch owns the memory and the CUDA context; PyCUDA retains torch's primary
context (so both libraries see one context) and reports the device's arch;
cuda_build compiles, caches, loads and launches. Set ROADGATE_CUDA_DEBUG=1 to
synchronize and check for errors after every launch.
"""
from __future__ import annotations

import atexit
import math

import torch

from engine.config import EngineConfig
from engine.ops import cuda_build
from engine.ops.base import Ops, SamplingTensors
from engine.ops.kernel_table import DECODE_GROUPS, KERNELS, constant

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
# Shared with cuda_src/ through the kernel table, which a CPU test checks against the sources.
_PREFILL_TILE = constant("PREFILL_TILE")
_DECODE_THREADS = constant("DECODE_THREADS")
_MAX_PARTITION = constant("MAX_PARTITION")
_MIN_BLOCK_SIZE = constant("MIN_BLOCK_SIZE")
_GEMV_WARPS, _GEMV_KERNEL_MAX_ROWS = constant("GEMV_WARPS"), constant("GEMV_MAX_ROWS")
_SMEM_BYTES = 48 * 1024              # the gemv's x' must fit without an opt-in


def _float_residual(residual: torch.Tensor | None) -> torch.Tensor | None:
    if residual is not None and residual.dtype != torch.float32:
        raise TypeError("the residual stream is float32")
    return None if residual is None else residual.contiguous()


def _dtype_name(t: torch.Tensor) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"cuda ops support bf16, fp16 and float32 tensors, not {t.dtype}")
    return _DTYPES[t.dtype]


class CudaOps(Ops):
    name = "cuda"
    supports_graphs = True     # every launch goes to torch's current stream, the capture's included

    def __init__(self, config: EngineConfig | None = None):
        """`config`: the engine's; None gives the defaults (with their environment overrides),
        for kernels used outside an LLM: kernel tests, benchmarks/kernels.py, the health check."""
        config = config or EngineConfig.from_env(model="", backend="cuda")
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
        self.decode_waves = config.decode_waves
        self.decode_fill_context = config.decode_fill_context
        self.gemv_max_rows = config.gemv_max_rows
        try:
            cubins = cuda_build.build_all(f"sm_{major}{minor}")
        except RuntimeError as e:
            raise RuntimeError(f"CudaOps: compiling cuda_src failed: {e}") from e
        self.launcher = cuda_build.Launcher(debug=config.cuda_debug)
        mods = {stem: self.launcher.load(path) for stem, path in cubins.items()}
        self._k = {spec.key: mods[spec.source].kernel(spec.name, spec.signature) for spec in KERNELS}
        # Decode attention's per-(sequence, KV head) split counters. Kernels leave them
        # zero; a larger batch gets a new buffer, and old ones stay alive because
        # captured CUDA graphs hold their addresses.
        self._split_counters: list[torch.Tensor] = []

    def plan_step(self, query_lens, seq_lens) -> None:
        return None   # the kernels read the lengths on the device

    def new_stream(self) -> torch.cuda.ExternalStream:
        """A torch stream these kernels can run on (beside the default one): for side work
        and graph capture."""
        return self.launcher.new_stream()

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
        residual = _float_residual(residual)
        if rows:
            self._k["rms_norm", _dtype_name(x)](rows, 256, x, residual, weight, out, r, H, float(eps))
        return out, r

    # ------------------------------------------------------------ linear layers
    # At a row or two (decode of one or two sequences) our gemv kernels fuse the norm
    # or activation into the GEMM; above that, the separate ops and cuBLAS.

    def _gemv_fits(self, x: torch.Tensor, weight: torch.Tensor, K: int) -> bool:
        return (x.dim() == 2 and x.shape[0] <= min(self.gemv_max_rows, _GEMV_KERNEL_MAX_ROWS)
                and x.dtype == weight.dtype
                and x.dtype in (torch.bfloat16, torch.float16) and weight.shape[1] == K and K % 8 == 0
                and x.shape[0] * K * 4 <= _SMEM_BYTES)

    def _gemv(self, kind: str, x: torch.Tensor, weight: torch.Tensor, K: int, between=(), after=()) -> torch.Tensor:
        """Launch a gemv kernel: its arguments are x, `between`, W, y, M, N, K, `after`."""
        M, N = x.shape[0], weight.shape[0]
        y = torch.empty((M, N), dtype=x.dtype, device=x.device)
        if M:
            self._k[kind, _dtype_name(x)](math.ceil(N / _GEMV_WARPS), 32 * _GEMV_WARPS, x.contiguous(), *between,
                                          weight.contiguous(), y, M, N, K, *after, shared=M * K * 4)
        return y

    def linear(self, x, weight):
        if not self._gemv_fits(x, weight, x.shape[-1]):
            return super().linear(x, weight)
        return self._gemv("gemv_plain", x, weight, x.shape[1])

    def norm_linear(self, x, residual, norm_weight, eps, weight):
        if not self._gemv_fits(x, weight, x.shape[-1]):
            return super().norm_linear(x, residual, norm_weight, eps, weight)
        r = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        y = self._gemv("gemv_norm", x, weight, x.shape[1], (_float_residual(residual), norm_weight.contiguous(), r),
                       (float(eps),))
        return y, r

    def attention_inputs(self, x, residual, layer, kv_cache, step):
        s = step.shape
        nh, nkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        if not self._gemv_fits(x, layer.qkv, x.shape[-1]) or layer.qkv.shape[0] != (nh + 2 * nkv) * d:
            return super().attention_inputs(x, residual, layer, kv_cache, step)
        M, K = x.shape
        k_cache, v_cache = kv_cache
        r = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        y = torch.empty((M, layer.qkv.shape[0]), dtype=x.dtype, device=x.device)
        tasks = (nh + nkv) * d // 2 + nkv * d
        if M:
            self._k["gemv_qkv_rope", _dtype_name(x)](
                math.ceil(tasks / _GEMV_WARPS), 32 * _GEMV_WARPS, x.contiguous(), _float_residual(residual),
                layer.attn_norm.contiguous(), r,
                layer.qkv.contiguous(), y, M, K, float(s.rms_norm_eps), step.positions.long().contiguous(),
                step.cos_sin.float().contiguous(), k_cache, v_cache, step.meta.slot_mapping.long().contiguous(),
                nh, nkv, d, shared=M * K * 4)
        return y[:, :nh * d].view(M, nh, d), r

    def silu_linear(self, x, weight):
        K = x.shape[-1] // 2
        if not self._gemv_fits(x, weight, K):
            return super().silu_linear(x, weight)
        return self._gemv("gemv_silu", x, weight, K)

    def logits(self, hidden, head):
        if head.dtype == torch.float32:
            return super().logits(hidden, head)
        # A 16-bit head read as it is stored, float32 out: the products of 16-bit
        # values are exact in float32, so this equals the float32 head's logits.
        return torch.mm(hidden.to(head.dtype), head.t(), out_dtype=torch.float32)

    def rope_and_cache(self, q, k, v, kv_cache, step):
        T, nh, d = q.shape
        nkv = k.shape[1]
        k_cache, v_cache = kv_cache
        for t in (q, k, v):
            if t.stride(2) != 1 or t.stride(1) != d:
                raise ValueError("rope_and_cache needs each token's heads as contiguous d-vectors")
        if T:
            self._k["rope", _dtype_name(q)](T, 128, q, k, v, step.positions.long().contiguous(),
                                            step.cos_sin.float().contiguous(), k_cache, v_cache,
                                            step.meta.slot_mapping.long().contiguous(), nh, nkv, d,
                                            q.stride(0), k.stride(0), v.stride(0))

    def attention_block(self, x, residual, layer, kv_cache, step):
        s, meta = step.shape, step.meta
        nh, nkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        if (meta.max_query_len != 1 or self._gemv_fits(x, layer.qkv, x.shape[-1])
                or layer.qkv.shape[0] != (nh + 2 * nkv) * d):
            # Prefill, or a decode batch small enough for the gemv kernel that fuses RoPE itself.
            return super().attention_block(x, residual, layer, kv_cache, step)
        # Decode: RoPE and the new k, v's cache write happen inside the attention kernel
        # (one launch a layer fewer: rope_and_cache was 3.3 us of a B=256 layer).
        qkv, residual = self.norm_linear(x, residual, layer.attn_norm, s.rms_norm_eps, layer.qkv)
        q = qkv[:, :nh * d].view(qkv.shape[0], nh, d)
        rope = (step.positions.long().contiguous(), step.cos_sin.float().contiguous(),
                meta.slot_mapping.long().contiguous())
        attn = self._attention(q, *kv_cache, meta, s.scale, rope)
        return self.linear(attn.flatten(1), layer.o), residual

    def attention(self, q, kv_cache, step):
        return self._attention(q, *kv_cache, step.meta, step.shape.scale)

    def _attention(self, q, k_cache, v_cache, meta, scale, rope=None):
        """attention(); with rope = (positions, cos_sin, slot_mapping), decode only: q is
        the q part of the packed, unrotated q|k|v rows, and the kernel rotates q and k
        and writes k, v into the cache first."""
        T, nh, d = q.shape
        nkv, bs = k_cache.shape[2], k_cache.shape[1]
        if rope is None and (q.stride(2) != 1 or q.stride(1) != d):
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
            self._decode(q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs, rope=rope)
        else:
            grid = (math.ceil(meta.max_query_len / _PREFILL_TILE), nh, B)
            self._k["prefill", dt, d](grid, 128, q, q.stride(0), k_cache, v_cache, tables, max_blocks,
                                      meta.seq_lens, meta.query_start_loc, out, nh, nkv, bs,
                                      float(scale * math.log2(math.e)))
        return out

    def decode_partition(self, batch: int, nkv: int, max_seq_len: int) -> int:
        """Keys per split of decode attention: enough blocks to fill the GPU
        DECODE_WAVES times over at a context of up to DECODE_FILL_CONTEXT, and at most
        1,024. (Whole sequences of up to 2,048 keys at batch 256 were faster on a batch
        of equal lengths, 46.5 vs 54.2 us at context 1,025, and slower on nano-bench's
        mixed ones, 53.8-54.7k vs 56.7-57.2k tok/s: one wave of blocks lasts as long
        as its longest block.)"""
        want_splits = max(1, math.ceil(self.decode_waves * self.num_sms / (batch * nkv)))
        context = min(max_seq_len, self.decode_fill_context)
        return min(_MAX_PARTITION, max(32, 16 * math.ceil(context / want_splits / 16)))

    def _decode(self, q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs, partition=None, rope=None):
        G = nh // nkv
        if G not in DECODE_GROUPS:
            raise ValueError(f"cuda decode attention is built for {DECODE_GROUPS} query heads per KV head, not {G}")
        partition = partition or self.decode_partition(B, nkv, meta.max_seq_len)
        splits = math.ceil(meta.max_seq_len / partition)
        if splits > 1:
            part_o = torch.empty((B, nh, splits, d), dtype=torch.float32, device=q.device)
            part_ml = torch.empty((B, nh, splits, 2), dtype=torch.float32, device=q.device)
            counters = self._counters(B * nkv, q.device)
        else:
            part_o = part_ml = counters = None
        self._k["decode", dt, d, G](
            (B * nkv, splits), _DECODE_THREADS, q, q.stride(0), k_cache, v_cache, meta.block_tables,
            meta.block_tables.shape[1], meta.seq_lens, meta.query_start_loc, out, part_o, part_ml, counters,
            nh, nkv, bs, partition, splits, float(scale), *(rope or (None, None, None)), shared=G * partition * 4)

    def _counters(self, n: int, device) -> torch.Tensor:
        if not self._split_counters or self._split_counters[-1].numel() < n:
            self._split_counters.append(torch.zeros(max(n, 4096), dtype=torch.int32, device=device))
        return self._split_counters[-1]

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
