"""The `cuda` ops backend: kernels from cuda_src/, launched on torch's current stream.

torch owns the memory and the CUDA context; PyCUDA retains torch's primary
context (so both libraries see one context) and reports the device's arch;
cuda_build compiles, caches, loads and launches. Set ROADGATE_CUDA_DEBUG=1 to
synchronize and check for errors after every launch.
"""
from __future__ import annotations

import atexit
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.config import EngineConfig
from engine.ops import cuda_build
from engine.ops.base import Ops, SamplingTensors
from engine.ops.kernel_table import (DECODE_GROUPS, GEMM_TILES, GEMM_TMA_KINDS, KERNELS, PREFILL_SHAPES,
                                     PREFILL_WG_SHAPES, PREFILL_WS_M_TILES, PREFILL_WS_SHAPES, GemmTile, constant)
from engine.ops.tensor_map import swizzled_rows_map

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}
_ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
# Shared with cuda_src/ through the kernel table, which a CPU test checks against the sources.
_PREFILL_ROWS_PER_M_TILE = constant("PREFILL_ROWS_PER_M_TILE")
_PREFILL_KEYS, _PREFILL_PAD = constant("PREFILL_KEYS"), constant("PREFILL_PAD")
_PREFILL_WS_STAGES = constant("PREFILL_WS_STAGES")
_PREFILL_BLOCKS_PER_SM = constant("PREFILL_BLOCKS_PER_SM")
# Queries no longer than this keep 64-row prefill tiles whatever their number: their K/V
# chains are short, and twice the blocks balanced better (wall ms, 64 against 128 rows, two
# rounds: 64x1000 63.7/63.4 against 64.3/67.2, 16x2000 37.0/36.9 against 37.7/39.7; 8x3000
# even; 4x4000 and 1x8000 faster at 128; docs/performance.md, session 25).
_PREFILL_TALL_MIN_QUERY = 2048
# Split keys (cuda_src/attention_prefill.cu): a block takes at least this many K/V tiles
# (against the merge's cost), and a tile is split into at most this many blocks.
_PREFILL_MIN_PART_TILES, _PREFILL_MAX_PARTS = 8, 4
# Tiles are split where the longest reads at least this many blocks' fair shares.
_PREFILL_SPLIT_MIN_SHARES = 1.5
# The split's workspace holds a state per part of every (sequence, split row, head): at most
# this many floats (64 MB). Each decode row of a mixed step is a sequence of the grid, so
# splitting a long chunk beside 200 of them would take gigabytes (201 x 47 rows: 3 GB).
_PREFILL_SPLIT_MAX_FLOATS = 16 << 20
_DECODE_THREADS = constant("DECODE_THREADS")
_MIN_CHUNK, _MAX_CHUNK = constant("DECODE_MIN_CHUNK"), constant("DECODE_MAX_CHUNK")
_CHUNK_ALIGN = constant("DECODE_CHUNK_ALIGN")
_PLAN_THREADS = constant("DECODE_PLAN_THREADS")
_MIN_BLOCK_SIZE = constant("MIN_BLOCK_SIZE")
_GEMV_WARPS, _GEMV_KERNEL_MAX_ROWS = constant("GEMV_WARPS"), constant("GEMV_MAX_ROWS")
_NORM_ROWS = constant("RMS_NORM_ROWS_PER_BLOCK")
_GEMM_BK, _GEMM_PAD = constant("GEMM_BK"), constant("GEMM_PAD")
_TMA_ROWS, _TMA_COLS, _TMA_CLUSTER = constant("GEMM_TMA_ROWS"), constant("GEMM_TMA_COLS"), constant("GEMM_TMA_CLUSTER")
_TMA_NARROW_COLS, _TMA_PINGPONG_COLS = constant("GEMM_TMA_NARROW_COLS"), constant("GEMM_TMA_PINGPONG_COLS")
# gemm_tma's shared memory: its stages and staged outputs, two mbarriers a stage (the kernel
# asserts they fit in the 64 bytes past TILE_BYTES its stage counts leave), 1 KB to align the tiles.
_TMA_SMEM = constant("GEMM_TMA_TILE_BYTES") + 4 * 16 + 1024
_SMEM_BYTES = 48 * 1024              # the gemv's x' must fit without an opt-in
# Decode attention fetches the cached K/V of batches this small into L2 before it waits on
# the kernel before it (a few hundred KB a layer; at larger batches the step is bandwidth-bound).
_KV_PREFETCH_MAX_ROWS = 8
# attn_decode_few holds a chunk's K rows, and its V rows, in at most this much shared memory
# each (256 keys of 16-bit d=64), so a block of it leaves room for others on its SM.
_FEW_CHUNK_BYTES = 32768


def _float_residual(residual: torch.Tensor | None) -> torch.Tensor | None:
    if residual is not None and residual.dtype != torch.float32:
        raise TypeError("the residual stream is float32")
    return None if residual is None else residual.contiguous()


def _rope_inputs(step) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The step's positions, RoPE table and cache slots as the kernels read them. Checked,
    not converted: they are made that way once a step, and every layer passes them."""
    positions, cos_sin, slots = step.positions, step.cos_sin, step.meta.slot_mapping
    if positions.dtype != torch.int64 or slots.dtype != torch.int64 or cos_sin.dtype != torch.float32:
        raise TypeError("the step's positions and slot_mapping must be int64 and its RoPE table float32")
    if not (positions.is_contiguous() and slots.is_contiguous() and cos_sin.is_contiguous()):
        raise ValueError("the step's positions, slot_mapping and RoPE table must be contiguous")
    return positions, cos_sin, slots


def _gemv_smem(M: int, K: int, norm: bool) -> int:
    """A gemv kernel's dynamic shared memory: x' as floats, and the NORM kernels' norm weight."""
    return (M + norm) * K * 4


def _gemm_smem(tile: GemmTile) -> int:
    """The GEMM kernel's dynamic shared memory at `tile` (cuda_src/gemm.cu)."""
    return tile.shared_bytes(_GEMM_BK, _GEMM_PAD)


