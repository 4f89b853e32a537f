"""Latency and throughput figures from per-token timestamps.

TTFT = first token - arrival; TPOT = (E2E - TTFT) / (output tokens - 1);
ITL = every gap between consecutive tokens; E2E = finish - arrival.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

LATENCIES = ("ttft", "tpot", "itl", "e2e")


@dataclass
class Completion:
    """One request as any engine (ours or a peer) finished it."""
    index: int
    prompt_tokens: int
    token_ids: list[int]
    finish_reason: str
    arrival: float              # seconds, one clock per run
    token_times: list[float]
    finish: float


def request_row(c: Completion) -> dict:
    n = len(c.token_ids)
    ttft = c.token_times[0] - c.arrival if n else None
    e2e = c.finish - c.arrival
    return {
        "request_index": c.index, "prompt_tokens": c.prompt_tokens, "output_tokens": n,
        "output_token_ids": c.token_ids, "finish_reason": c.finish_reason,
        "ttft_s": ttft, "tpot_s": (e2e - ttft) / (n - 1) if n > 1 else None,
        "itl_s": [b - a for a, b in zip(c.token_times, c.token_times[1:])], "e2e_s": e2e,
    }


def distribution(values: list[float]) -> dict:
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:   # nearest-rank on the sorted values, interpolated
        k = (len(ordered) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)

    return {"count": len(values), "mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99)}


def summarize(rows: list[dict], wall_s: float) -> dict[str, dict]:
    """Run-level metrics under the registry's names: name -> {value, count, mean, p50, ...}."""
    out_tokens = sum(r["output_tokens"] for r in rows)
    in_tokens = sum(r["prompt_tokens"] for r in rows)
    metrics = {
        "output_tok_s": {"value": out_tokens / wall_s, "count": out_tokens},
        "total_tok_s": {"value": (out_tokens + in_tokens) / wall_s, "count": out_tokens + in_tokens},
        "requests_s": {"value": len(rows) / wall_s, "count": len(rows)},
        "wall_s": {"value": wall_s, "count": 1},
    }
    for name in LATENCIES:
        if name == "itl":
            values = [gap for r in rows for gap in r["itl_s"]]
        else:
            values = [r[f"{name}_s"] for r in rows if r[f"{name}_s"] is not None]
        stats = distribution(values)
        if stats["count"]:
            metrics[f"{name}_p50_s"] = {**stats, "value": stats["p50"]}
            metrics[f"{name}_p99_s"] = {**stats, "value": stats["p99"]}
    return metrics


def agreement(ours: list[list[int]], reference: list[list[int]]) -> dict:
    """Share of requests whose tokens match the reference, and where others diverge."""
    matches, divergences = 0, []
    for a, b in zip(ours, reference, strict=True):
        if a == b:
            matches += 1
            continue
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        divergences.append(first)
    return {"agreement": matches / len(ours) if ours else 1.0,
            "first_divergence_p50": statistics.median(divergences) if divergences else None}
