"""`EngineConfig`: every engine setting in one frozen object, built and validated once by
`LLM`, then passed whole to the parts that need it (scheduler, runner, graphs, ops).

What the user asks for (`model`, `backend="auto"`, ...) is resolved by `LLM` into a copy
holding what was chosen (`backend="cuda"`, `dtype="bfloat16"`, `max_model_len`, the KV
blocks that fit), so reading the config tells what the engine runs with.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, fields

BACKENDS = ("auto", "cuda", "torch")
# none: every weight dequantized to the dtype. gguf: a GGUF file's 4-bit matrices run as they are
# stored (engine.quantized; the torch backend on CPU), the rest dequantized to the dtype.
QUANTIZATIONS = ("none", "gguf")
DTYPES = ("auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16")
# Which of a prefill's GEMMs run in gemm_tma: none, the MLP's gate|up with SiLU-and-mul as its
# epilogue, or every projection.
GEMM_TMA_SCOPES = ("off", "mlp", "all")


def gemm_tma_scope(value: str) -> str:
    """ROADGATE_PREFILL_GEMM_TMA's value: a scope, or 0 / 1 for off / all."""
    scope = {"": "off", "0": "off", "1": "all"}.get(value, value)
    if scope not in GEMM_TMA_SCOPES:
        raise ValueError(f"{value!r} is not one of {', '.join(GEMM_TMA_SCOPES)}, 0 or 1")
    return scope


# The settings a benchmark sweep sets from the environment: the step budget, and the cuda
# backend's tuning knobs.
ENV_OVERRIDES = {"max_num_batched_tokens": ("ROADGATE_MAX_NUM_BATCHED_TOKENS", int),
                 "decode_slack": ("ROADGATE_DECODE_SLACK", float),
                 "prefill_m_tiles": ("ROADGATE_PREFILL_M_TILES", int),
                 "prefill_wgmma": ("ROADGATE_PREFILL_WGMMA", lambda v: v not in ("", "0")),
                 "prefill_ws": ("ROADGATE_PREFILL_WS", lambda v: v not in ("", "0")),
                 "prefill_ws_short": ("ROADGATE_PREFILL_WS_SHORT", lambda v: v not in ("", "0")),
                 "prefill_ws_keys": ("ROADGATE_PREFILL_WS_KEYS", int),
                 "decode_few_rows": ("ROADGATE_DECODE_FEW_ROWS", int),
                 "decode_few_chunk": ("ROADGATE_DECODE_FEW_CHUNK", int),
                 "gemv_max_rows": ("ROADGATE_GEMV_MAX_ROWS", int),
                 "gemm_max_rows": ("ROADGATE_GEMM_MAX_ROWS", int),
                 "prefill_gemm_tma": ("ROADGATE_PREFILL_GEMM_TMA", gemm_tma_scope),
                 "prefill_silu_width": ("ROADGATE_PREFILL_SILU_WIDTH", int),
                 "cuda_debug": ("ROADGATE_CUDA_DEBUG", lambda v: v not in ("", "0")),
                 "programmatic_launch": ("ROADGATE_PROGRAMMATIC_LAUNCH", lambda v: v not in ("", "0"))}


