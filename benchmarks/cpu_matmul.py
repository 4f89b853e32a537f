"""The GEMMs of one decode step on CPU, by how they are computed: why the torch backend's
float32 path is bound by them, and what quantized weights would buy.

A decode step of SmolLM2-135M on the torch backend spends three quarters of its time in
aten::mm (torch.profiler over chat-16x64, 2-core AVX2 EPYC). This times, for 1, 8, 16 and
64 rows, every layer's projections (q|k|v, o, gate|up, down; x30) plus the 49,152-row head,
each way torch offers on CPU:
  mkl        F.linear, float32 (MKL sgemm): what the float32 path and HF run
  onednn     oneDNN's inner product, float32 (torch.ops.mkldnn._linear_pointwise)
  int8-bf16  int8 weights per output channel, bf16 activations (aten._weight_int8pack_mm)
  int4-bf16  int4 weights in groups of 32 (Q4_1's own layout), bf16 activations
             (aten._weight_int4pack_mm_for_cpu)
  int4-own   the same weights through our kernel (engine/cpu_int4.c: bf16 on AVX-512 BF16, float32 on AVX2)
  fbgemm-int8 int8 weights, activations quantized per tensor per call (quantized.linear_dynamic)
Random weights of the real shapes; median of --repeats timed calls after a warm-up, each
call on weights the previous ones evicted from cache (the step streams 540 MB in float32).
Each method x rows lands in the results store as micro-benchmark `cpu-gemm-step`
(figure gemm_step_s) unless --no-store.
Usage: python3 benchmarks/cpu_matmul.py [--rows 1 8 16 64] [--repeats 5] [--no-store]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine import cpu_int4  # noqa: E402
from jobs.host_facts import cpu_class  # noqa: E402
from jobs.store.models import utcnow  # noqa: E402

LAYERS = 30
LAYER_SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}
HEAD_SHAPE = (49152, 576)
GROUP = 32


def int8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scales = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)
    return torch.round(w / scales[:, None]).to(torch.int8), scales


def methods(w: torch.Tensor) -> dict:
    """name -> a function of the activations x [M, K] (float32), for this one weight."""
    w8, s8 = int8_weight(w)
    n, k = w.shape
    groups = w.reshape(n, k // GROUP, GROUP)
    low, high = groups.amin(-1), groups.amax(-1)
    scale = ((high - low) / 15).clamp_min(1e-12)
    q4 = torch.round((groups - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
    packed4 = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q4, 8)
    scale_zero = torch.stack([scale, low + 8 * scale], -1).transpose(0, 1).contiguous().bfloat16()
    qweight = torch.quantize_per_channel(w, s8.double(), torch.zeros(n, dtype=torch.long), 0, torch.qint8)
    packed8 = torch.ops.quantized.linear_prepack(qweight, None)
    s8b = s8.bfloat16()
    own = {}
    if cpu_int4.available():
        nibble_pairs, factors = cpu_int4.pack(q4, scale.half().float(), low.half().float())
        own["int4-own"] = lambda x: cpu_int4.matmul(x, nibble_pairs, factors, n)
    return {
        "mkl": lambda x: F.linear(x, w),
        "onednn": lambda x: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""),
        "int8-bf16": lambda x: torch.ops.aten._weight_int8pack_mm(x.bfloat16(), w8, s8b),
        "int4-bf16": lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x.bfloat16(), packed4, GROUP, scale_zero),
        "fbgemm-int8": lambda x: torch.ops.quantized.linear_dynamic(x, packed8, True),
        **own,
    }


def step_seconds(calls: list, x_by_k: dict, repeats: int) -> float:
    """Median wall time of one step's calls, in order; one untimed step first."""
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        for k, fn in calls:
            fn(x_by_k[k])
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8, 16, 64])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-store", action="store_true", help="print only; record nothing in the results store")
    args = ap.parse_args()
    torch.manual_seed(0)
    # Distinct weights per layer, as in the model: a step streams them all, cache-cold.
    weights = [torch.randn(*shape) * 0.02 for _ in range(LAYERS) for shape in LAYER_SHAPES.values()]
    weights.append(torch.randn(*HEAD_SHAPE) * 0.02)
    prepared = [methods(w) for w in weights]
    names = list(prepared[0])
    print(f"CPU class {cpu_class()}, {torch.get_num_threads()} threads; GEMM seconds of one decode step "
          f"({LAYERS} layers + head)")
    print(f"{'rows':>5}" + "".join(f"{n:>13}" for n in names))
    for rows in args.rows:
        x_by_k = {k: torch.randn(rows, k) for k in {w.shape[1] for w in weights}}
        figures = {}
        for name in names:
            started = utcnow()
            calls = [(w.shape[1], m[name]) for w, m in zip(weights, prepared)]
            figures[name] = step_seconds(calls, x_by_k, args.repeats)
            if not args.no_store:
                from jobs.microbench import record_microbench
                record_microbench("cpu-gemm-step", {"method": name, "rows": rows, "layers": LAYERS,
                                                    "model_shapes": "smollm2-135m"},
                                  {"gemm_step_s": figures[name]}, started, utcnow())
        print(f"{rows:>5}" + "".join(f"{figures[n] * 1e3:>11.1f}ms" for n in names))


if __name__ == "__main__":
    main()
