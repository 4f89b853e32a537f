"""Every kernel the cuda backend launches, and the constants it shares with cuda_src/.

cuda_ops prepares its launchers from KERNELS; tests/test_cuda_sources.py checks, on CPU,
that each entry names an `extern "C"` kernel of its source whose parameters match the
signature, and that each constant here is the one its source declares. A parameter or a
constant changed on one side only fails there, not as a wrong launch on the GPU.

Signatures: one letter per parameter, P pointer, i int32, l int64, f float32, T a tensor map
(by value, first: see cuda_src/tma.cuh).
"""
from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("bf16", "f16", "f32")
HEAD_DIMS = (64, 128)
DECODE_GROUPS = (1, 2, 3, 4, 8)   # query heads per KV head the decode kernel is built for (exactly)
# (head dim, m-tiles of 16 query rows per warp) the prefill kernel is built for.
PREFILL_SHAPES = ((64, 1), (64, 2), (128, 1))
# Warpgroups a block (64 query rows each) the wgmma prefill kernel is built for: 16-bit, d = 64.
PREFILL_WG_SHAPES = (1, 2)
PREFILL_WS_M_TILES = 3            # the warp-specialized kernel's computing warpgroups: 64 rows each
PREFILL_WS_SHAPES = (1, PREFILL_WS_M_TILES)   # ... at which it is built: short queries' tiles, tall ones


@dataclass(frozen=True)
class GemmTile:
    """An output tile the decode GEMM (gemm.cu) is built for: rows x cols outputs a block,
    `stages` K chunks in its pipeline, `split` blocks sharing K, and its tensor-core
    instruction: "mma" (mma.sync, any sm_90) or "wgmma" (sm_90a's warpgroup MMA)."""
    rows: int
    cols: int
    stages: int
    split: int
    unit: str = "mma"

    def kernel_name(self, dtype: str) -> str:
        prefix = "gemm_wg" if self.unit == "wgmma" else "gemm"
        return f"{prefix}_{dtype}_{self.rows}x{self.cols}x{self.stages}_k{self.split}"

    def shared_bytes(self, bk: int, pad: int) -> int:
        """Dynamic shared memory (16-bit operands, K chunks `bk` wide): the stages of x and W
        tiles, padded rows for mma, for wgmma swizzled ones and room to align them to 1 KB."""
        if self.unit == "wgmma":
            return self.stages * (self.rows + self.cols) * bk * 2 + 1024
        return self.stages * (self.rows + self.cols) * (bk + pad) * 2

    def __str__(self) -> str:
        return f"{'wg ' if self.unit == 'wgmma' else ''}{self.rows}x{self.cols}x{self.stages}k{self.split}"


GEMM_TILES = tuple(GemmTile(*t) for t in (
    (16, 64, 10, 1), (16, 64, 7, 4), (32, 32, 10, 1), (32, 64, 7, 2), (64, 32, 10, 1), (64, 64, 10, 1),
    (64, 64, 7, 2), (128, 64, 6, 1))) + tuple(GemmTile(*t, unit="wgmma") for t in (
    (64, 64, 8, 1), (64, 64, 5, 1), (64, 128, 6, 1), (64, 128, 4, 1), (64, 256, 4, 1), (64, 64, 6, 2),
    (64, 128, 4, 2), (64, 64, 5, 4)))

# The host's name -> (source, the source's name, value): `constexpr int NAME = value` there.
CONSTANTS = {
    "PREFILL_ROWS_PER_M_TILE": ("attention_prefill.cu", "ROWS_PER_M_TILE", 64),
    "PREFILL_KEYS": ("attention_prefill.cu", "BN", 64),
    "PREFILL_PAD": ("attention_prefill.cu", "PAD", 8),
    "PREFILL_BLOCKS_PER_SM": ("attention_prefill.cu", "BLOCKS_PER_SM", 2),
    "PREFILL_WS_STAGES": ("attention_prefill.cu", "WS_STAGES", 4),
    "DECODE_THREADS": ("attention_decode.cu", "THREADS", 128),
    "DECODE_MIN_CHUNK": ("attention_decode.cu", "MIN_CHUNK", 128),
    "DECODE_MAX_CHUNK": ("attention_decode.cu", "MAX_CHUNK", 2048),
    "DECODE_CHUNK_ALIGN": ("attention_decode.cu", "CHUNK_ALIGN", 16),
    "DECODE_PLAN_THREADS": ("attention_decode.cu", "PLAN_THREADS", 1024),
    "MIN_BLOCK_SIZE": ("attention_decode.cu", "MIN_BLOCK_SIZE", 8),
    "RMS_NORM_ROWS_PER_BLOCK": ("rms_norm.cu", "ROWS_PER_BLOCK", 4),
    "GEMV_WARPS": ("gemv.cu", "WARPS", 4),
    "GEMV_MAX_ROWS": ("gemv.cu", "MAX_ROWS", 8),
    "GEMM_BK": ("gemm.cu", "BK", 64),
    "GEMM_PAD": ("gemm.cu", "PAD", 8),
    "GEMM_TMA_ROWS": ("gemm_tma.cu", "BM", 128),
    "GEMM_TMA_COLS": ("gemm_tma.cu", "WIDE_BN", 256),
    "GEMM_TMA_NARROW_COLS": ("gemm_tma.cu", "NARROW_BN", 192),
    "GEMM_TMA_PINGPONG_COLS": ("gemm_tma.cu", "PINGPONG_BN", 128),
    "GEMM_TMA_TILE_BYTES": ("gemm_tma.cu", "TILE_BYTES", 212992),
    "GEMM_TMA_CLUSTER": ("gemm_tma.cu", "CLUSTER", 2),
}


