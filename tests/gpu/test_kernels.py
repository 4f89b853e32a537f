"""Every CUDA kernel against the torch reference ops, on fresh random inputs.

Outputs are poisoned with NaN before each run (in-place outputs directly; the
ops' own allocations by parking a NaN-filled block of the same size in torch's
caching allocator), so an unwritten element shows up as NaN or as a mismatch.
"""
import dataclasses
import math
import os

import pytest
import torch

from engine.model import rope_cos_sin
from engine.config import EngineConfig
from engine.model_config import ModelConfig
from engine.ops.base import NO_TOKEN, AttentionMetadata, LayerShape, LayerWeights, Ops, SamplingTensors, Step
from engine.ops.cuda_ops import _DTYPES
from engine.ops.kernel_table import GEMM_TILES
from engine.ops.torch_ops import TorchOps
from tests.sampling_support import no_token_logits, sampling_tensors

pytestmark = pytest.mark.gpu
os.environ.setdefault("ROADGATE_CUDA_DEBUG", "1")  # synchronize + check after every launch
REF = TorchOps()
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.fixture(scope="module")
def ops():
    from engine.ops import cuda_unavailable_reason
    reason = cuda_unavailable_reason()
    if reason:
        pytest.skip(reason)
    from engine.ops.cuda_ops import CudaOps
    return CudaOps()


@pytest.fixture(scope="module")
def ops_all_gemv_rows(ops):
    """The gemv kernels at their whole range of rows, not only where they pay; our GEMM
    past them up to 256 rows."""
    from engine.ops.cuda_ops import CudaOps
    return CudaOps(EngineConfig.from_env(model="", backend="cuda", gemv_max_rows=8, gemm_max_rows=256))


@pytest.fixture(autouse=True)
def _seed(request):
    torch.manual_seed(hash(request.node.name) % (1 << 31))


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    assert not torch.isnan(out).any(), "NaN in output (unwritten element or bad arithmetic)"
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def poison_next(shape, dtype):
    """Leave a freed NaN block of this size for the op's next torch.empty to reuse."""
    t = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    del t


def tol(dtype):
    return 1e-5 if dtype == torch.float32 else 1e-2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,V,H", [(1, 49152, 576), (257, 49152, 576), (33, 1000, 63)])
def test_embed(ops, dtype, T, V, H):
    w = torch.randn(V, H, dtype=dtype, device="cuda")
    ids = torch.randint(0, V, (T,), device="cuda")
    poison_next((T, H), dtype)
    assert torch.equal(ops.embed(ids, w), REF.embed(ids, w))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,H", [(1, 576), (257, 576), (256, 2048), (3, 77)])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(ops, dtype, rows, H, with_residual):
    x = torch.randn(rows, H, dtype=dtype, device="cuda")
    res = torch.randn(rows, H, dtype=torch.float32, device="cuda") if with_residual else None
    w = torch.rand(H, dtype=dtype, device="cuda") + 0.5
    poison_next((rows, H), dtype)
    out, r = ops.rms_norm(x, w, 1e-5, res)
    ref_out, ref_r = REF.rms_norm(x, w, 1e-5, res)
    assert rel_err(out, ref_out) <= tol(dtype)
    assert torch.equal(r, ref_r)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_of_a_view_off_16_byte_alignment(ops, dtype):
    """Rows of a multiple of 8 go 16 bytes a load, but only from aligned addresses: a
    contiguous view one element into its storage takes the scalar path, with the same result."""
    rows, H = 9, 576
    x = torch.randn(rows * H + 1, dtype=dtype, device="cuda")[1:].view(rows, H)
    res = torch.randn(rows, H, device="cuda")
    w = torch.rand(H, dtype=dtype, device="cuda") + 0.5
    out, r = ops.rms_norm(x, w, 1e-5, res)
    ref_out, ref_r = REF.rms_norm(x, w, 1e-5, res)
    assert rel_err(out, ref_out) <= tol(dtype)
    assert torch.equal(r, ref_r)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,I", [(1, 1536), (255, 1536), (256, 8192), (7, 8)])
def test_silu_and_mul(ops, dtype, T, I):
    x = torch.randn(T, 2 * I, dtype=dtype, device="cuda") * 3
    poison_next((T, I), dtype)
    assert rel_err(ops.silu_and_mul(x), REF.silu_and_mul(x)) <= tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 8, 9, 100, 300])  # 9, 100: past the gemv kernels (our GEMM); 300: past it (cuBLAS)
