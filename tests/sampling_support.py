"""Sampler inputs shared by the CPU tests of the torch sampler and the GPU tests of the kernel."""
from __future__ import annotations

import torch

from engine.ops.base import SamplingTensors


def sampling_tensors(B, temperature, top_k=0, top_p=1.0, device="cuda"):
    dev = lambda x, t: torch.as_tensor(x, dtype=t).to(device)  # noqa: E731
    temp = dev(temperature, torch.float32).expand(B).contiguous()
    tk = dev(top_k, torch.int32).expand(B).contiguous()
    tp = dev(top_p, torch.float32).expand(B).contiguous()
    return SamplingTensors(temperature=temp, top_k=tk, top_p=tp,
                           seeds=torch.randint(-2**62, 2**62, (B,), device=device),
                           counters=torch.randint(0, 5000, (B,), device=device),
                           all_greedy=bool((temp == 0).all()), any_filter=bool(((tk > 0) | (tp < 1)).any()))


def no_token_logits(V: int = 1000) -> torch.Tensor:
    """Rows 0 and 3 sample normally; 1 has one NaN, 2 is all NaN, 4 has nothing above -inf."""
    logits = torch.randn(5, V)
    logits[1, 7] = float("nan")
    logits[2] = float("nan")
    logits[4] = -float("inf")
    return logits