def constant(name: str) -> int:
    return CONSTANTS[name][2]


# gemm_tma's kernels (gemm_tma_<kind>_<dtype>) by (silu, W rows a tile).
_WIDE, _NARROW = constant("GEMM_TMA_COLS"), constant("GEMM_TMA_NARROW_COLS")
_PINGPONG = constant("GEMM_TMA_PINGPONG_COLS")
GEMM_TMA_KINDS = {(False, _WIDE): "plain", (False, _NARROW): "narrow", (True, _WIDE): "silu",
                  (True, _PINGPONG): "silu_pp"}


@dataclass(frozen=True)
class KernelSpec:
    key: str | tuple     # how cuda_ops looks it up
    source: str          # the .cu file's stem
    name: str            # the exported symbol
    signature: str


def _specs() -> list[KernelSpec]:
    specs = [KernelSpec("embed", "embedding", "embed_rows", "PPPi"),
             KernelSpec("take_pending", "pending_tokens", "take_pending_tokens", "PPPi"),
             KernelSpec("plan_decode", "attention_decode", "plan_decode", "PiiifiPPP")]
    for dt in DTYPES:
        specs += [KernelSpec(("rms_norm", dt), "rms_norm", f"rms_norm_{dt}", "PPPPPiif"),
                  KernelSpec(("silu", dt), "silu_mul", f"silu_and_mul_{dt}", "PPil"),
                  KernelSpec(("rope", dt), "rope_cache", f"rope_and_cache_{dt}", "PPPPPPPPiiillll"),
                  KernelSpec(("sample", dt), "sample", f"sample_{dt}", "PiPPPPPPi")]
        if dt != "f32":   # the gemv kernels read 16-bit weights only
            specs += [KernelSpec(("gemv_plain", dt), "gemv", f"gemv_plain_{dt}", "PPPiii"),
                      KernelSpec(("gemv_norm", dt), "gemv", f"gemv_norm_{dt}", "PPPPPPiiif"),
                      KernelSpec(("gemv_silu", dt), "gemv", f"gemv_silu_{dt}", "PPPiii"),
                      KernelSpec(("gemv_qkv_rope", dt), "gemv", f"gemv_norm_qkv_rope_{dt}", "PPPPPPiifPPPPPiii")]
            specs += [KernelSpec(("gemm", dt, tile), "gemm", tile.kernel_name(dt), "PPPiii") for tile in GEMM_TILES]
            specs += [KernelSpec(("gemm_tma", dt, kind), "gemm_tma", f"gemm_tma_{kind}_{dt}", "TTTiii")
                      for kind in GEMM_TMA_KINDS.values()]
        specs += [KernelSpec(("prefill", dt, d, mt), "attention_prefill", f"attn_prefill_{dt}_d{d}_m{mt}",
                             "PlPPPiPPPiiif") for d, mt in PREFILL_SHAPES]
        if dt != "f32":
            specs += [KernelSpec(("prefill_wg", dt, 64, wg, split), "attention_prefill",
                                 f"attn_prefill_wg_{'split_' if split else ''}{dt}_d64_m{wg}", "PlPPPiPPPiiifiiPP")
                      for wg in PREFILL_WG_SHAPES for split in (False, True)]
            specs += [KernelSpec(("prefill_ws", dt, cw, split), "attention_prefill",
                                 f"attn_prefill_ws_{'split_' if split else ''}{dt}_d64_m{cw}", "PlPPPiPPPiiifiiPP")
                      for cw in PREFILL_WS_SHAPES for split in (False, True)]
            specs += [KernelSpec(("prefill_ws128", dt, split), "attention_prefill",
                                 f"attn_prefill_ws128_{'split_' if split else ''}{dt}_d64_m{PREFILL_WS_M_TILES}",
                                 "PlPPPiPPPiiifiiPP") for split in (False, True)]
        for d in HEAD_DIMS:
            specs += [KernelSpec(("decode", dt, d, g), "attention_decode", f"attn_decode_{dt}_d{d}_g{g}",
                                 "PlPPPiPPPPPPiiifPPPPPPi") for g in DECODE_GROUPS]
            specs += [KernelSpec(("decode_few", dt, d, g), "attention_decode", f"attn_decode_few_{dt}_d{d}_g{g}",
                                 "PlPPPiPPPPPPiiifPPPii") for g in DECODE_GROUPS]
    return specs


KERNELS = _specs()
