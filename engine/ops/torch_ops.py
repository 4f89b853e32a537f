"""Reference ops in plain torch: any device, the oracle for the CUDA kernels."""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from engine.ops.base import AttentionMetadata, SamplingTensors

_MASK32 = 0xFFFFFFFF


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
    bits = _mix32(row[:, None] ^ _mix32(col + 0x9E3779B9)[None, :])
    return ((bits >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))


def filter_logits(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k / top-p nucleus to -inf (the best token always stays)."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    rank = torch.arange(scaled.shape[-1], device=scaled.device)[None, :]
    drop = (probs.cumsum(dim=-1) - probs) >= top_p[:, None]
    drop |= (top_k[:, None] > 0) & (rank >= top_k[:, None].long())
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(scaled).scatter_(-1, order, sorted_logits)


def _attend(q, k, v, mask, scale):
    """softmax(q k^T * scale + mask) v in float32, written out plainly so the
    oracle does not depend on which fused SDPA kernel a device picks.
    q [B, nh, n, d]; k, v [B, nkv, L, d]; mask [B or 1, 1, n or 1, L] bool."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.float().repeat_interleave(groups, dim=1), v.float().repeat_interleave(groups, dim=1)
    scores = torch.matmul(q.float(), k.transpose(-1, -2)) * scale
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.matmul(probs, v).to(q.dtype)


class TorchOps:
    name = "torch"

    def embed(self, token_ids, weight):
        return F.embedding(token_ids, weight)

    def rms_norm(self, x, weight, eps, residual):
        r = x.float() if residual is None else x.float() + residual
        h = r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(x.dtype), r

    def rope_and_cache(self, q, k, v, positions, cos_sin, k_cache, v_cache, slot_mapping):
        cos, sin = cos_sin[positions].chunk(2, dim=-1)
        cos, sin = cos[:, None, :], sin[:, None, :]
        for x in (q, k):
            x1, x2 = x.float().chunk(2, dim=-1)
            x.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1))
        valid = slot_mapping >= 0
        slots = slot_mapping[valid]
        k_cache.view(-1, *k_cache.shape[2:])[slots] = k[valid]
        v_cache.view(-1, *v_cache.shape[2:])[slots] = v[valid]

    def attention(self, q, k_cache, v_cache, meta: AttentionMetadata, scale):
        out = torch.empty_like(q)
        block_size = k_cache.shape[1]
        offsets = [0, *itertools.accumulate(meta.query_lens_host)]
        decode_rows = [i for i, n in enumerate(meta.query_lens_host) if n == 1]
        if decode_rows:
            self._decode(q, k_cache, v_cache, meta, scale, decode_rows, offsets, block_size, out)
        for i, n in enumerate(meta.query_lens_host):
            if n == 1:
                continue
            L = meta.seq_lens_host[i]
            nblocks = -(-L // block_size)
            table = meta.block_tables[i, :nblocks].long()
            k = k_cache[table].flatten(0, 1)[:L]       # [L, nkv, d]
            v = v_cache[table].flatten(0, 1)[:L]
            qi = q[offsets[i]:offsets[i] + n]           # [n, nh, d]
            # Query j sits at absolute position L - n + j and sees keys <= it.
            mask = torch.arange(L, device=q.device)[None, :] <= (L - n + torch.arange(n, device=q.device))[:, None]
            o = _attend(qi.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], mask, scale)
            out[offsets[i]:offsets[i] + n] = o[0].transpose(0, 1)
        return out

    @staticmethod
    def _decode(q, k_cache, v_cache, meta, scale, rows, offsets, block_size, out):
        """All one-token queries at once, over their padded gathered contexts."""
        lens = [meta.seq_lens_host[i] for i in rows]
        nblocks = -(-max(lens) // block_size)
        idx = torch.tensor(rows, device=q.device)
        tables = meta.block_tables[idx, :nblocks].long()
        k = k_cache[tables].flatten(1, 2)               # [R, Lmax, nkv, d]
        v = v_cache[tables].flatten(1, 2)
        mask = torch.arange(k.shape[1], device=q.device)[None, :] < torch.tensor(lens, device=q.device)[:, None]
        # Slots past a row's length hold whatever the cache held: never-written
        # memory can be NaN, and 0 * NaN is NaN, so zero them, not just mask them.
        v = torch.where(mask[:, :, None, None], v, 0)
        tok = torch.tensor([offsets[i] for i in rows], device=q.device)
        qd = q[tok][:, :, None, :]                      # [R, nh, 1, d]
        o = _attend(qd, k.transpose(1, 2), v.transpose(1, 2), mask[:, None, None, :], scale)
        out[tok] = o[:, :, 0, :]

    def silu_and_mul(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def sample(self, logits, sampling: SamplingTensors):
        logits = logits.float()
        greedy = logits.argmax(dim=-1)
        if sampling.all_greedy:
            return greedy
        temperature = sampling.temperature.clamp_min(1e-6)[:, None]
        scaled = logits / temperature
        if sampling.any_filter:
            scaled = filter_logits(scaled, sampling.top_k, sampling.top_p)
        noise = uniform_noise(sampling.seeds, sampling.counters, logits.shape[-1])
        sampled = (scaled - torch.log(-torch.log(noise))).argmax(dim=-1)
        return torch.where(sampling.temperature == 0, greedy, sampled)
