"""Our CPU decode attention (engine/cpu_ops.c) against the plain-products oracle
(engine.ops.torch_ops._attend) on paged caches: scattered blocks, rows of different lengths,
grouped query heads; and the torch backend takes it where it runs."""
from __future__ import annotations

import pytest
import torch

from engine import cpu_ops
from engine.ops.torch_ops import _attend

pytestmark = pytest.mark.skipif(not cpu_ops.runs(torch.zeros(1, 1, 64), torch.zeros(1, 1, 1, 64)),
                                reason="engine/cpu_ops.c needs AVX2 + FMA and a C compiler")


def paged_case(gen, lens, nh, nkv, d, block_size=16, num_blocks=64):
    """A cache of random values and a random block table a row (no block shared)."""
    k_cache, v_cache = (torch.randn(num_blocks, block_size, nkv, d, generator=gen) for _ in range(2))
    width = max(-(-n // block_size) for n in lens)
    order = torch.randperm(num_blocks, generator=gen)[:len(lens) * width].view(len(lens), width)
    q = torch.randn(len(lens), nh, d, generator=gen)
    return q, k_cache, v_cache, order.to(torch.int32), torch.tensor(lens, dtype=torch.int32)


def oracle(q, k_cache, v_cache, tables, lens, scale):
    out = []
    for r, n in enumerate(lens.tolist()):
        k = k_cache[tables[r].long()].flatten(0, 1)[:n]      # [n, nkv, d]
        v = v_cache[tables[r].long()].flatten(0, 1)[:n]
        mask = torch.ones(1, 1, 1, n, dtype=torch.bool)
        out.append(_attend(q[r][None, :, None, :].double(), k[None].double(), v[None].double(), mask, scale)[0, :, 0])
    return torch.stack(out)


@pytest.mark.parametrize("lens, nh, nkv, d", [
    ([1], 9, 3, 64),                          # one key: the output is its value
    ([37, 80, 16, 17, 5, 64, 100, 3], 9, 3, 64),   # SmolLM2-135M's heads, a decode batch
    ([200, 9], 32, 8, 64),                    # Llama-3.2-1B's groups
    ([33, 48], 4, 4, 128),                    # no grouping, a wider head
])
def test_paged_decode_matches_the_plain_products(lens, nh, nkv, d):
    gen = torch.Generator().manual_seed(sum(lens) + nh)
    q, k_cache, v_cache, tables, seq_lens = paged_case(gen, lens, nh, nkv, d)
    scale = d ** -0.5
    got = cpu_ops.paged_decode(q, k_cache, v_cache, tables, seq_lens, scale)
    want = oracle(q, k_cache, v_cache, tables, seq_lens, scale)
    assert got.shape == q.shape and got.dtype == torch.float32
    assert ((got.double() - want).abs().max() / want.abs().max()).item() < 1e-5


def test_keys_past_a_rows_length_have_no_weight():
    gen = torch.Generator().manual_seed(7)
    q, k_cache, v_cache, tables, lens = paged_case(gen, [20, 20], 9, 3, 64)
    before = cpu_ops.paged_decode(q, k_cache, v_cache, tables, lens, 0.125)
    k_cache[tables[:, 1].long(), 4:] = 1e4          # slots 20..31 of each row: past its length
    v_cache[tables[:, 1].long(), 4:] = float("nan")
    assert torch.equal(cpu_ops.paged_decode(q, k_cache, v_cache, tables, lens, 0.125), before)


def test_a_row_without_keys_is_refused():
    gen = torch.Generator().manual_seed(8)
    q, k_cache, v_cache, tables, _ = paged_case(gen, [4, 4], 9, 3, 64)
    with pytest.raises(ValueError, match="at least one key"):
        cpu_ops.paged_decode(q, k_cache, v_cache, tables, torch.tensor([4, 0], dtype=torch.int32), 0.125)


def test_the_torch_backend_decodes_through_it_and_agrees_with_the_gathered_path(monkeypatch, llm):
    """Greedy outputs of a decode batch with the kernel and with the gather + SDPA it replaces."""
    from engine import SamplingParams
    prompts = [[1, 2, 3, 4, 5] * k for k in (1, 3, 7, 12)]
    params = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
    calls = []
    original = cpu_ops.paged_decode
    monkeypatch.setattr(cpu_ops, "paged_decode", lambda *a: calls.append(1) or original(*a))
    with_kernel = [o.token_ids for o in llm.generate(prompts, params)]
    assert calls, "the torch backend's decode rows did not take the kernel"
    monkeypatch.setattr(cpu_ops, "runs", lambda q, k_cache: False)
    gathered = [o.token_ids for o in llm.generate(prompts, params)]
    assert with_kernel == gathered


@pytest.mark.parametrize("rows", [1, 8, 315])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm_is_the_torch_backends_to_float32_rounding(rows, with_residual):
    gen = torch.Generator().manual_seed(rows)
    x, residual = (torch.randn(rows, 576, generator=gen) * 3 for _ in range(2))
    weight = torch.rand(576, generator=gen) + 0.5
    residual = residual if with_residual else None
    out, r = cpu_ops.rms_norm(x, weight, 1e-5, residual)
    want_r = x.double() + (0 if residual is None else residual.double())
    want = weight.double() * want_r * torch.rsqrt(want_r.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert torch.allclose(r.double(), want_r, rtol=1e-7, atol=0)
    assert (r is x) == (residual is None)        # no residual: r is x, as x.float() is
    assert ((out.double() - want).abs().max() / want.abs().max()).item() < 1e-6


def test_silu_mul_is_the_torch_backends_to_float32_rounding():
    x = torch.cat([torch.randn(8, 3072, generator=torch.Generator().manual_seed(4)) * 6,
                   torch.tensor([[-100.0, -0.0, 0.0, 100.0, 1e-30, -1e-30, 20.0, -20.0] * 384])])
    got = cpu_ops.silu_mul(x)
    gate, up = x.double().chunk(2, dim=-1)
    want = torch.nn.functional.silu(gate) * up
    assert got.shape == (9, 1536)
    assert torch.allclose(got.double(), want, rtol=3e-7, atol=1e-37)
    with pytest.raises(ValueError, match="multiple of 8"):
        cpu_ops.silu_mul(torch.zeros(2, 12))


def test_rope_cache_rotates_like_the_torch_backend_and_stores_only_real_slots():
    from engine.model import rope_cos_sin
    from engine.model_config import PRESETS
    config = PRESETS["smollm2-135m"]
    nh, nkv, d = config.num_heads, config.num_kv_heads, config.head_dim
    gen = torch.Generator().manual_seed(9)
    T = 5
    qkv = torch.randn(T, (nh + 2 * nkv) * d, generator=gen)
    q, k, v = (x.reshape(T, -1, d) for x in qkv.split([nh * d, nkv * d, nkv * d], dim=-1))
    cos_sin = rope_cos_sin(config, 512, "cpu")
    positions = torch.tensor([0, 7, 100, 511, 3])
    slots = torch.tensor([17, 3, -1, 40, 0])          # token 2 is padding: nothing stored
    k_cache, v_cache = (torch.full((4, 16, nkv, d), 7.0) for _ in range(2))
    cos, sin = cos_sin[positions].chunk(2, dim=-1)
    cos2, sin2 = torch.cat((cos, cos), -1)[:, None], torch.cat((-sin, sin), -1)[:, None]

    def rotated(x):
        return x * cos2 + torch.cat((x[..., d // 2:], x[..., :d // 2]), -1) * sin2
    want_q, want_k, want_v = rotated(q.clone()), rotated(k.clone()), v.clone()
    assert cpu_ops.runs_rope(q, k, v, k_cache)
    cpu_ops.rope_cache(q, k, v, k_cache, v_cache, cos_sin, positions, slots)
    assert torch.equal(q, want_q) and torch.equal(k, want_k)          # in place, to the bit
    flat_k, flat_v = k_cache.view(-1, nkv, d), v_cache.view(-1, nkv, d)
    for t, slot in enumerate(slots.tolist()):
        if slot >= 0:
            assert torch.equal(flat_k[slot], want_k[t]) and torch.equal(flat_v[slot], want_v[t])
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[[s for s in slots.tolist() if s >= 0]] = False
    assert (flat_k[untouched] == 7).all() and (flat_v[untouched] == 7).all()