@pytest.mark.parametrize("K,N", [(576, 960), (576, 3072), (1536, 576), (64, 5)])
def test_linear_layers(ops_all_gemv_rows, dtype, M, K, N):
    ops = ops_all_gemv_rows
    w = torch.randn(N, K, dtype=dtype, device="cuda") * K ** -0.5
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    poison_next((M, N), dtype)
    assert rel_err(ops.linear(x, w), REF.linear(x, w)) <= tol(dtype)

    norm_w = torch.rand(K, dtype=dtype, device="cuda") + 0.5
    for res in (None, torch.randn(M, K, dtype=torch.float32, device="cuda")):
        poison_next((M, N), dtype)
        y, r = ops.norm_linear(x, res, norm_w, 1e-5, w)
        ref_y, ref_r = REF.norm_linear(x, res, norm_w, 1e-5, w)
        assert torch.equal(r, ref_r)
        assert rel_err(y, ref_y) <= tol(dtype)

    gate_up = torch.randn(M, 2 * K, dtype=dtype, device="cuda") * 3
    poison_next((M, N), dtype)
    assert rel_err(ops.silu_linear(gate_up, w), REF.silu_linear(gate_up, w)) <= tol(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tile", GEMM_TILES, ids=str)
@pytest.mark.parametrize("M", [3, 16, 17, 100, 256])
@pytest.mark.parametrize("K,N", [(576, 960), (1536, 576), (2048, 40), (64, 8)])
def test_gemm_at_every_tile(ops, dtype, tile, M, K, N):
    """Our tensor-core GEMM against torch's at every tile, at row and column counts that do
    and do not fill it (unwritten outputs stay NaN and fail)."""
    if tile not in ops.gemm_tiles:
        pytest.skip(f"{tile.unit} tiles need sm_90a; this GPU is not a Hopper")
    w = torch.randn(N, K, dtype=dtype, device="cuda") * K ** -0.5
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    poison_next((M, N), dtype)
    assert rel_err(ops.gemm(x, w, tile), REF.linear(x, w)) <= tol(dtype)


def test_gemm_tile_takes_the_fewest_waves(ops):
    """The tile whose blocks the GPU runs in the fewest waves, walking the fewest K chunks
    each; a split tile where few rows leave most SMs idle."""
    def waves_and_chunks(tile, M, N, K):
        blocks = math.ceil(M / tile.rows) * math.ceil(N / tile.cols) * tile.split
        return math.ceil(blocks / (ops.num_sms * ops.gemm_blocks_per_sm(tile))), math.ceil(K / 64 / tile.split)
    for M, N, K in [(256, 3072, 576), (256, 960, 576), (128, 576, 1536), (64, 3072, 576), (8, 960, 576)]:
        tile = ops.gemm_tile(M, N, K)
        assert tile in ops.gemm_tiles
        assert waves_and_chunks(tile, M, N, K) == min(waves_and_chunks(t, M, N, K) for t in ops.gemm_tiles)
    assert ops.gemm_tile(8, 960, 576).split > 1


@pytest.fixture(scope="module")
def ops_tma(ops):
    """The ops with a prefill's GEMMs in gemm_tma (sm_90a only)."""
    from engine.ops.cuda_ops import CudaOps
    tma = CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_gemm_tma="all"))
    if tma.prefill_gemm_tma == "off":
        pytest.skip("gemm_tma needs an sm_90a GPU (TMA, clusters, wgmma)")
    return tma


@pytest.mark.parametrize("width", [256, 192])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,K,N", [(8192, 576, 960), (8192, 1536, 576), (4133, 576, 3072), (700, 2048, 8200),
                                   (129, 64, 8), (300, 576, 960)])
def test_gemm_tma_against_torch(ops_tma, dtype, M, K, N, width):
    """The TMA-fed GEMM at either tile width against torch's float32 product and cuBLAS's, at
    row counts that end a cluster's pair of tiles inside its first or its second tile (the
    second block then loads rows past the matrix, which the TMA unit fills with zeros, and
    stores rows that the TMA unit drops), column counts that end inside the last tile or
    leave its last boxes wholly outside y, and more tiles than the persistent blocks (each
    walks several, reusing its staged outputs; an unwritten output stays NaN and fails)."""
    w = torch.randn(N, K, dtype=dtype, device="cuda") * K ** -0.5
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    poison_next((M, N), dtype)
    out = ops_tma.gemm_tma(x, w, width=width)
    assert rel_err(out, REF.linear(x.float(), w.float())) <= tol(dtype)
    assert rel_err(out, REF.linear(x, w)) <= 2e-3


def test_gemm_tma_refuses_a_width_it_has_no_tile_for(ops_tma):
    x, w = (torch.zeros(rows, 576, dtype=torch.bfloat16, device="cuda") for rows in (8192, 960))
    with pytest.raises(ValueError, match=r"plain tiles of \[192, 256\] W rows, not 128"):
        ops_tma.gemm_tma(x, w, width=128)
    with pytest.raises(ValueError, match=r"silu tiles of \[128, 256\] W rows, not 192"):
        ops_tma.gemm_tma(x, w, silu=True, width=192)


@pytest.mark.parametrize("width", [128, 256], ids=["pingpong", "cooperative"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("M,K,I", [(8192, 576, 1536), (1500, 576, 1536), (4133, 576, 1536), (700, 2048, 8192),
                                   (90, 64, 128), (1000, 576, 384), (300, 576, 192)])
def test_gemm_tma_silu_rounds_as_the_two_ops(ops_tma, dtype, M, K, I, width):
    """gate|up with SiLU-and-mul as its epilogue, in the ping-pong tiles (128) and the
    cooperative ones (256), against cuBLAS's gate|up then silu_and_mul: both round gate and up
    to 16 bits first, so they differ only where the sums' order moved one across a rounding
    boundary. The shapes give a cluster one tile (a warpgroup idle), an odd or even count,
    many (the turns and the stage ring's wrap), and an odd count of 64-output tiles."""
    if I % (width // 2):
        pytest.skip(f"I = {I} is not in tiles of {width // 2} outputs")
    x = torch.randn(M, K, dtype=dtype, device="cuda")
    w = torch.randn(2 * I, K, dtype=dtype, device="cuda") * K ** -0.5 * 3
    two = ops_tma.silu_and_mul(REF.linear(x, w))
    poison_next((M, I), dtype)
    fused = ops_tma.gemm_tma(x, w, silu=True, width=width)
    assert rel_err(fused, REF.silu_and_mul(REF.linear(x.float(), w.float()))) <= tol(dtype)
    assert rel_err(fused, two) <= 2e-3
    assert (fused != two).float().mean().item() <= 0.02


def test_gemm_tma_takes_prefills_that_fill_the_gpu(ops_tma, ops):
    """gemm_tma takes a projection whose tiles give every SM one, and only where it is on;
    decode batches (and anything else) keep our narrow GEMM or cuBLAS."""
    x_of = lambda rows, dtype=torch.bfloat16: torch.empty(rows, 576, dtype=dtype, device="cuda")  # noqa: E731
    gate_up = torch.empty(3072, 576, dtype=torch.bfloat16, device="cuda")
    rows = math.ceil(ops_tma.num_sms / 12) * 128          # 12 column tiles of SmolLM2's 1,536
    assert ops_tma._gemm_tma_fits(x_of(rows), gate_up, silu=True)
    assert not ops_tma._gemm_tma_fits(x_of(rows - 128), gate_up, silu=True)
    from engine.ops.cuda_ops import CudaOps
    off = CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_gemm_tma="off"))
    assert not off._gemm_tma_fits(x_of(8192), gate_up, silu=True)
    assert not ops_tma._gemm_tma_fits(x_of(8192, torch.float32), gate_up.float(), silu=True)
    assert not ops_tma._gemm_tma_fits(x_of(8192), gate_up[:3000], silu=True)       # I not in 128-column tiles
    assert not ops_tma._gemm_tma_fits(x_of(8192)[:, :512], gate_up[:, :512].contiguous())        # rows not contiguous
    assert ops_tma._gemm_tma_fits(x_of(8192), gate_up[:960])
    assert ops._gemm_tma_fits(x_of(8192), gate_up, silu=True)                     # the default scope, mlp:
    assert not ops._gemm_tma_fits(x_of(8192), gate_up[:960])                       # gate|up only


def attention_layer(nh, nkv, d, dtype, H=576):
    """A layer's attention weights: norm, the packed q|k|v projection, and an identity
    output projection (the block's output is then the attention output itself)."""
    return LayerWeights(attn_norm=torch.rand(H, dtype=dtype, device="cuda") + 0.5,
                        qkv=torch.randn((nh + 2 * nkv) * d, H, dtype=dtype, device="cuda") * H ** -0.5,
                        o=torch.eye(nh * d, dtype=dtype, device="cuda"), ffn_norm=None, gate_up=None, down=None)


def block_input(M, dtype, H=576):
    """x and a float32 residual for M rows."""
    return torch.randn(M, H, dtype=dtype, device="cuda"), torch.randn(M, H, dtype=torch.float32, device="cuda")


def model_rope_table(nh, nkv, d):
    """The model's RoPE table, positions up to 4096."""
    config = ModelConfig(hidden_size=576, num_layers=1, num_heads=nh, num_kv_heads=nkv, intermediate_size=1,
                         vocab_size=1, max_position=4096, head_dim=d)
    return rope_cos_sin(config, 4096, "cuda")


def rope_step(positions, cos_sin, slots, nh, nkv, d):
    """A step of T new tokens of one sequence, for the ops that read only its positions,
    RoPE table and cache slots (and, in the reference, its plan)."""
    T = positions.shape[0]
    meta = AttentionMetadata(
        query_start_loc=torch.tensor([0, T], dtype=torch.int32, device="cuda"),
        seq_lens=torch.tensor([T], dtype=torch.int32, device="cuda"),
        block_tables=torch.zeros(1, 1, dtype=torch.int32, device="cuda"), slot_mapping=slots,
        max_query_len=T, max_seq_len=T, plan=REF.plan_step([T], [T]))
    return Step(LayerShape(nh, nkv, d, d ** -0.5, 1e-5), positions, cos_sin, meta)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 2, 3])          # 3 rows: the unfused path
