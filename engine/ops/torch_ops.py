"""Reference ops in plain torch: any device, the oracle for the CUDA kernels."""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine import cpu_ops
from engine.ops.base import NO_TOKEN, Ops, SamplingTensors, Step
from engine.quantized import PackedBlocks

_MASK32 = 0xFFFFFFFF
ONEDNN = torch.backends.mkldnn.is_available()


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """murmur3's 32-bit finalizer on uint32 values held in int64."""
    x = x ^ (x >> 16)
    x = (x * 0x85EBCA6B) & _MASK32
    x = x ^ (x >> 13)
    x = (x * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def uniform_noise(seeds: torch.Tensor, counters: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[B, V] uniforms in (0, 1), a pure function of (seed, counter, token index).

    Counter-based, so a request's draws do not depend on which other requests
    share its batch; the CUDA sampler computes the same bits.
    """
    seed_lo, seed_hi = seeds & _MASK32, (seeds >> 32) & _MASK32
    row = _mix32(seed_lo ^ _mix32(seed_hi ^ _mix32(counters & _MASK32)))
    col = torch.arange(vocab_size, device=seeds.device, dtype=torch.int64)
    return uniform_from_bits(_mix32(row[:, None] ^ _mix32(col + 0x9E3779B9)[None, :]))


def uniform_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """A uniform in (0, 1) from 32 random bits (held in int64): the top 23, centred in their
    bin, so float32 holds every value exactly and none reaches 1. From the top 24 bits the
    largest, 2^24 - 1 + 0.5, rounded to 2^24 in float32: u = 1 drew g = -log(-log u) = +inf,
    so one draw in 2^24 won whatever its logit, and where top-k or top-p had dropped that
    token the reference's -inf + inf made a NaN that argmax took (0.3% of rows at 49,152)."""
    return ((bits >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def filter_logits(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k / top-p set to -inf, cut by value as the CUDA
    sampler cuts (cuda_src/sample.cu): a token stays if it is at least the k-th largest value
    (every token tied with it stays too) and the tokens strictly above its value hold less than
    top_p of the probability mass; the best token always stays. A cut by rank would keep an
    arbitrary few of the tied tokens (the sort is not stable), and bf16 logits tie often."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    rank = torch.arange(scaled.shape[-1], device=scaled.device).expand_as(sorted_logits)
    # The mass strictly above a value is the exclusive cumulative sum at the first of its ties.
    new_value = torch.ones_like(sorted_logits, dtype=torch.bool)
    new_value[:, 1:] = sorted_logits[:, 1:] != sorted_logits[:, :-1]
    first_tie = torch.where(new_value, rank, 0).cummax(dim=-1).values
    drop = (probs.cumsum(dim=-1) - probs).gather(-1, first_tie) >= top_p[:, None]
    kth = (top_k.long().clamp(max=scaled.shape[-1]) - 1).clamp(min=0)
    drop |= (top_k[:, None] > 0) & (sorted_logits < sorted_logits.gather(-1, kth[:, None]))
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(scaled).scatter_(-1, order, sorted_logits)


def _attend(q, k, v, mask, scale):
    """softmax(q k^T * scale + mask) v in float32, written out plainly so the
    oracle does not depend on which fused SDPA kernel a device picks.
    q [B, nh, n, d]; k, v [B, L, nkv, d] (the cache's own layout);
    mask [B or 1, 1, n or 1, L] bool (True = attend)."""
    B, nh, n, d = q.shape
    nkv = k.shape[2]
    groups = nh // nkv
    # The query heads of one KV head become extra query rows, so all heads go
    # through one pair of batched products (per-head loops cost more in dispatch
    # than the products themselves at decode sizes).
    qg = (q.float() * scale).reshape(B, nkv, groups * n, d)
    mask = mask.repeat(1, 1, groups, 1) if mask.shape[2] > 1 else mask
    scores = torch.matmul(qg, k.float().permute(0, 2, 3, 1))                     # [B, nkv, G n, L]
    probs = scores.masked_fill_(~mask, float("-inf")).softmax(dim=-1)
    out = torch.matmul(probs, v.float().transpose(1, 2))                         # [B, nkv, G n, d]
    return out.reshape(B, nh, n, d).to(q.dtype)


def _sdpa(q, k, v, mask, scale):
    """_attend through torch's fused attention: the torch backend's own path on CPU, where it
    takes half the time of the plain products (no transposing copies of K and V); float32."""
    return F.scaled_dot_product_attention(q.float(), k.float().transpose(1, 2), v.float().transpose(1, 2),
                                          attn_mask=mask, scale=scale, enable_gqa=True).to(q.dtype)


@dataclass
class StepPlan:
    """How the torch backend splits a step's attention: per sequence on the host."""
    query_lens: list[int]
    seq_lens: list[int]
    offsets: list[int]                  # where each sequence's queries start
    decode_rows: list[int]              # sequences with one new token, attended all at once
    # Made by the first layer, for all: how the decode rows attend, their tables, lengths and mask; the
    # RoPE factors at the step's positions, and the cache slots of the tokens that have one.
    decode_gather: tuple | None = None
    rope: tuple | None = None


class TorchOps(Ops):
    name = "torch"
    supports_graphs = False    # its attention loops over host-side lengths each step

    def __init__(self) -> None:
        self._head32: tuple[torch.Tensor, torch.Tensor] | None = None   # (head, its float32 copy)

    def plan_step(self, query_lens, seq_lens, query_starts=None) -> StepPlan:
        query_lens = [int(n) for n in query_lens]
        offsets = [0, *itertools.accumulate(query_lens)] if query_starts is None else [int(t) for t in query_starts]
        return StepPlan(query_lens, [int(n) for n in seq_lens], offsets,
                        [i for i, n in enumerate(query_lens) if n == 1])

    def embed(self, token_ids, weight):
        return F.embedding(token_ids.clamp_min(0), weight)   # NO_TOKEN reads row 0

    def rms_norm(self, x, weight, eps, residual):
        if cpu_ops.runs_pointwise(x) and weight.dtype == torch.float32:
            return cpu_ops.rms_norm(x, weight, eps, residual)
        r = x.float() if residual is None else x.float() + residual
        h = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype), r

    def rope_and_cache(self, q, k, v, kv_cache, step: Step):
        # x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin, as x * [cos, cos] + [x2, x1] * [-sin, sin]:
        # the same products and sums, in a third of the ops.
        plan: StepPlan = step.meta.plan
        k_cache, v_cache = kv_cache
        if cpu_ops.runs_rope(q, k, v, k_cache):
            cpu_ops.rope_cache(q, k, v, k_cache, v_cache, step.cos_sin, step.positions, step.meta.slot_mapping)
            return
        if plan.rope is None:
            cos, sin = step.cos_sin[step.positions].chunk(2, dim=-1)
            slots = step.meta.slot_mapping
            stored = None if bool((slots >= 0).all()) else slots >= 0   # padding tokens: nothing to store
            plan.rope = (torch.cat((cos, cos), dim=-1)[:, None, :], torch.cat((-sin, sin), dim=-1)[:, None, :],
                         slots if stored is None else slots[stored], stored)
        cos2, sin2, slots, stored = plan.rope
        half = q.shape[-1] // 2
        for x in (q, k):
            xf = x.float()
            swapped = torch.cat((xf[..., half:], xf[..., :half]), dim=-1)
            x.copy_(xf * cos2 + swapped * sin2)
        if stored is not None:
            k, v = k[stored], v[stored]
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)

    def attention(self, q, kv_cache, step: Step, out=None):
        k_cache, v_cache = kv_cache
        meta, scale = step.meta, step.shape.scale
        out = torch.empty_like(q) if out is None else out
        block_size = k_cache.shape[1]
        plan: StepPlan = meta.plan
        offsets = plan.offsets
        # The plain products stay the oracle on a GPU (the CUDA kernels are tested against them).
        attend = _sdpa if q.device.type == "cpu" else _attend
        if plan.decode_rows:
            self._decode(q, k_cache, v_cache, meta, scale, block_size, out, attend)
        for i, n in enumerate(plan.query_lens):
            if n == 1:
                continue
            L = plan.seq_lens[i]
            nblocks = -(-L // block_size)
            table = meta.block_tables[i, :nblocks].long()
            k = k_cache[table].flatten(0, 1)[:L]       # [L, nkv, d]
            v = v_cache[table].flatten(0, 1)[:L]
            qi = q[offsets[i]:offsets[i] + n]           # [n, nh, d]
            # Query j sits at absolute position L - n + j and sees keys <= it.
            mask = torch.arange(L, device=q.device)[None, :] <= (L - n + torch.arange(n, device=q.device))[:, None]
            o = attend(qi.transpose(0, 1)[None], k[None], v[None], mask[None, None], scale)
            out[offsets[i]:offsets[i] + n] = o[0].transpose(0, 1)
        return out

    def _decode(self, q, k_cache, v_cache, meta, scale, block_size, out, attend):
        """All one-token queries at once: from the paged cache in place where our CPU kernel
        runs (engine.cpu_ops), else over their padded gathered contexts."""
        plan: StepPlan = meta.plan
        rows = plan.decode_rows
        if plan.decode_gather is None:
            lens = [plan.seq_lens[i] for i in rows]
            nblocks = -(-max(lens) // block_size)
            all_rows = len(rows) == len(plan.query_lens)
            tables = meta.block_tables[:, :nblocks] if all_rows else \
                meta.block_tables[torch.tensor(rows, device=q.device), :nblocks]
            in_place = cpu_ops.runs(q, k_cache)     # every layer alike: decided once a step
            # Gathered, slots past a row's length hold stale values from earlier sequences;
            # they get zero weight (the cache starts zeroed, so none is NaN).
            mask = None if in_place else (torch.arange(nblocks * block_size, device=q.device)[None, :] <
                                          torch.tensor(lens, device=q.device)[:, None])[:, None, None, :]
            packed = all_rows and q.shape[0] == len(rows)     # q holds these rows' queries alone
            tok = None if packed else torch.tensor([plan.offsets[i] for i in rows], device=q.device)
            plan.decode_gather = (in_place, tables, torch.tensor(lens, dtype=torch.int32, device=q.device), mask, tok)
        in_place, tables, lens, mask, tok = plan.decode_gather
        qd = q if tok is None else q[tok]   # [R, nh, d]
        if in_place:
            o = cpu_ops.paged_decode(qd, k_cache, v_cache, tables, lens, scale)
        else:
            # Whole blocks as rows of one flat table: index_select copies each with one memcpy.
            flat = tables.reshape(-1).long()
            k = k_cache.flatten(1).index_select(0, flat).view(len(rows), -1, *k_cache.shape[2:])   # [R, Lmax, nkv, d]
            v = v_cache.flatten(1).index_select(0, flat).view(len(rows), -1, *v_cache.shape[2:])
            o = attend(qd[:, :, None, :], k, v, mask, scale)[:, :, 0, :]
        if tok is None:
            out.copy_(o)
        else:
            out[tok] = o

    def logits(self, hidden, head):
        if isinstance(head, PackedBlocks):
            return head.matmul(hidden).float()
        if head.dtype == torch.bfloat16 and head.device.type == "cpu":
            # oneDNN's bf16 GEMM reads half the bytes and runs ~5x faster than a float32
            # one here; the logits come out rounded to bf16, as HF's and vLLM's do.
            return F.linear(hidden.to(head.dtype), head).float()
        # Elsewhere a 16-bit head is widened once, not at every step (torch has no
        # 16-bit x 16-bit -> float32 product off the GPU), for exact float32 logits.
        if self._head32 is None or self._head32[0] is not head:
            self._head32 = (head, head.float())
        return self.linear(hidden.float(), self._head32[1])

    def linear(self, x, weight, out=None):
        if out is not None:   # the same products as without it (no graphs here: nothing to save)
            return out.copy_(self.linear(x, weight))
        if isinstance(weight, PackedBlocks):
            return weight.matmul(x)
        if x.device.type == "cpu" and x.dtype == torch.float32 and ONEDNN:
            # oneDNN's inner product: a float32 decode step's GEMMs take 118-125 ms where MKL's
            # sgemm (F.linear, what HF runs) takes 190-203 ms at 8-16 rows, and 63 vs 90 ms
            # at one (2-core AVX2 EPYC, benchmarks/cpu_matmul.py). Same float32 products.
            return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        return F.linear(x, weight)

    def silu_and_mul(self, x):
        if cpu_ops.runs_pointwise(x):
            return cpu_ops.silu_mul(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def sample(self, logits, sampling: SamplingTensors, out=None):
        tokens = self._sample(logits.float(), sampling)
        return tokens if out is None else out.copy_(tokens)

    @staticmethod
    def _sample(logits: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        greedy = logits.argmax(dim=-1)
        # argmax takes a row's first NaN where it has one, so this finds both kinds of failed row.
        failed = ~(logits.gather(-1, greedy[:, None])[:, 0] > -math.inf)
        return torch.where(failed, NO_TOKEN, TorchOps._sampled(logits, greedy, sampling))

    @staticmethod
    def _sampled(logits: torch.Tensor, greedy: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        if sampling.all_greedy:
            return greedy
        temperature = sampling.temperature.clamp_min(1e-6)[:, None]
        scaled = logits / temperature
        if sampling.any_filter:
            scaled = filter_logits(scaled, sampling.top_k, sampling.top_p)
        noise = uniform_noise(sampling.seeds, sampling.counters, logits.shape[-1])
        sampled = (scaled - torch.log(-torch.log(noise))).argmax(dim=-1)
        return torch.where(sampling.temperature == 0, greedy, sampled)