def _output(out: torch.Tensor | None, shape: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
    """`out` where the caller gives one (checked: the kernels write it whole, row-major), else
    a new tensor of `shape` in like's dtype and device."""
    if out is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if tuple(out.shape) != tuple(shape) or out.dtype != like.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {like.dtype} {list(shape)} tensor, not {out.dtype} "
                         f"{list(out.shape)}{'' if out.is_contiguous() else ' (strided)'}")
    return out


def _dtype_name(t: torch.Tensor) -> str:
    if t.dtype not in _DTYPES:
        raise TypeError(f"cuda ops support bf16, fp16 and float32 tensors, not {t.dtype}")
    return _DTYPES[t.dtype]


@dataclass
class DecodeWorkList:
    """A decode step's work list on the device (plan_decode), made at the first layer and
    read by every layer's attention launch; sized for any lengths up to the step's maximum."""
    row_plan: torch.Tensor      # [B, 2] int32: keys per chunk, the row's first workspace split
    items: torch.Tensor         # [max_items, 2] int32: (row, chunk << 8 | KV head), longest first
    part_o: torch.Tensor        # [splits, nh, d] float32: partial outputs of split rows
    part_ml: torch.Tensor       # [splits, nh, 2] float32: their (max, sum)
    grid: int                   # persistent blocks: one per slot, at most one per item
    max_chunk: int              # keys per chunk at most (the scores' shared memory)


@dataclass
class FewRowsDecode:
    """A decode step of a few rows without a work list (attn_decode_few): each row's keys in
    `splits` chunks of `chunk` keys at most, a block each; the workspace of their partials."""
    chunk: int                  # keys per chunk
    splits: int                 # chunks a row at most: enough for the step's longest row
    part_o: torch.Tensor        # [B * splits, nh, d] float32
    part_ml: torch.Tensor       # [B * splits, nh, 2] float32