@pytest.mark.parametrize("nh,nkv,d", [(9, 3, 64), (8, 2, 128)])
def test_attention_inputs(ops, dtype, M, nh, nkv, d):
    """Norm + q|k|v projection + RoPE + cache write (one kernel at 1-2 rows) against the
    reference ops: the rotated q, the residual, and exactly the cache slots written."""
    x, res = block_input(M, dtype)
    layer = attention_layer(nh, nkv, d, dtype)
    positions = torch.randint(0, 4096, (M,), device="cuda")
    slots = torch.randperm(64 * 16, device="cuda")[:M]
    slots[-1] = -1                                    # a padding row: nothing cached
    step = rope_step(positions, model_rope_table(nh, nkv, d), slots, nh, nkv, d)
    ours, ref = (torch.zeros(2, 64, 16, nkv, d, dtype=dtype, device="cuda") for _ in range(2))
    q, r = ops.attention_inputs(x, res, layer, ours, step)
    ref_q, ref_r = REF.attention_inputs(x, res, layer, ref, step)
    assert torch.equal(r, ref_r)
    assert rel_err(q, ref_q) <= tol(dtype)
    for mine, theirs in zip(ours, ref):              # k, then v
        assert torch.equal(mine != 0, theirs != 0)     # the same slots written, no others
        assert rel_err(mine, theirs) <= tol(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T", [1, 256])
def test_logits_are_float32_of_the_stored_head(ops, dtype, T):
    head = torch.randn(49152, 576, dtype=dtype, device="cuda")
    hidden = torch.randn(T, 576, dtype=dtype, device="cuda")
    out = ops.logits(hidden, head)
    assert out.dtype == torch.float32
    # 16-bit products are exact in float32: only the order of the sums differs.
    assert rel_err(out, hidden.double() @ head.double().t()) <= 1e-6


def packed_qkv(T, nh, nkv, d, dtype):
    """q, k, v as the model makes them: strided views into one packed GEMM output."""
    qkv = torch.randn(T, (nh + 2 * nkv) * d, dtype=dtype, device="cuda")
    q, k, v = qkv.split([nh * d, nkv * d, nkv * d], dim=-1)
    return qkv, q.view(T, nh, d), k.view(T, nkv, d), v.view(T, nkv, d)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T,nh,nkv,d", [(1, 9, 3, 64), (37, 9, 3, 64), (256, 8, 2, 128)])
def test_rope_and_cache(ops, dtype, T, nh, nkv, d):
    num_blocks, bs, max_pos = 64, 16, 4096
    _, q, k, v = packed_qkv(T, nh, nkv, d, dtype)
    qr, kr, vr = q.clone(), k.clone(), v.clone()
    positions = torch.randint(0, max_pos, (T,), device="cuda")
    cos_sin = torch.cat([torch.rand(max_pos, d // 2) * 2 - 1] * 2, dim=-1).cuda()
    slots = torch.randperm(num_blocks * bs, device="cuda")[:T]
    slots[::5] = -1  # padding tokens are not cached
    step = rope_step(positions, cos_sin, slots, nh, nkv, d)
    ours, ref = (torch.full((2, num_blocks, bs, nkv, d), float("nan"), dtype=dtype, device="cuda") for _ in range(2))
    ops.rope_and_cache(q, k, v, ours, step)
    REF.rope_and_cache(qr, kr, vr, ref, step)
    assert rel_err(q, qr) <= tol(dtype) and rel_err(k, kr) <= tol(dtype)
    assert torch.equal(v, vr)
    for mine, theirs in zip(ours, ref):              # k, then v
        assert torch.equal(mine.isnan(), theirs.isnan()), "cache slots written differ"
        assert rel_err(mine.nan_to_num(), theirs.nan_to_num()) <= tol(dtype)


def test_rope_and_cache_refuses_rows_it_cannot_move_in_16_byte_vectors(ops):
    T, nh, nkv, d = 5, 9, 3, 64
    qkv = torch.randn(T, (nh + 2 * nkv) * d + 1, dtype=torch.bfloat16, device="cuda")   # rows of an odd width
    q, k, v = (qkv[:, a:a + n * d].view(T, n, d) for a, n in ((0, nh), (nh * d, nkv), ((nh + nkv) * d, nkv)))
    step = rope_step(torch.zeros(T, dtype=torch.int64, device="cuda"), torch.ones(16, d).cuda(),
                     torch.arange(T, device="cuda"), nh, nkv, d)
    cache = torch.zeros(2, 4, 16, nkv, d, dtype=torch.bfloat16, device="cuda")
    before = qkv.clone()
    with pytest.raises(ValueError, match="16-byte aligned"):
        ops.rope_and_cache(q, k, v, cache, step)
    assert torch.equal(qkv, before) and not cache.any()      # nothing touched


def paged_batch(query_lens, seq_lens, nh, nkv, d, dtype, bs=16):
    """Random paged KV cache [2, num_blocks, bs, nkv, d] with shuffled block tables, packed
    strided q, and the step (its metadata, the reference's plan; no RoPE table)."""
    blocks_per_seq = [math.ceil(L / bs) for L in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    perm = torch.randperm(num_blocks).tolist()
    tables, at = [], 0
    for n in blocks_per_seq:
        tables.append(perm[at:at + n])
        at += n
    width = max(blocks_per_seq)
    tables = [t + [0] * (width - len(t)) for t in tables]
    kv_cache = torch.randn(2, num_blocks, bs, nkv, d, dtype=dtype, device="cuda")
    T = sum(query_lens)
    _, q, _, _ = packed_qkv(T, nh, nkv, d, dtype)
    qsl = [0]
    for n in query_lens:
        qsl.append(qsl[-1] + n)
    dev = lambda x, t: torch.tensor(x, dtype=t, device="cuda")  # noqa: E731
    meta = AttentionMetadata(
        query_start_loc=dev(qsl, torch.int32), seq_lens=dev(seq_lens, torch.int32),
        block_tables=dev(tables, torch.int32), slot_mapping=torch.zeros(T, dtype=torch.int64, device="cuda"),
        max_query_len=max(query_lens), max_seq_len=max(seq_lens),
        plan=REF.plan_step(query_lens, seq_lens))
    step = Step(LayerShape(nh, nkv, d, d ** -0.5, 1e-5), positions=None, cos_sin=None, meta=meta)
    return q, kv_cache, step


def planned_by(ops, step, query_lens, seq_lens):
    """The step with `ops`'s own plan in place of the reference's, as the engine makes it."""
    return dataclasses.replace(step, meta=dataclasses.replace(step.meta, plan=ops.plan_step(query_lens, seq_lens)))


def check_attention(ops, query_lens, seq_lens, nh, nkv, d, dtype, bs=16):
    q, kv, step = paged_batch(query_lens, seq_lens, nh, nkv, d, dtype, bs)
    poison_next((q.shape[0], nh, d), dtype)
    out = ops.attention(q, kv, planned_by(ops, step, query_lens, seq_lens))
    ref = REF.attention(q.float(), kv.float(), step)
    assert rel_err(out, ref) <= 1e-2


HEADS = [(9, 3, 64), (8, 2, 128), (16, 2, 128), (32, 8, 64), (4, 4, 128), (8, 4, 64)]   # G = 3, 4, 8, 4, 1, 2


@pytest.fixture(scope="module", params=[(0, 256), (8, 256), (8, 64)], ids=["work-list", "few-rows", "few-rows-64"])
def ops_decode_kind(request, ops):
    """Decode attention both ways at small batches: the work list (plan_decode, attn_decode)
    and, up to 8 rows, a block per chunk with no list (attn_decode_few), at chunks of a
    whole tile and of 64 keys."""
    from engine.ops.cuda_ops import CudaOps
    few_rows, few_chunk = request.param
    return CudaOps(EngineConfig.from_env(model="", backend="cuda", decode_few_rows=few_rows,
                                         decode_few_chunk=few_chunk))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,nkv,d", HEADS)
@pytest.mark.parametrize("seq_lens", [[1], [4096], [1, 15, 16, 17, 33, 1000, 4096], "b256", "b96"])
def test_decode_attention(ops_decode_kind, dtype, nh, nkv, d, seq_lens):
    if seq_lens == "b256":
        seq_lens = torch.randint(1, 1025, (256,)).tolist()
    if seq_lens == "b96":   # a batch that fills the GPU alone, at contexts past one split
        seq_lens = torch.randint(1, 3001, (96,)).tolist()
    check_attention(ops_decode_kind, [1] * len(seq_lens), seq_lens, nh, nkv, d, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,nkv,d", [(9, 3, 64), (8, 2, 128)])
@pytest.mark.parametrize("seq_lens", [[1], [64, 129], [3000, 17]])
def test_few_rows_decode_sized_for_longer_rows(ops, dtype, nh, nkv, d, seq_lens):
    """As in a CUDA graph, the launch is sized for rows up to max_model_len and the rows are
    shorter: the chunks past each row's end must add nothing."""
    q, kv, step = paged_batch([1] * len(seq_lens), seq_lens, nh, nkv, d, dtype)
    meta = dataclasses.replace(step.meta, max_seq_len=4096)
    plan = ops.plan_few_decode(meta, _DTYPES[dtype], nh, nkv, d)
    assert plan is not None and plan.splits >= 16
    poison_next((q.shape[0], nh, d), dtype)
    out = ops.attention(q, kv, dataclasses.replace(step, meta=meta))
    assert rel_err(out, REF.attention(q.float(), kv.float(), step)) <= 1e-2


def test_decode_takes_the_few_rows_kernel_where_its_blocks_fit(ops):
    """Up to decode_few_rows rows, and only while a block per chunk of every row fits on the
    GPU at once; the work list past that."""
    from engine.ops.cuda_ops import DecodeWorkList, FewRowsDecode
    nh, nkv, d = 9, 3, 64

    def plan(B, max_len):
        _, _, step = paged_batch([1] * B, [17] * B, nh, nkv, d, torch.bfloat16)
        meta = dataclasses.replace(step.meta, max_seq_len=max_len)
        return ops.plan_few_decode(meta, "bf16", nh, nkv, d) or ops.plan_decode(meta, "bf16", nh, nkv, d)

    assert ops.decode_few_rows == 8
    assert isinstance(plan(1, 8192), FewRowsDecode) and isinstance(plan(8, 1024), FewRowsDecode)
    assert isinstance(plan(9, 1024), DecodeWorkList)
    assert isinstance(plan(8, 1 << 20), DecodeWorkList)    # 8 rows of a million keys: too many blocks


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,nkv,d", [(9, 3, 64), (8, 2, 128)])
@pytest.mark.parametrize("seq_lens", [[1, 17, 300, 1000, 4096], "b256"])
def test_decode_attention_block_fuses_rope_and_cache_write(ops_decode_kind, dtype, nh, nkv, d, seq_lens):
    """Past the gemv sizes, decode rotates q and k and writes the new k, v inside the
    attention kernel: the same output and cache as rope_and_cache + attention (the base
    Ops.attention_block on the same ops), with the new token in a later split."""
    if seq_lens == "b256":
        seq_lens = torch.randint(1, 1025, (256,)).tolist()
    B, bs = len(seq_lens), 16
    _, kv, step = paged_batch([1] * B, seq_lens, nh, nkv, d, dtype, bs)
    last = torch.tensor(seq_lens, device="cuda") - 1            # the new token's position
    slots = step.meta.block_tables.long().gather(1, (last // bs)[:, None])[:, 0] * bs + last % bs
    slots[1] = -1                                                 # a padding row: nothing cached
    step = dataclasses.replace(step, positions=last, cos_sin=model_rope_table(nh, nkv, d),
                               meta=dataclasses.replace(step.meta, slot_mapping=slots))
    x, res = block_input(B, dtype)
    layer = attention_layer(nh, nkv, d, dtype)                   # identity o: out is the attention output
    poison_next((B, nh, d), dtype)
    out, r = ops_decode_kind.attention_block(x, res, layer, kv, step)
    kv_ref = kv.clone()
    ref, ref_r = Ops.attention_block(ops_decode_kind, x, res, layer, kv_ref, step)
    assert torch.equal(r, ref_r)
    assert rel_err(out, ref) <= tol(dtype)
    assert torch.equal(kv[1], kv_ref[1])
    rows, k, k_ref = slots[slots >= 0], kv[0].view(-1, nkv, d), kv_ref[0].view(-1, nkv, d)
    assert rel_err(k[rows], k_ref[rows]) <= tol(dtype)
    others = torch.ones(k.shape[0], dtype=torch.bool, device="cuda")
    others[rows] = False
    assert torch.equal(k[others], k_ref[others])                 # no other slot written


@pytest.mark.parametrize("seq_lens,capture_len", [([1025] * 256, 8192), ("mixed", 8192), ([257], 8192),
                                                   ([1, 4096, 17], None), ([3000] * 300, None)])
def test_decode_work_list_covers_every_key_once_longest_first(ops, seq_lens, capture_len):
    """plan_decode cuts each row into chunks of equal size (but the last) that cover its keys
    exactly once per KV head, lists them longest first, and stays inside the buffers sized
    on the host; the attention launch then leaves the queue at zero for the next one."""
    if seq_lens == "mixed":
        seq_lens = torch.randint(1, 3001, (300,)).tolist()
    nh, nkv, d = 9, 3, 64
    q, kv, step = paged_batch([1] * len(seq_lens), seq_lens, nh, nkv, d, torch.bfloat16)
    meta = dataclasses.replace(step.meta, max_seq_len=capture_len or max(seq_lens))
    work = ops.plan_decode(meta, "bf16", nh, nkv, d)
    count = ops.work_queue[2].item()
    assert 0 < count <= work.items.shape[0]
    rows = work.row_plan.cpu().tolist()
    seen, lengths = set(), []
    for b, packed in work.items[:count].cpu().tolist():
        split, h = packed >> 8, packed & 255
        chunk = rows[b][0]
        assert chunk % 16 == 0 and chunk <= work.max_chunk
        start, end = split * chunk, min(seq_lens[b], (split + 1) * chunk)
        assert start < end and (b, split, h) not in seen
        seen.add((b, split, h))
        lengths.append(end - start)
    expected = {(b, s, h) for b, L in enumerate(seq_lens) for s in range(math.ceil(L / rows[b][0])) for h in range(nkv)}
    assert seen == expected
    assert all((a - 1) // 16 >= (b - 1) // 16 for a, b in zip(lengths, lengths[1:])), "not longest first"
    first = 0
    for b, L in enumerate(seq_lens):                      # each row's workspace splits follow the last row's
        assert rows[b][1] == first
        first += math.ceil(L / rows[b][0])
    assert first <= work.part_o.shape[0]
    ops.attention(q, kv, dataclasses.replace(step, meta=dataclasses.replace(step.meta, device_plan=work)))
    assert ops.work_queue[:2].tolist() == [0, 0]


def driver_blocks_per_sm(cubin: bytes, name: str, threads: int, dynamic_shared: int) -> int:
    """The driver's own occupancy answer (cuOccupancyMaxActiveBlocksPerMultiprocessor) for a
    kernel of `cubin`, loaded apart from PyCUDA (which does not expose a function's handle)."""
    import ctypes
    cuda = ctypes.CDLL("libcuda.so.1")
    module, function, blocks = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
    assert cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin)) == 0
    try:
        assert cuda.cuModuleGetFunction(ctypes.byref(function), module, name.encode()) == 0
        max_dynamic_shared_size_bytes = 8    # CUfunction_attribute
        assert cuda.cuFuncSetAttribute(function, max_dynamic_shared_size_bytes, dynamic_shared) == 0
        assert cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), function, threads, ctypes.c_size_t(dynamic_shared)) == 0
    finally:
        cuda.cuModuleUnload(module)
    return blocks.value


def test_decode_occupancy_is_the_drivers(ops):
    """The work list is sized by each decode kernel's occupancy as we reckon it (registers,
    then shared memory for the planned chunks): the driver's answer, for every kernel and
    chunk size; and the model-sized kernels keep to the register budget that gives 6 blocks."""
    from engine.ops import cuda_build
    from engine.ops.kernel_table import KERNELS
    major, minor = torch.cuda.get_device_capability()
    cubin = cuda_build.build_all(f"sm_{major}{minor}")["attention_decode"].read_bytes()
    for spec in KERNELS:
        if spec.key[0] != "decode":
            continue
        G, kernel = spec.key[3], ops._k[spec.key]
        for max_chunk in (0, 128, 1024, 2048):
            ours = kernel.blocks_per_sm(128, G * max_chunk * 4)
            assert ours == driver_blocks_per_sm(cubin, spec.name, 128, G * max_chunk * 4), (spec.name, max_chunk)
    for dt in ("bf16", "f16"):
        for G in (3, 4):
            assert ops._k["decode", dt, 64, G].blocks_per_sm(128) == 6, (dt, G)


@pytest.fixture(scope="module", params=[1.0, 2.0])
def ops_other_slack(request, ops):
    from engine.ops.cuda_ops import CudaOps
    return CudaOps(EngineConfig.from_env(model="", backend="cuda", decode_slack=request.param))


def test_decode_attention_at_other_chunk_sizes(ops_other_slack):
    lens = torch.randint(1, 3001, (256,)).tolist()
    check_attention(ops_other_slack, [1] * len(lens), lens, 9, 3, 64, torch.bfloat16)


def test_decode_attention_refuses_unbuilt_head_groups(ops):
    # One kernel per exact number of query heads per KV head: 5 has none.
    with pytest.raises(ValueError, match="not 5"):
        check_attention(ops, [1], [10], 10, 2, 64, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bs", [8, 64])
def test_decode_attention_block_sizes(ops_decode_kind, dtype, bs):
    # A key lane reads 8 (16-bit) or 4 (float) consecutive keys with one block-table
    # lookup: they must lie in one block from the smallest block size up.
    check_attention(ops_decode_kind, [1] * 5, [1, 9, 63, 129, 2000], 9, 3, 64, dtype, bs)


def test_decode_split_counters_reset_between_launches(ops_decode_kind):
    """The last split of each sequence combines the partials and zeroes its counter:
    launch after launch (as graph replays do), the result must not change."""
    q, kv, step = paged_batch([1] * 4, [4096, 3000, 97, 1], 9, 3, 64, torch.bfloat16)
    ref = REF.attention(q.float(), kv.float(), step)
    outs = [ops_decode_kind.attention(q, kv, step) for _ in range(3)]
    assert rel_err(outs[0], ref) <= 1e-2
    assert all(torch.equal(o, outs[0]) for o in outs[1:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nh,nkv,d", HEADS)
@pytest.mark.parametrize("query_lens,seq_lens", [
    ([7], [7]),                                   # plain prefill, odd length
    ([64, 65, 130, 1], [64, 65, 130, 300]),       # tile boundaries, a decode row in the batch
    ([5, 100, 17], [40, 1100, 17]),               # chunked prefill: queries after a cached prefix
    ([3, 64, 1], [500, 64, 77]),                  # 64-row tiles (no query past 64), after a prefix
    ([1000], [1300]),                             # the diagonal off the tile grid
    ([200, 3000, 50], [200, 3100, 2050]),         # sequences of few and many tiles in one launch
    ([4096], [4096]),
])
def test_prefill_attention(ops, dtype, nh, nkv, d, query_lens, seq_lens):
    check_attention(ops, query_lens, seq_lens, nh, nkv, d, dtype)


@pytest.fixture(scope="module", params=[(1, False, False, 64), (2, False, False, 64), (1, True, False, 64),
                                        (2, True, False, 64), (3, True, False, 64), (1, True, True, 64),
                                        (3, True, False, 128)],
                ids=["mma-64", "mma-128", "wgmma-64", "wgmma-128", "wgmma-ws-192", "wgmma-ws-64", "wgmma-ws-192-k128"])
def ops_prefill_shape(request, ops):
    from engine.ops.cuda_ops import CudaOps
    m_tiles, wgmma, ws_short, ws_keys = request.param
    if wgmma and not ops.prefill_wgmma:
        pytest.skip("the wgmma prefill kernel needs an sm_90a GPU (H100/H200)")
    # Forced 64-row tiles take the warp-specialized kernel wherever prefill_ws_short is on.
    return CudaOps(EngineConfig.from_env(model="", backend="cuda", prefill_m_tiles=m_tiles, prefill_wgmma=wgmma,
                                         prefill_ws_short=ws_short, prefill_ws_keys=ws_keys))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("query_lens,seq_lens", [([64, 65, 130, 1], [64, 65, 130, 300]), ([1000], [1300]),
                                                 ([200, 3000, 50], [200, 3100, 2050]), ([5, 100, 17], [40, 1100, 17]),
                                                 ([3, 64, 1], [500, 64, 77])])
@pytest.mark.parametrize("nh,nkv", [(9, 3), (32, 8), (8, 4)])
def test_prefill_attention_at_every_tile_height(ops_prefill_shape, dtype, query_lens, seq_lens, nh, nkv):
    if ops_prefill_shape.forced_m_tiles == 3 and dtype == torch.float32:
        pytest.skip("192-row tiles are the warp-specialized kernel's, which reads 16-bit caches")
    check_attention(ops_prefill_shape, query_lens, seq_lens, nh, nkv, 64, dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("bs", [8, 64])
def test_prefill_attention_block_sizes(ops_prefill_shape, dtype, bs):
    # A K/V tile of 64 keys is gathered row by row through the block table: blocks smaller
    # and as large as the tile.
    check_attention(ops_prefill_shape, [7, 130, 64], [7, 300, 1000], 9, 3, 64, dtype, bs)


def test_prefill_runs_on_wgmma_on_hopper(ops):
    # The default engine takes the wgmma kernel wherever it is built to run: an sm_90a GPU.
    assert ops.prefill_wgmma == (torch.cuda.get_device_capability() == (9, 0))


def test_prefill_takes_tall_tiles_only_for_long_queries_that_fill_the_gpu(ops):
    from engine.ops.cuda_ops import PrefillTiles
    meta = AttentionMetadata(query_start_loc=None, seq_lens=torch.zeros(1), block_tables=None, slot_mapping=None,
                             max_query_len=4000, max_seq_len=4000)
    slots = 2 * ops.num_sms * 2                       # twice every slot of the mma.sync kernel's 2 an SM
    one_prompt = dataclasses.replace(meta, plan=ops.plan_step([4000], [4000]))
    assert isinstance(one_prompt.plan, PrefillTiles) and one_prompt.plan.by_m_tiles == {1: 63, 2: 32, 3: 21}
    assert ops.prefill_m_tiles(one_prompt, 9, 64, wgmma=False) == (2 if 9 * 32 >= slots else 1)
    many = dataclasses.replace(meta, plan=ops.plan_step([3000] * 64, [3000] * 64), max_query_len=3000)
    assert ops.prefill_m_tiles(many, 9, 64, wgmma=False) == 2
    assert ops.prefill_m_tiles(many, 8, 128, wgmma=False) == 1      # no 128-row shape at d = 128
    short = dataclasses.replace(meta, plan=ops.plan_step([2048] * 64, [2048] * 64), max_query_len=2048)
    assert ops.prefill_m_tiles(short, 9, 64, wgmma=False) == 1      # short K/V chains: 64-row tiles, however many
    assert ops.plan_step([1, 1], [5, 9]) is None       # decode: nothing to plan
    if ops.prefill_wgmma:   # the wgmma kernels split keys: one wave of their tall blocks is enough
        tall = ops.tall_m_tiles
        assert tall == 3                                  # the warp-specialized kernel's 192 rows
        assert ops.prefill_m_tiles(one_prompt, 9, 64, wgmma=True) == (tall if 9 * 21 >= ops._prefill_slots[tall] else 1)
        three = dataclasses.replace(meta, plan=ops.plan_step([3000], [3000]), max_query_len=3000)
        assert ops.prefill_m_tiles(three, 9, 64, wgmma=True) == (tall if 9 * 16 >= ops._prefill_slots[tall] else 1)
        assert ops.prefill_m_tiles(short, 9, 64, wgmma=True) == 1


def test_prefill_split_plans_for_the_blocks_this_gpu_runs_at_once(ops):
    """tests/test_prefill_plan.py checks the plan on the host for 132 SMs; here, that the
    slots it is given are what this GPU runs of the split kernels (4 blocks of 64 query rows
    an SM, 2 of 128: their registers allow no more; 1 of the warp-specialized kernel's 192),
    and that a step plans once."""
    if not ops.prefill_wgmma:
        pytest.skip("keys are split by the wgmma prefill kernel, which needs an sm_90a GPU")
    assert ops._prefill_slots == {1: 4 * ops.num_sms, 2: 2 * ops.num_sms, 3: ops.num_sms}
    meta = AttentionMetadata(query_start_loc=None, seq_lens=None, block_tables=None, slot_mapping=None,
                             max_query_len=3000, max_seq_len=3000, plan=ops.plan_step([3000], [3000]))
    for m_tiles in (1, 2, 3):
        split = ops.prefill_split(meta, 9, m_tiles)
        assert split == meta.plan.split(9, m_tiles, ops._prefill_slots[m_tiles]) and split[0] > 1
        assert ops.prefill_split(meta, 9, m_tiles) is split     # kept for the step's other layers


def test_short_tiles_take_the_warp_specialized_kernel_within_one_wave(ops):
    """A step whose 64-row blocks, split as planned for the warp-specialized kernel's two an
    SM, all run in one wave goes to that kernel, with that split; past one wave, to
    attn_prefill_wgmma's four an SM and its split: a lone 1,500-token prompt (split into
    2.5 waves) or a step of many prompts."""
    if not ops.prefill_wgmma:
        pytest.skip("the warpgroup prefill kernels need an sm_90a GPU")
    assert ops._short_ws_slots == 2 * ops.num_sms
    for query_lens in ([600], [1000], [1500], [2000], [1000] * 8, [100, 200]):
        meta = AttentionMetadata(query_start_loc=None, seq_lens=None, block_tables=None, slot_mapping=None,
                                 max_query_len=max(query_lens), max_seq_len=max(query_lens),
                                 plan=ops.plan_step(query_lens, query_lens))
        one_wave = meta.plan.blocks(9, 1, 2 * ops.num_sms) <= 2 * ops.num_sms
        assert ops.prefill_short_ws(meta, 9) == one_wave
        assert ops.prefill_split(meta, 9, 1) == meta.plan.split(9, 1, (2 if one_wave else 4) * ops.num_sms)
        if ops.num_sms == 132:     # the H100's and H200's: the cases measured
            assert one_wave == (query_lens in ([600], [1000], [100, 200]))


@pytest.fixture(scope="module", params=[dict(), dict(prefill_ws=False), dict(prefill_ws_short=False),
                                        dict(prefill_ws_keys=64)],
                ids=["ws-192-and-64", "wg-128-and-64", "ws-192-wg-64", "ws-192-k64-and-64"])
def ops_tall(request, ops):
    """The engine's ops with the tall tiles of either wgmma kernel: the warp-specialized one
    (the default, at 128 or 64 keys a K/V tile) or the 128-row one; and a lone prompt's
    64-row tiles in either (the warp-specialized kernel by default)."""
    if not ops.prefill_wgmma:
        pytest.skip("keys are split by the wgmma prefill kernels, which need an sm_90a GPU")
    from engine.ops.cuda_ops import CudaOps
    return CudaOps(EngineConfig.from_env(model="", backend="cuda", **request.param))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("query_lens,seq_lens", [
    ([1000], [1000]),                      # one prompt: the rows past the share split, in one wave
    ([2000], [2000]),                      # every row split
    ([3000], [3000]),                      # tall tiles (192 rows), every row split
    ([4000], [4000]),                      # tall tiles (128 rows), every row split
    ([1000], [6000]),                      # a chunk after a long cached prefix
    ([256, 256, 1], [8000, 256, 300]),     # the split rows hold short tiles too: some parts get no keys
    ([2500, 40, 1], [2600, 40, 3000]),
])
def test_prefill_split_tiles_merge_to_the_reference_launch_after_launch(ops_tall, dtype, query_lens, seq_lens):
    """The last block of a split tile merges every part's state and zeroes the tile's
    counter: the result must be right, and the same at every launch. Each case is one the
    plan splits with one kernel's tall tiles or both (192-row tiles leave 1 x 4,000 whole)."""
    ops = ops_tall
    q, kv, step = paged_batch(query_lens, seq_lens, 9, 3, 64, dtype)
    ours = planned_by(ops, step, query_lens, seq_lens)
    m_tiles = ops.prefill_m_tiles(ours.meta, 9, 64, wgmma=True)
    if ops.prefill_split(ours.meta, 9, m_tiles)[0] == 1:
        assert (ops.tall_m_tiles, query_lens) in ((3, [4000]), (2, [3000])), "a case meant to split did not"
        pytest.skip(f"{query_lens} is not split at {64 * m_tiles}-row tiles")
    outs = [ops.attention(q, kv, ours) for _ in range(3)]
    assert rel_err(outs[0], REF.attention(q.float(), kv.float(), step)) <= 1e-2
    assert all(torch.equal(o, outs[0]) for o in outs[1:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,V", [(1, 49152), (256, 49152), (3, 1000)])
def test_sample_greedy(ops, dtype, B, V):
    logits = (torch.randn(B, V, device="cuda") * 4).to(dtype)  # bf16 makes ties: lowest index wins
    s = sampling_tensors(B, 0.0)
    assert torch.equal(ops.sample(logits, s), REF.sample(logits, s))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,V", [(1, 49152), (256, 49152), (5, 1000)])
def test_sample_random_matches_reference(ops, dtype, B, V):
    logits = (torch.randn(B, V, device="cuda") * 3).to(dtype)
    temp = torch.rand(B) * 1.5 + 0.2
    temp[::4] = 0.0  # greedy rows mixed in
    s = sampling_tensors(B, temp)
    assert torch.equal(ops.sample(logits, s), REF.sample(logits, s))
    # Independent of batch composition: a row sampled alone draws the same token.
    one = SamplingTensors(s.temperature[-1:], s.top_k[-1:], s.top_p[-1:], s.seeds[-1:], s.counters[-1:],
                          False, False)
    assert ops.sample(logits[-1:], one).item() == ops.sample(logits, s)[-1].item()


@pytest.mark.parametrize("top_k,top_p", [(1, 1.0), (5, 1.0), (50, 0.9), (0, 0.5), (0, 0.95), (20, 0.0)])
def test_sample_filtered(ops, top_k, top_p):
    B, V = 256, 49152
    logits = torch.randn(B, V, device="cuda") * 3
    s = sampling_tensors(B, 0.9, top_k, top_p)
    mine, ref = ops.sample(logits, s), REF.sample(logits, s)
    if top_p == 1.0:     # a cut by value alone: every row draws the same token
        assert torch.equal(mine, ref)
    # Float rounding of the nucleus mass may move a boundary token; almost all rows agree.
    assert (mine == ref).float().mean().item() >= 0.97
    if top_k == 1 or top_p == 0.0:
        # Only the best token is kept: the largest logit / temperature (two logits an ulp
        # apart can tie once divided, and then either is the best).
        scaled = logits / 0.9
        assert torch.equal(scaled.gather(1, mine[:, None]), scaled.max(-1, keepdim=True).values)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("top_k", [5, 50])
def test_sample_keeps_every_token_tied_at_the_top_k_cut(ops, dtype, top_k):
    # Logits in quarter steps: the k-th largest value is tied in nearly every row (16-bit
    # logits tie often). The kernel and the reference both keep every tied token, so every
    # row draws the same one (the reference's cut by rank kept an arbitrary few of them).
    B, V = 256, 49152
    logits = ((torch.randn(B, V, device="cuda") * 12).round() / 4).to(dtype)
    s = sampling_tensors(B, 0.9, top_k)
    assert torch.equal(ops.sample(logits, s), REF.sample(logits, s))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature, top_k", [(0.0, 0), (0.8, 0), (0.8, 50)])
@pytest.mark.parametrize("V", [49152, 1001])   # the vector loads' loop, and the one-at-a-time one
def test_sample_gives_no_token_where_the_reference_does(ops, dtype, temperature, top_k, V):
    logits = no_token_logits(V).to(dtype).cuda()
    s = sampling_tensors(5, temperature, top_k)
    mine = ops.sample(logits, s)
    assert torch.equal(mine, REF.sample(logits, s))
    assert (mine[[1, 2, 4]] == NO_TOKEN).all() and (mine[[0, 3]] >= 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_embed_reads_no_token_as_token_zero(ops, dtype):
    w = torch.randn(1000, 576, dtype=dtype, device="cuda")
    ids = torch.tensor([5, NO_TOKEN, 999], device="cuda")
    poison_next((3, 576), dtype)
    assert torch.equal(ops.embed(ids, w), w[[5, 0, 999]])


@pytest.mark.parametrize("n", [1, 300])
def test_take_pending_tokens(ops, n):
    """The kernel fills exactly the tokens whose source row is set, as the torch contract does."""
    previous = torch.randint(0, 49152, (260,), device="cuda")
    source = torch.randint(-1, 260, (n,), device="cuda")
    source[0] = -1 if n > 1 else 5
    token_ids = torch.randint(0, 49152, (n,), device="cuda")
    mine, ref = token_ids.clone(), token_ids.clone()
    ops.take_pending_tokens(mine, source, previous)
    REF.take_pending_tokens(ref, source, previous)
    assert torch.equal(mine, ref) and torch.equal(mine[source < 0], token_ids[source < 0])
