"""Host cost of launching one kernel from Python, eager: what an eager prefill pays per
kernel (a captured decode graph pays it once, at capture). The rms_norm kernel on one row,
launched 2,000 times back to back, host time per launch; and the whole op (allocation and
checks included); medians of 5 rounds, after a warm-up. Then the host time of one eager
forward pass of the model (dummy weights) over a 16-token prompt, per layer: a prefill
step is host-bound when this, times the layers, exceeds its GPU time.

    python3 benchmarks/launch_cost.py [--model dummy:smollm2-135m]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine import LLM  # noqa: E402
from engine.model_runner import StepLayout  # noqa: E402
from engine.ops.cuda_ops import CudaOps  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402
from engine.scheduler import NewRequest, SchedulerOutput  # noqa: E402

LAUNCHES, ROUNDS = 2000, 5


def host_us(call, launches: int = LAUNCHES) -> float:
    for _ in range(min(200, launches)):
        call()
    torch.cuda.synchronize()
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(launches):
            call()
        rounds.append((time.perf_counter() - start) / launches * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def forward_host_us(model: str, tokens: int = 16) -> tuple[float, int]:
    """Host µs of one eager forward over a `tokens`-token prompt (the GPU's work is a
    few µs a kernel, so the host never waits for it), and the model's layer count."""
    llm = LLM(model, backend="cuda", enforce_eager=True, kv_cache_tokens=4096)
    runner = llm.runner
    ids = np.arange(100, 100 + tokens, dtype=np.int32)
    out = SchedulerOutput(new_requests=[NewRequest(0, ids, tokens, SamplingParams(), 0,
                                                   llm.block_manager.allocate(0, tokens))],
                          request_ids=[0], num_scheduled_tokens=[tokens], num_computed_tokens=[0], samples=[True])
    batch = runner.input_batch
    inputs = runner._step_inputs(batch, StepLayout.of(batch.apply(out), out))
    dev = runner.inputs.upload(vars(inputs))
    meta = runner._metadata(inputs, dev)
    return host_us(lambda: llm.model.forward(dev["token_ids"], dev["positions"], meta, llm.kv_cache),
                   launches=50), llm.model_config.num_layers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="dummy:smollm2-135m")
    args = ap.parse_args()
    ops = CudaOps()
    x = torch.randn(1, 576, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(576, device="cuda", dtype=torch.bfloat16)
    out, residual = torch.empty_like(x), torch.empty(x.shape, dtype=torch.float32, device="cuda")
    kernel = ops._k["rms_norm", "bf16"]   # the launcher itself, without the op around it
    launch = host_us(lambda: kernel(1, 128, x, None, weight, out, residual, 1, 576, 1e-5))
    op = host_us(lambda: ops.rms_norm(x, weight, 1e-5, None))
    print(f"kernel launch (rms_norm, 1 row, eager): {launch:.2f} us host time per launch; "
          f"the whole op: {op:.2f} us (medians of {ROUNDS} rounds of {LAUNCHES})")
    forward, layers = forward_host_us(args.model)
    print(f"eager forward of 16 tokens ({args.model}): {forward / 1e3:.2f} ms host time, "
          f"{forward / layers:.1f} us a layer")


if __name__ == "__main__":
    main()