@dataclass(frozen=True)
class PrefillTiles:
    """A prefill step's sequences: new tokens and context lengths. What the prefill kernels'
    grids weigh: the query tiles at each height (prefill_m_tiles), and the K/V tiles each
    reads (prefill_split), worked out once a step and kept."""
    query_lens: np.ndarray
    seq_lens: np.ndarray
    by_m_tiles: dict                                     # m-tiles (64-row units): query tiles
    _splits: dict = field(default_factory=dict, compare=False, repr=False)   # split's answers, by its arguments

    HEIGHTS = (*PREFILL_WG_SHAPES, PREFILL_WS_M_TILES)      # in m-tiles
    _HEIGHT_ROWS = _PREFILL_ROWS_PER_M_TILE * np.array(HEIGHTS)

    @classmethod
    def of_step(cls, query_lens: np.ndarray, seq_lens: np.ndarray) -> "PrefillTiles":
        tiles = (-(-query_lens[:, None] // cls._HEIGHT_ROWS)).sum(0)    # ceil, every height in one pass
        return cls(query_lens, seq_lens, dict(zip(cls.HEIGHTS, tiles.tolist())))

    def key_tiles(self, m_tiles: int) -> tuple[np.ndarray, int]:
        """Per step of the grid's z at this tile height (the z-th tile of every sequence,
        counted from its last), the K/V tiles of BN keys the longest of those query tiles
        reads; and what all the query tiles read together."""
        rows = _PREFILL_ROWS_PER_M_TILE * m_tiles
        n = self.query_lens[:, None]
        tiles = -(-n // rows)                                   # [B, 1]
        ends = np.arange(rows, rows * int(tiles.max()) + 1, rows)   # each tile's last query + 1, if full
        # [B, most tiles]: tile t of each sequence (from its first) reads its context and its
        # queries through its last; 0 past a sequence's tiles. On the grid's z axis tile t sits
        # at (most tiles - 1 - t), so the rows come out reversed.
        reads = -(-(self.seq_lens[:, None] - n + np.minimum(n, ends)) // _PREFILL_KEYS)
        kv_tiles = np.where(ends <= tiles * rows, reads, 0)
        return kv_tiles.max(0)[::-1], int(kv_tiles.sum())

    def split(self, nh: int, m_tiles: int, slots: int) -> tuple[int, int]:
        """(parts, rows): the first `rows` tiles of every sequence in the wgmma prefill grid
        at this tile height (the longest, grid.z's first) take `parts` blocks each, each an
        even share of the tile's keys, on a GPU that runs `slots` such blocks at once;
        (1, 0): nothing is split.

        A block's fair share is every query tile's K/V tiles over the slots (at least
        _PREFILL_MIN_PART_TILES). Where the longest tile reads 1.5 shares or more (a long
        prompt alone), it would set the kernel's time, and the tiles are split into as many
        parts as it needs (at most _PREFILL_MAX_PARTS): only the rows whose tiles read
        more than a share where all the blocks then start at once, else every row, so that
        the grid stays longest first and no long tile starts last; not where the workspace
        would pass _PREFILL_SPLIT_MAX_FLOATS. Measured on the H200,
        attention us a layer (docs/performance.md, session 26): 1 x 3,000 71.6 -> 63.1,
        1 x 4,000 111.5 -> 99.7 (64 rows), 95.2 (128 rows); 1 x 6,000, whose longest tile
        reads 1.2 shares, 170 -> 183 split, so it is not. Worked out once a step (every layer asks)."""
        if (nh, m_tiles, slots) not in self._splits:
            self._splits[nh, m_tiles, slots] = self._split(nh, m_tiles, slots)
        return self._splits[nh, m_tiles, slots]

    def blocks(self, nh: int, m_tiles: int, slots: int) -> int:
        """The prefill grid's blocks at this tile height, split as `split` plans for `slots`."""
        parts, rows = self.split(nh, m_tiles, slots)
        return nh * (self.by_m_tiles[m_tiles] + rows * (parts - 1))

    def _split(self, nh: int, m_tiles: int, slots: int) -> tuple[int, int]:
        key_tiles, total = self.key_tiles(m_tiles)
        share = max(_PREFILL_MIN_PART_TILES, math.ceil(nh * total / slots))
        longest = int(key_tiles.max())
        if longest < _PREFILL_SPLIT_MIN_SHARES * share:
            return 1, 0
        parts = min(_PREFILL_MAX_PARTS, math.ceil(longest / share))
        longer = int(np.flatnonzero(key_tiles > share)[-1]) + 1
        one_wave = nh * (self.by_m_tiles[m_tiles] + longer * (parts - 1)) <= slots
        rows = longer if one_wave else len(key_tiles)
        if _split_state_floats(len(self.query_lens), rows, nh, parts, m_tiles) > _PREFILL_SPLIT_MAX_FLOATS:
            return 1, 0
        return parts, rows


def _kept_buffer(buffers: list[torch.Tensor], n: int, make) -> torch.Tensor:
    """The newest of `buffers` if it holds n elements, else a new one from make(), appended:
    older ones stay alive, as captured CUDA graphs hold their addresses."""
    if not buffers or buffers[-1].numel() < n:
        buffers.append(make())
    return buffers[-1]


def _split_state_floats(sequences: int, rows: int, nh: int, parts: int, m_tiles: int, d: int = 64) -> int:
    """The split prefill kernel's workspace: o, m and l (d/2 + 4 floats) a thread of every
    part of every (sequence, split row, head) block (cuda_src/attention_prefill.cu)."""
    return sequences * rows * nh * parts * (d // 2 + 4) * 128 * m_tiles


def _prefill_wg_smem(m_tiles: int, d: int) -> int:
    """The wgmma prefill kernel's shared memory: Q, 2 stages of K and V; 1 KB for alignment."""
    return (_PREFILL_ROWS_PER_M_TILE * m_tiles + 2 * 2 * _PREFILL_KEYS) * d * 2 + 1024


def _prefill_ws_smem(m_tiles: int, keys: int = _PREFILL_KEYS) -> int:
    """The warp-specialized prefill kernel's (d = 64) at `keys` a K/V tile: Q, its stages of K
    and V, a full and an empty mbarrier a stage; 1 KB for alignment."""
    return (m_tiles * _PREFILL_ROWS_PER_M_TILE + _PREFILL_WS_STAGES * 2 * keys) * 64 * 2 \
        + _PREFILL_WS_STAGES * 2 * 8 + 1024


def gemm_tma_pairs(M: int, N: int, cols: int) -> int:
    """gemm_tma's work items: pairs of 128-row tiles (a cluster's) by tiles of `cols` outputs."""
    return math.ceil(M / (_TMA_CLUSTER * _TMA_ROWS)) * math.ceil(N / cols)


def gemm_tma_width(M: int, N: int, num_sms: int, silu: bool = False) -> int:
    """gemm_tma's tile width (W rows) for [M, K] x [N, K]^T (silu: N outputs of the fused
    gate|up, W's 2N rows): the one whose rounds of tiles over the SMs add up to the fewest W
    rows (a round takes about as long as a tile, in proportion to its width); 256 on a tie.
    Plain: 192 where 256 would waste columns (N = 576) or leave a last round mostly idle.
    Silu: the ping-pong tiles (128) where the cooperative ones (256, half the x loads an
    output) would leave a round mostly idle."""
    clusters, outputs_per_row = num_sms // _TMA_CLUSTER, 2 if silu else 1
    return min((_TMA_COLS, _TMA_PINGPONG_COLS if silu else _TMA_NARROW_COLS),
               key=lambda width: math.ceil(gemm_tma_pairs(M, N, width // outputs_per_row) / clusters) * width)


class CudaOps(Ops):
    name = "cuda"
    supports_graphs = True     # every launch goes to torch's current stream, the capture's included

    def __init__(self, config: EngineConfig | None = None):
        """`config`: the engine's; None gives the defaults (with their environment overrides),
        for kernels used outside an LLM: kernel tests, benchmarks/kernel_bench.py, the health check."""
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
        self._smem_per_block = device.get_attribute(drv.device_attribute.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
        # The decode work list's chunk size (see plan_decode); benchmarks/kernel_bench.py sweeps it.
        self.decode_slack = config.decode_slack
        self.decode_few_rows, self.decode_few_chunk = config.decode_few_rows, config.decode_few_chunk
        self.forced_m_tiles = config.prefill_m_tiles
        arch = cuda_build.arch_of(major, minor)
        self.prefill_wgmma = config.prefill_wgmma and arch == "sm_90a"
        # Tall tiles: 192 rows in the warp-specialized kernel, else 128 (in 64-row units).
        self.prefill_ws = self.prefill_wgmma and config.prefill_ws
        self.tall_m_tiles = PREFILL_WS_M_TILES if self.prefill_ws else 2
        self.prefill_ws_keys = config.prefill_ws_keys
        self.gemv_max_rows = config.gemv_max_rows
        self.gemm_max_rows = config.gemm_max_rows
        self.prefill_gemm_tma = config.prefill_gemm_tma if arch == "sm_90a" else "off"
        self.silu_width = config.prefill_silu_width
        try:
            cubins = cuda_build.build_all(arch)
        except RuntimeError as e:
            raise RuntimeError(f"CudaOps: compiling cuda_src failed: {e}") from e
        self.launcher = cuda_build.Launcher(torch.cuda.current_device(), debug=config.cuda_debug)
        mods = {stem: self.launcher.load(path) for stem, path in cubins.items()}
        self._k = {spec.key: mods[spec.source].kernel(spec.name, spec.signature) for spec in KERNELS}
        # The GEMM tiles this device runs (wgmma needs sm_90a's features), and the blocks an
        # SM holds of each (the f16 kernels are the bf16 ones' code): shared memory runs out.
        self.gemm_tiles = [t for t in GEMM_TILES if t.unit == "mma" or arch == "sm_90a"]
        self._gemm_blocks = {tile: self._k["gemm", "bf16", tile].blocks_per_sm(128, _gemm_smem(tile))
                             for tile in self.gemm_tiles}
        # Blocks of the wgmma prefill kernel the GPU runs at once, at each tile height (see
        # prefill_split), and the split tiles' partial states: one buffer for all launches (they
        # are ordered); a larger split gets a new one, and old ones stay alive because captured
        # CUDA graphs (engine.prefill_graphs' whole steps) hold their addresses.
        self._prefill_slots = {mt: self.num_sms * self._k["prefill_wg", "bf16", 64, mt, True].blocks_per_sm(
            128 * mt, _prefill_wg_smem(mt, 64)) for mt in PREFILL_WG_SHAPES} if self.prefill_wgmma else {}
        ws_slots = {mt: self._ws_slots(mt) for mt in PREFILL_WS_SHAPES} if self.prefill_ws else {}
        if self.prefill_ws:
            self._prefill_slots[PREFILL_WS_M_TILES] = ws_slots[PREFILL_WS_M_TILES]
        # The warp-specialized kernel's 64-row slots, where it may take short queries' tiles (prefill_short_ws).
        self._short_ws_slots = ws_slots.get(1, 0) if config.prefill_ws_short else 0
        self._prefill_partials: list[torch.Tensor] = []
        # Decode attention's per-(sequence, KV head) split counters. Kernels leave them
        # zero; a larger batch gets a new buffer, and old ones stay alive because
        # captured CUDA graphs hold their addresses.
        self._split_counters: list[torch.Tensor] = []
        # The decode work queue: next item, blocks finished (both left zero by every
        # launch), item count (written by each plan). One for all launches: they are ordered
        # on the stream, and captured graphs hold its address.
        self.work_queue = torch.zeros(3, dtype=torch.int32, device="cuda")

    def plan_step(self, query_lens, seq_lens, query_starts=None) -> PrefillTiles | None:
        """A step with prefill: its query tiles at each prefill tile height. Nothing else:
        the kernels read the lengths and where the queries start on the device (and decode
        plans there, see plan_decode)."""
        query_lens = np.asarray(query_lens, np.int64)
        if len(query_lens) == 0 or query_lens.max() <= 1:
            return None
        return PrefillTiles.of_step(query_lens, np.asarray(seq_lens, np.int64))

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
            self._k["rms_norm", _dtype_name(x)](math.ceil(rows / _NORM_ROWS), 32 * _NORM_ROWS, x, residual, weight,
                                                out, r, rows, H, float(eps))
        return out, r

    # ------------------------------------------------------------ linear layers
    # A linear layer of a row or two (decode of one or two sequences) runs in our gemv
    # kernels, with the elementwise op before it (RMSNorm, SiLU-and-mul) fused in front; up to
    # gemm_max_rows in our tensor-core GEMM (cuda_src/gemm.cu) after the op's own kernel, so
    # the programmatic edges of a CUDA graph join every kernel; past it (prefill) the
    # separate ops and cuBLAS.

    def _gemv_fits(self, x: torch.Tensor, weight: torch.Tensor, K: int, norm: bool = False) -> bool:
        return (x.dim() == 2 and x.shape[0] <= min(self.gemv_max_rows, _GEMV_KERNEL_MAX_ROWS)
                and x.dtype == weight.dtype
                and x.dtype in (torch.bfloat16, torch.float16) and weight.shape[1] == K and K % 8 == 0
                and _gemv_smem(x.shape[0], K, norm) <= _SMEM_BYTES)

    def _gemv(self, kind: str, x: torch.Tensor, weight: torch.Tensor, K: int, between=(), after=(),
              out: torch.Tensor | None = None) -> torch.Tensor:
        """Launch a gemv kernel: its arguments are x, `between`, W, y (`out` where given), M, N, K, `after`."""
        M, N = x.shape[0], weight.shape[0]
        y = _output(out, (M, N), x)
        if M:
            self._k[kind, _dtype_name(x)](math.ceil(N / _GEMV_WARPS), 32 * _GEMV_WARPS, x.contiguous(), *between,
                                          weight.contiguous(), y, M, N, K, *after,
                                          shared=_gemv_smem(M, K, kind == "gemv_norm"))
        return y

    def _gemm_tile_for(self, x: torch.Tensor, weight: torch.Tensor) -> GemmTile | None:
        """The tile our GEMM takes x @ weight^T at, or None where it does not take them."""
        K = x.shape[-1]
        fits = (x.dim() == 2 and x.shape[0] <= self.gemm_max_rows and x.dtype == weight.dtype
                and x.dtype in (torch.bfloat16, torch.float16) and weight.shape[1] == K
                and K % _GEMM_BK == 0 and weight.shape[0] % 8 == 0
                and x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0)   # 16-byte copies
        return self.gemm_tile(x.shape[0], weight.shape[0], K) if fits else None

    def gemm_tile(self, M: int, N: int, K: int) -> GemmTile | None:
        """The tile of an M x N x K GEMM (None: none fits in shared memory). These GEMMs take
        a few µs of round trips to memory, so their time goes as the waves of blocks the GPU
        runs one after another times the K chunks each block walks: the fewest waves, then
        the fewest chunks a block, then the smallest tile (the fewest padded rows). On the
        session-22 sweep of 24 decode shapes this rule's picks took 1.02x the best tile's
        time on average (docs/performance.md)."""
        def cost(tile):
            blocks = math.ceil(M / tile.rows) * math.ceil(N / tile.cols) * tile.split
            waves = math.ceil(blocks / (self.num_sms * self.gemm_blocks_per_sm(tile)))
            return waves, math.ceil(K // _GEMM_BK / tile.split), tile.rows * tile.cols
        fitting = [t for t in self.gemm_tiles if _gemm_smem(t) <= self._smem_per_block]
        return min(fitting, key=cost) if fitting else None

    def gemm_blocks_per_sm(self, tile: GemmTile) -> int:
        """How many blocks of `tile` an SM holds at once."""
        return self._gemm_blocks[tile]

    def gemm(self, x: torch.Tensor, weight: torch.Tensor, tile: GemmTile | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
        """x [M, K] @ weight [N, K]^T in our GEMM kernel at `tile` (default: gemm_tile), into `out`
        where given."""
        (M, K), N = x.shape, weight.shape[0]
        y = _output(out, (M, N), x)
        if M and N:
            tile = tile or self.gemm_tile(M, N, K)
            self._k["gemm", _dtype_name(x), tile](
                (math.ceil(M / tile.rows), math.ceil(N / tile.cols), tile.split), 128, x.contiguous(),
                weight.contiguous(), y, M, N, K, shared=_gemm_smem(tile))
        return y

    def _gemm_tma_fits(self, x: torch.Tensor, weight: torch.Tensor, silu: bool = False) -> bool:
        """Whether gemm_tma takes x @ weight^T (silu: silu_and_mul of it, weight = gate | up):
        in the config's scope, a prefill-sized x whose tiles give every SM one at least (decode
        batches keep the narrower tiles of our GEMM or cuBLAS, which spread the weights over
        more SMs), 16-bit, in the kernel's shapes, rows 16-byte aligned (the TMA unit's rule)."""
        if self.prefill_gemm_tma != "all" and not (silu and self.prefill_gemm_tma == "mlp"):
            return False
        K, N = x.shape[-1], weight.shape[0] // (2 if silu else 1)
        cols = _TMA_COLS // (2 if silu else 1)
        return (x.dim() == 2 and x.dtype == weight.dtype
                and x.dtype in (torch.bfloat16, torch.float16) and weight.shape[1] == K and K % _GEMM_BK == 0
                and N % (cols if silu else 8) == 0 and x.stride() == (K, 1) and weight.is_contiguous()
                and x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0
                and math.ceil(x.shape[0] / _TMA_ROWS) * math.ceil(N / cols) >= self.num_sms)

    def gemm_tma(self, x: torch.Tensor, weight: torch.Tensor, silu: bool = False,
                 width: int | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [M, K] @ weight [N, K]^T in gemm_tma (cuda_src/gemm_tma.cu); silu: weight is the
        fused [gate; up] projection [2I, K] and the result silu_and_mul's, [M, I], rounded as
        the two ops round it. `width`: W rows a tile, plain 256 or 192 (by default
        gemm_tma_width's), silu 128 (ping-pong, the default) or 256 (cooperative). Into `out`
        where given."""
        (M, K), N = x.shape, weight.shape[0] // (2 if silu else 1)
        y = _output(out, (M, N), x)
        if M and N:
            dt = _dtype_name(x)
            if silu:
                width = width or _TMA_PINGPONG_COLS
            else:
                width = width or gemm_tma_width(M, N, self.num_sms)
            kind = GEMM_TMA_KINDS.get((silu, width))
            if kind is None:
                widths = sorted(w for s, w in GEMM_TMA_KINDS if s == silu)
                raise ValueError(f"gemm_tma has {'silu' if silu else 'plain'} tiles of {widths} W rows, not {width}")
            cols = width // (2 if silu else 1)                          # outputs a tile
            x_map = swizzled_rows_map(x.data_ptr(), M, K, dt, _TMA_ROWS)
            # Each block of a cluster loads half of the tile's W rows.
            w_map = swizzled_rows_map(weight.data_ptr(), weight.shape[0], K, dt, width // _TMA_CLUSTER)
            y_map = swizzled_rows_map(y.data_ptr(), M, N, dt, 64)   # the boxes a warpgroup stores
            # Persistent: no more clusters than run at once, a pair of blocks (one an SM) each.
            # 384 threads: a loading warpgroup and two multiplying ones.
            clusters = min(gemm_tma_pairs(M, N, cols), self.num_sms // _TMA_CLUSTER)
            self._k["gemm_tma", dt, kind](clusters * _TMA_CLUSTER, 384, x_map, w_map, y_map, M, N, K,
                                           shared=_TMA_SMEM)
        return y

    def linear(self, x, weight, out=None):
        K = x.shape[-1]
        if self._gemv_fits(x, weight, K):
            return self._gemv("gemv_plain", x, weight, K, out=out)
        if tile := self._gemm_tile_for(x, weight):
            return self.gemm(x, weight, tile, out)
        if self._gemm_tma_fits(x, weight):
            return self.gemm_tma(x, weight, out=out)
        return super().linear(x, weight, out)

    def mlp_block(self, x, residual, layer, step):
        if not self._gemm_tma_fits(x, layer.gate_up, silu=True):
            return super().mlp_block(x, residual, layer, step)
        normed, residual = self.rms_norm(x, layer.ffn_norm, step.shape.rms_norm_eps, residual)
        M, N = normed.shape[0], layer.gate_up.shape[0] // 2
        width = self.silu_width or gemm_tma_width(M, N, self.num_sms, silu=True)
        gated = self.gemm_tma(normed, layer.gate_up, silu=True, width=width)
        return self.linear(gated, layer.down), residual

    def norm_linear(self, x, residual, norm_weight, eps, weight, out=None):
        K = x.shape[-1]
        residual = _float_residual(residual)
        if not self._gemv_fits(x, weight, K, norm=True):
            return super().norm_linear(x, residual, norm_weight, eps, weight, out)
        r = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        return self._gemv("gemv_norm", x, weight, K, (residual, norm_weight.contiguous(), r), (float(eps),), out), r

    def silu_linear(self, x, weight):
        K = x.shape[-1] // 2
        if self._gemv_fits(x, weight, K):
            return self._gemv("gemv_silu", x, weight, K)
        return super().silu_linear(x, weight)

    def attention_inputs(self, x, residual, layer, kv_cache, step, qkv_out=None):
        s = step.shape
        nh, nkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        if not self._gemv_fits(x, layer.qkv, x.shape[-1], norm=True) or layer.qkv.shape[0] != (nh + 2 * nkv) * d:
            return super().attention_inputs(x, residual, layer, kv_cache, step, qkv_out)
        M, K = x.shape
        k_cache, v_cache = kv_cache
        r = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        y = _output(qkv_out, (M, layer.qkv.shape[0]), x)
        tasks = (nh + nkv) * d // 2 + nkv * d
        if M:
            positions, cos_sin, slots = _rope_inputs(step)
            self._k["gemv_qkv_rope", _dtype_name(x)](
                math.ceil(tasks / _GEMV_WARPS), 32 * _GEMV_WARPS, x.contiguous(), _float_residual(residual),
                layer.attn_norm.contiguous(), r,
                layer.qkv.contiguous(), y, M, K, float(s.rms_norm_eps), positions, cos_sin, k_cache, v_cache,
                slots, nh, nkv, d, shared=_gemv_smem(M, K, norm=True))
        return y[:, :nh * d].view(M, nh, d), r

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
            if t.data_ptr() % 16 or t.stride(0) % 8:
                raise ValueError("rope_and_cache moves 16-byte vectors: q, k and v rows must be 16-byte aligned")
        if d % 16:
            raise ValueError(f"rope_and_cache needs a head dim that is a multiple of 16, not {d}")
        if T:
            positions, cos_sin, slots = _rope_inputs(step)
            items = T * ((nh + nkv) * d // 16 + nkv * d // 8)    # a thread each: see cuda_src/rope_cache.cu
            self._k["rope", _dtype_name(q)](math.ceil(items / 256), 256, q, k, v, positions, cos_sin, k_cache,
                                            v_cache, slots, nh, nkv, d, q.stride(0), k.stride(0), v.stride(0), items)

    def attention_block(self, x, residual, layer, kv_cache, step):
        s, meta = step.shape, step.meta
        nh, nkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        if (meta.max_query_len != 1 or self._gemv_fits(x, layer.qkv, x.shape[-1], norm=True)
                or layer.qkv.shape[0] != (nh + 2 * nkv) * d):
            # Prefill, or a decode batch small enough for the gemv kernel that fuses RoPE itself.
            return super().attention_block(x, residual, layer, kv_cache, step)
        # Decode: RoPE and the new k, v's cache write happen inside the attention kernel
        # (one launch a layer fewer: rope_and_cache was 3.3 us of a B=256 layer).
        qkv, residual = self.norm_linear(x, residual, layer.attn_norm, s.rms_norm_eps, layer.qkv)
        q = qkv[:, :nh * d].view(qkv.shape[0], nh, d)
        rope = _rope_inputs(step)
        attn = self._attention(q, *kv_cache, meta, s.scale, rope)
        return self.linear(attn.flatten(1), layer.o), residual

    def attention(self, q, kv_cache, step, out=None):
        return self._attention(q, *kv_cache, step.meta, step.shape.scale, out=out)

    def _attention(self, q, k_cache, v_cache, meta, scale, rope=None, out=None):
        """attention(); with rope = (positions, cos_sin, slot_mapping), decode only: q is
        the q part of the packed, unrotated q|k|v rows, and the kernel rotates q and k
        and writes k, v into the cache first."""
        T, nh, d = q.shape
        nkv, bs = k_cache.shape[2], k_cache.shape[1]
        if rope is None and (q.stride(2) != 1 or q.stride(1) != d):
            q = q.contiguous()
        if out is None:
            out = torch.empty((T, nh, d), dtype=q.dtype, device=q.device)
        elif out.shape != (T, nh, d) or out.dtype != q.dtype or not out.is_contiguous():
            raise ValueError(f"attention's out must be a contiguous {q.dtype} [{T}, {nh}, {d}] tensor")
        B = meta.seq_lens.shape[0]
        if T == 0 or B == 0:
            return out
        dt = _dtype_name(q)
        if d not in (64, 128):
            raise ValueError(f"cuda attention supports head_dim 64 and 128, not {d}")
        if bs < _MIN_BLOCK_SIZE or bs & (bs - 1):
            raise ValueError(f"cuda attention needs KV blocks of a power of two >= {_MIN_BLOCK_SIZE} tokens, not {bs}")
        if meta.max_query_len == 1:
            self._decode(q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs, rope=rope)
        else:
            self._prefill(q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs)
        return out

    def prefill_m_tiles(self, meta, nh: int, d: int, wgmma: bool) -> int:
        """The prefill tile's height in 64-row units: 16-row m-tiles per warp of the mma.sync
        kernel, computing warpgroups of the wgmma ones. Tall tiles (two, 128 queries; three,
        192, in the warp-specialized kernel, tall_m_tiles) reuse each K/V tile more, but make
        fewer blocks: they are taken where a query is longer than _PREFILL_TALL_MIN_QUERY and
        the blocks fill the GPU: every slot of the wgmma kernel's once (prefill_split balances
        what is left), of the mma.sync kernel's twice over. Fewer, and the longest tile sets
        the time."""
        if self.forced_m_tiles:
            ws = self.forced_m_tiles == PREFILL_WS_M_TILES and wgmma and self.prefill_ws
            if (d, self.forced_m_tiles) not in PREFILL_SHAPES and not ws:
                raise ValueError(f"the prefill kernel has no {self.forced_m_tiles} m-tiles shape for head dim {d}")
            return self.forced_m_tiles
        if (d, 2) not in PREFILL_SHAPES or meta.max_query_len <= _PREFILL_TALL_MIN_QUERY:
            return 1
        mt = self.tall_m_tiles if wgmma else 2
        tiles = meta.plan.by_m_tiles[mt] if isinstance(meta.plan, PrefillTiles) else \
            meta.seq_lens.shape[0] * math.ceil(meta.max_query_len / (mt * _PREFILL_ROWS_PER_M_TILE))  # a bound
        slots = self._prefill_slots[mt] if wgmma else 2 * self.num_sms * _PREFILL_BLOCKS_PER_SM
        return mt if nh * tiles >= slots else 1

    def prefill_short_ws(self, meta, nh: int) -> bool:
        """Whether the step's 64-row tiles go to the warp-specialized kernel (a loading warpgroup
        and a computing one, two blocks an SM), not to attn_prefill_wgmma (four blocks an SM of
        one warpgroup that loads and computes): where all its blocks, split as planned for its
        slots, run in one wave, as a lone prompt's of up to ~1,000 tokens at 9 heads on 132 SMs.
        There each block's load latency sets the time, and the loading warpgroup hides it; past
        one wave, four computing warpgroups an SM do more. Attention µs a layer on the H100
        (session 33, docs/performance.md): 1 x 1,000 (216 blocks) 15.9 against 20.4-21.8; but
        1 x 1,500 (648 blocks, 2.5 waves) 27.2 against 24.8, and 64 x 1,000 66.5 against 58.3.
        Forced 64-row tiles (prefill_m_tiles = 1: tests, sweeps) take it always."""
        if not self._short_ws_slots:
            return False
        if self.forced_m_tiles:
            return True
        plan = meta.plan
        return isinstance(plan, PrefillTiles) and plan.blocks(nh, 1, self._short_ws_slots) <= self._short_ws_slots

    def _prefill_kernel(self, meta, nh: int, m_tiles: int) -> tuple[bool, int]:
        """Whether the wgmma prefill at this tile height runs in the warp-specialized kernel,
        and how many of its blocks the GPU runs at once."""
        if m_tiles == 1 and self.prefill_short_ws(meta, nh):
            return True, self._short_ws_slots
        return m_tiles == PREFILL_WS_M_TILES, self._prefill_slots[m_tiles]

    def prefill_split(self, meta, nh: int, m_tiles: int) -> tuple[int, int]:
        """How the wgmma prefill kernel splits the step's tiles (PrefillTiles.split) on this
        GPU; (1, 0) where nothing is planned."""
        return self._split_for(meta, nh, m_tiles, self._prefill_kernel(meta, nh, m_tiles)[1])

    def _split_for(self, meta, nh: int, m_tiles: int, slots: int) -> tuple[int, int]:
        """prefill_split for the kernel that runs `slots` blocks at once."""
        plan = meta.plan
        if not isinstance(plan, PrefillTiles) or not self.prefill_wgmma:
            return 1, 0
        return plan.split(nh, m_tiles, slots)

    def _prefill(self, q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs):
        # The wgmma kernel copies q's rows into shared memory 16 bytes at a time: they must be aligned so.
        wgmma = self.prefill_wgmma and dt != "f32" and d == 64 and q.stride(0) % 8 == 0 and q.data_ptr() % 16 == 0
        mt = self.prefill_m_tiles(meta, nh, d, wgmma)
        tiles = math.ceil(meta.max_query_len / (_PREFILL_ROWS_PER_M_TILE * mt))
        args = (q, q.stride(0), k_cache, v_cache, meta.block_tables, meta.block_tables.shape[1], meta.seq_lens,
                meta.query_start_loc, out, nh, nkv, bs, float(scale * math.log2(math.e)))
        if wgmma:
            ws, slots = self._prefill_kernel(meta, nh, mt)
            parts, rows = self._split_for(meta, nh, mt, slots)
            partials = counters = None
            if parts > 1:
                partials = self._partials(_split_state_floats(B, rows, nh, parts, mt, d))
                counters = self._counters(B * rows * nh, q.device)
            grid = (nh, B, tiles + rows * (parts - 1))
            if ws:     # a loading warpgroup and mt computing ones
                kernel, smem = self._ws_kernel(dt, mt, parts > 1)
                kernel(grid, 128 * (mt + 1), *args, rows, parts, partials, counters, shared=smem)
            else:
                self._k["prefill_wg", dt, d, mt, parts > 1](grid, 128 * mt, *args, rows, parts, partials, counters,
                                                            shared=_prefill_wg_smem(mt, d))
        else:
            self._k["prefill", dt, d, mt]((nh, B, tiles), 128, *args,
                                          shared=2 * 2 * _PREFILL_KEYS * (d + _PREFILL_PAD) * 2)  # K, V; 2 stages

    def _ws_kernel(self, dt: str, m_tiles: int, split: bool):
        """The warp-specialized prefill kernel at this tile height, and its shared memory: the
        tall tiles' at prefill_ws_keys keys a K/V tile, the short ones' at 64."""
        if m_tiles == PREFILL_WS_M_TILES and self.prefill_ws_keys != _PREFILL_KEYS:
            return self._k["prefill_ws128", dt, split], _prefill_ws_smem(m_tiles, self.prefill_ws_keys)
        return self._k["prefill_ws", dt, m_tiles, split], _prefill_ws_smem(m_tiles)

    def _ws_slots(self, m_tiles: int) -> int:
        """Blocks of the warp-specialized kernel at this tile height that the GPU runs at once."""
        kernel, smem = self._ws_kernel("bf16", m_tiles, True)
        return self.num_sms * kernel.blocks_per_sm(128 * (m_tiles + 1), smem)

    def _partials(self, n: int) -> torch.Tensor:
        return _kept_buffer(self._prefill_partials, n, lambda: torch.empty(n, dtype=torch.float32, device="cuda"))

    def plan_decode(self, meta, dt: str, nh: int, nkv: int, d: int) -> DecodeWorkList:
        """Launch plan_decode for the step of `meta`; its work list. The buffers are sized
        from the batch and its longest row (in a CUDA graph: max_model_len), which bound
        the chunks: each holds at least MIN_CHUNK keys, or the even share of a slot times
        the slack, or MAX_CHUNK when that share is larger. A slot is a block the GPU runs
        at once of the kernel that will take the list: its registers set how many an SM
        holds, then its shared memory for the chunks planned (which may hold fewer)."""
        B, max_len = meta.seq_lens.shape[0], meta.max_seq_len
        if nkv > 255:
            raise ValueError(f"cuda decode attention packs the KV head into 8 bits; {nkv} KV heads do not fit")
        kernel = self._decode_kernel(dt, d, nh // nkv)
        slots = self.num_sms * kernel.blocks_per_sm(_DECODE_THREADS)
        share = math.ceil(nkv * B * max_len * self.decode_slack / slots)
        max_chunk = min(_MAX_CHUNK, _CHUNK_ALIGN * math.ceil(max(_MIN_CHUNK, min(share, max_len)) / _CHUNK_ALIGN))
        slots = self.num_sms * kernel.blocks_per_sm(_DECODE_THREADS, nh // nkv * max_chunk * 4)
        splits = min(B * math.ceil(max_len / _MIN_CHUNK),
                     B + max(math.ceil(slots / nkv), B * math.ceil(max_len / max_chunk)))
        dev = meta.seq_lens.device
        work = DecodeWorkList(
            row_plan=torch.empty((B, 2), dtype=torch.int32, device=dev),
            items=torch.empty((splits * nkv, 2), dtype=torch.int32, device=dev),
            part_o=torch.empty((splits, nh, d), dtype=torch.float32, device=dev),
            part_ml=torch.empty((splits, nh, 2), dtype=torch.float32, device=dev),
            grid=min(slots, splits * nkv), max_chunk=max_chunk)
        self._k["plan_decode"](1, _PLAN_THREADS, meta.seq_lens, B, nkv, slots, float(self.decode_slack), max_chunk,
                               work.row_plan, work.items, self.work_queue)
        return work

    def plan_few_decode(self, meta, dt: str, nh: int, nkv: int, d: int) -> FewRowsDecode | None:
        """The step of `meta` without a work list, where it takes one: at most decode_few_rows
        rows, and a block for every chunk of every row fits on the GPU at once. A row is cut
        into as many chunks as its longest possible length (in a CUDA graph: max_model_len)
        needs for each chunk's K/V rows to fit a block's shared memory; the chunks past a
        shorter row's end exit at once."""
        B = meta.seq_lens.shape[0]
        if B > self.decode_few_rows:
            return None
        chunk = min(self.decode_few_chunk, _FEW_CHUNK_BYTES // (d * _ELEMENT_BYTES[dt]))
        splits = math.ceil(meta.max_seq_len / chunk)
        kernel = self._decode_kernel(dt, d, nh // nkv, "decode_few")
        smem = self._few_smem(dt, d, chunk, nh // nkv)
        if B * nkv * splits > self.num_sms * kernel.blocks_per_sm(_DECODE_THREADS, smem):
            return None
        dev = meta.seq_lens.device
        return FewRowsDecode(chunk=chunk, splits=splits,
                             part_o=torch.empty((B * splits, nh, d), dtype=torch.float32, device=dev),
                             part_ml=torch.empty((B * splits, nh, 2), dtype=torch.float32, device=dev))

    @staticmethod
    def _few_smem(dt: str, d: int, chunk: int, G: int) -> int:
        """attn_decode_few's dynamic shared memory: a chunk of K rows, one of V rows, G x chunk scores."""
        return chunk * (2 * d * _ELEMENT_BYTES[dt] + 4 * G)

    def _decode_kernel(self, dt: str, d: int, G: int, kind: str = "decode"):
        if G not in DECODE_GROUPS:
            raise ValueError(f"cuda decode attention is built for {DECODE_GROUPS} query heads per KV head, not {G}")
        return self._k[kind, dt, d, G]

    def _decode(self, q, k_cache, v_cache, meta, scale, out, dt, B, nh, nkv, d, bs, rope=None):
        G = nh // nkv
        if meta.device_plan is None:      # the step's first layer plans for all of them
            meta.device_plan = (self.plan_few_decode(meta, dt, nh, nkv, d)
                                or self.plan_decode(meta, dt, nh, nkv, d))
        plan = meta.device_plan
        args = (q, q.stride(0), k_cache, v_cache, meta.block_tables, meta.block_tables.shape[1], meta.seq_lens,
                meta.query_start_loc, out, plan.part_o, plan.part_ml, self._counters(B * nkv, q.device), nh, nkv,
                bs, float(scale), *(rope or (None, None, None)))
        if isinstance(plan, FewRowsDecode):
            self._decode_kernel(dt, d, G, "decode_few")((plan.splits, nkv, B), _DECODE_THREADS, *args, plan.chunk,
                                                        int(not meta.step_wrote_keys),
                                                        shared=self._few_smem(dt, d, plan.chunk, G))
        else:
            self._decode_kernel(dt, d, G)(
                plan.grid, _DECODE_THREADS, *args, plan.row_plan, plan.items, self.work_queue,
                B if B <= _KV_PREFETCH_MAX_ROWS else 0, shared=G * plan.max_chunk * 4)

    def _counters(self, n: int, device) -> torch.Tensor:
        return _kept_buffer(self._split_counters, n,
                            lambda: torch.zeros(max(n, 4096), dtype=torch.int32, device=device))

    def silu_and_mul(self, x):
        x = x.contiguous()
        I = x.shape[-1] // 2
        if I % 8:
            raise ValueError(f"cuda silu_and_mul needs the intermediate size to be a multiple of 8, not {I}")
        out = torch.empty((*x.shape[:-1], I), dtype=x.dtype, device=x.device)
        chunks = out.numel() // 8
        if chunks:
            self._k["silu", _dtype_name(x)](math.ceil(chunks / 256), 256, x, out, I, chunks)
        return out

    def take_pending_tokens(self, token_ids, source_rows, previous):
        for t in (token_ids, source_rows, previous):
            if t.dtype != torch.int64 or not t.is_contiguous():
                raise TypeError("take_pending_tokens expects contiguous int64 tensors")
        n = token_ids.shape[0]
        if n:
            self._k["take_pending"](math.ceil(n / 256), 256, token_ids, source_rows, previous, n)

    def sample(self, logits, sampling: SamplingTensors, out=None):
        logits = logits.contiguous()
        B, V = logits.shape
        if out is None:
            out = torch.empty(B, dtype=torch.int64, device=logits.device)
        elif out.shape != (B,) or out.dtype != torch.int64 or not out.is_contiguous():
            raise ValueError(f"sample's out must be a contiguous int64 tensor of {B} tokens")
        if B:
            self._k["sample", _dtype_name(logits)](
                B, 1024, logits, V, sampling.temperature.float().contiguous(), sampling.top_k.int().contiguous(),
                sampling.top_p.float().contiguous(), sampling.seeds.long().contiguous(),
                sampling.counters.long().contiguous(), out, int(sampling.all_greedy))
        return out