@dataclass(frozen=True)
class EngineConfig:
    model: str
    backend: str = "auto"                 # auto: cuda where it can run, else torch
    dtype: str = "auto"                   # auto: bfloat16 on a GPU, float32 on CPU (see LLM)
    quantization: str = "none"
    device: str | None = None             # default: cuda for the cuda backend, else cpu
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None      # default: the model's context, capped by the KV cache
    kv_cache_tokens: int | None = None    # default: what fits in gpu_memory_utilization (GPU), 16384 (CPU)
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    enable_prefix_caching: bool = True
    seed: int = 0
    enforce_eager: bool = False           # no CUDA graphs
    # The cuda backend's decode work list (cuda_src/attention_decode.cu, plan_decode): keys per
    # chunk at least this many times the even share of one block slot. Above 1, fewer, longer
    # chunks: each chunk costs a block's set-up and a share of the combine. 1.5 measured best
    # on mixed lengths at B=256 (docs/performance.md, session 18); 2 leaves too long a tail.
    decode_slack: float = 1.5
    # Decode batches of up to this many rows skip the work list: one block per chunk of each
    # row, its cached K/V copied in before it waits on the kernel before it (attn_decode_few),
    # as long as the blocks fit on the GPU at once. 0: the work list at every batch (A/B runs).
    decode_few_rows: int = 8
    # Keys per chunk there (a multiple of 16; at most 256 keys of 16-bit d=64, see
    # engine.ops.cuda_ops._FEW_CHUNK_BYTES). Shorter chunks are more blocks working at once after the wait,
    # longer ones fewer partials to combine. 128 measured best on latency-b1 (TPOT 0.603-0.612
    # ms against 0.720-0.934 at 256 and 0.693-0.713 with the work list, session 24).
    decode_few_chunk: int = 128
    # Query rows per warp of the prefill kernel, in 16-row m-tiles: 0 picks per step
    # (engine.ops.cuda_ops.CudaOps.prefill_m_tiles); 1 or 2 forces one (tests, sweeps), and 3
    # the warp-specialized kernel's 192-row tiles (prefill_ws).
    prefill_m_tiles: int = 0
    # 16-bit prefill attention at head dim 64 on Hopper's warpgroup MMA (sm_90a), not mma.sync
    # (cuda_src/attention_prefill.cu); off: mma.sync everywhere (A/B runs).
    prefill_wgmma: bool = True
    # Its tall tiles in the warp-specialized kernel: 192 rows, a loading warpgroup and three
    # computing ones, mbarriers between them (attn_prefill_ws); off: 128 rows in the kernel whose
    # warpgroups all load and compute (A/B runs).
    prefill_ws: bool = True
    # Short queries' 64-row tiles in the warp-specialized kernel too where its blocks fit in one
    # wave (CudaOps.prefill_short_ws: a lone prompt); off: attn_prefill_wgmma's always (A/B runs).
    prefill_ws_short: bool = True
    # Keys a K/V tile of the warp-specialized kernel's tall tiles: 128 (one wider multiply for S,
    # each tile's P V waited for before the next S; attn_prefill_ws), or 64 (S of a tile
    # overlapping P V of the one before; A/B runs). Attention µs a layer on the H100 (session
    # 34, docs/performance.md): 1 x 8,000 244-246 against 258-259, 1 x 4,000 79-80 against 82.
    prefill_ws_keys: int = 128
    # The gemv kernels take up to 8 rows but beat norm/activation + cuBLAS only up to
    # about 2 (benchmarks/kernel_bench.py: 1 row 12.6 vs 21.3 µs a layer, 4 rows 24.4 vs 21.9).
    gemv_max_rows: int = 2
    # Past the gemv rows, up to this many rows go through our tensor-core GEMM
    # (cuda_src/gemm.cu), which programmatic edges join; beyond it cuBLAS. The decode step
    # with it against cuBLAS (benchmarks/gemm_crossover.sh, session 17): 0.940 vs 1.219 ms
    # at 16 rows, 1.230 vs 1.397 at 32. With the wgmma tiles (session 22, context 512):
    # 1.199 vs 1.324 ms at 48 rows, 1.349 vs 1.367 at 64, 1.537 vs 1.500 at 96.
    gemm_max_rows: int = 64
    # A prefill's GEMMs whose tiles fill the GPU in our TMA-fed GEMM (cuda_src/gemm_tma.cu):
    # "mlp": gate|up with SiLU-and-mul as its epilogue; "all": the other projections too;
    # "off": cuBLAS, then silu_and_mul. mlp against off on the H100 (session 39's call 2, median
    # wall of alternating repetitions): 64 x 1,000 0.970, 1 x 8,000 0.992, 1 x 4,000 0.997; all
    # against off (call 1) 1.038, 1.038, 0.995: cuBLAS is faster at the other projections' shapes.
    prefill_gemm_tma: str = "mlp"
    # gemm_tma's fused gate|up tiles: 128 W rows (ping-pong: one warpgroup's SiLU epilogue
    # runs while the other multiplies), 256 (cooperative: half the x loads an output), or 0:
    # chosen per step by gemm_tma_width's rounds. 0 against 128 on the H100 (session 45,
    # prefill.py --ab, median wall of alternating repetitions): 64 x 1,000 0.983, 1 x 8,000
    # 0.991, 1 x 4,000 0.986.
    prefill_silu_width: int = 0
    cuda_debug: bool = False              # synchronize and check after every kernel launch
    # Programmatic edges between our kernels in CUDA graphs (engine.ops.pdl): a kernel's
    # blocks launch and prefetch its weights while the kernel before it still runs.
    programmatic_launch: bool = True
    # Derived by LLM once the model and the memory are known; None before.
    num_kv_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"unknown quantization {self.quantization!r}; choose one of {', '.join(QUANTIZATIONS)}")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be >= 1")
        if self.max_model_len is not None and self.max_model_len < 1:   # 0 would silently mean "the model's"
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < self.block_size:
            raise ValueError(f"KV cache of {self.kv_cache_tokens} tokens holds less than one block "
                             f"of {self.block_size}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.prefill_m_tiles not in (0, 1, 2, 3):
            raise ValueError(f"prefill_m_tiles must be 0 (chosen per step), 1, 2 or 3, not {self.prefill_m_tiles}")
        if self.prefill_gemm_tma not in GEMM_TMA_SCOPES:
            raise ValueError(f"prefill_gemm_tma must be one of {', '.join(GEMM_TMA_SCOPES)}, "
                             f"not {self.prefill_gemm_tma!r}")
        if self.prefill_silu_width not in (0, 128, 256):
            raise ValueError(f"prefill_silu_width must be 0 (chosen per step), 128 or 256, not {self.prefill_silu_width}")
        if self.prefill_ws_keys not in (64, 128):
            raise ValueError(f"prefill_ws_keys must be 64 or 128, not {self.prefill_ws_keys}")
        if self.decode_few_chunk < 16 or self.decode_few_chunk % 16:
            raise ValueError(f"decode_few_chunk must be a positive multiple of 16, not {self.decode_few_chunk}")
        if self.decode_slack < 1 or min(self.decode_few_rows, self.gemv_max_rows, self.gemm_max_rows) < 0:
            raise ValueError("decode_slack must be >= 1, decode_few_rows, gemv_max_rows and gemm_max_rows >= 0")

    @classmethod
    def from_env(cls, model: str, environ=os.environ, **settings) -> EngineConfig:
        """The config of `settings`, with the tuning knobs of ENV_OVERRIDES that the
        environment sets and `settings` does not. Where both set a knob, the caller's value
        stands and a warning says so: a sweep must not believe it measured a value that
        never ran (the bench adapter sets its own step budget, for one)."""
        for name, (variable, parse) in ENV_OVERRIDES.items():
            if environ.get(variable) is None:
                continue
            try:
                value = parse(environ[variable])
            except ValueError:
                raise ValueError(f"{variable}={environ[variable]!r} is not a valid {name}") from None
            if name not in settings:
                settings[name] = value
            elif settings[name] != value:
                warnings.warn(f"{variable}={environ[variable]!r} is not applied: the caller sets "
                              f"{name}={settings[name]!r}", stacklevel=2)
        unknown = set(settings) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown engine settings: {', '.join(sorted(unknown))}")
        return cls(model=model, **settings)
