"""Workload lengths: the uniform [min, max] ranges draw what they always drew, and a lognormal
length distribution stays in its range, repeats from its seed and has its long tail."""
from __future__ import annotations

import hashlib
import json
import random
import statistics

import pytest
import yaml

from jobs.errors import WorkloadError
from jobs.workloads import Lognormal, get_workload, load_workloads

# sha256 (first 16 hex digits) of each shipped workload's requests as [prompt, max_tokens]
# pairs, taken before length distributions existed: runs of these workloads stay comparable
# with their history only while they draw exactly these requests.
REQUESTS_DIGEST = {
    "nano-bench": "f67bccab1d27f114",
    "fixed-256x128x128": "6c2b80e4fa784fe3",
    "fixed-64x512x256": "7fb76aff44bcadf4",
    "latency-b1": "f1ac6e38da20a61c",
    "chat-real": "4124a477ceb5dcc0",
    "chat-16x64": "ae0cd8ea31492cdd",
    "cpu-small": "2055f38981906382",
    "cpu-small-q4": "2055f38981906382",
    "cpu-small-bf16": "2055f38981906382",
}


def requests_digest(name: str) -> str:
    pairs = [[r.prompt, r.max_tokens] for r in get_workload(name).requests()]
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(REQUESTS_DIGEST))
def test_uniform_range_workloads_draw_exactly_the_requests_they_drew_before(name):
    assert requests_digest(name) == REQUESTS_DIGEST[name]


def test_the_long_tailed_workload_stays_in_range_repeats_and_has_its_tail():
    workload = get_workload("batch-longtail")
    requests = workload.requests()
    assert requests == workload.requests() and requests != workload.requests(seed=workload.seed + 1)
    prompts = [len(r.prompt) for r in requests]
    outputs = [r.max_tokens for r in requests]
    assert len(requests) == 512
    assert 16 <= min(prompts) and max(prompts) <= 2000 and 8 <= min(outputs) and max(outputs) <= 512
    # Long-tailed: most requests short, the mean pulled up by few long ones reaching toward the cap.
    for lengths, cap in ((prompts, 2000), (outputs, 512)):
        median = statistics.median(lengths)
        assert median < 0.8 * statistics.mean(lengths) and max(lengths) > 0.75 * cap > 4 * median
    # Prefill carries most of the tokens, as in real batch generation.
    assert sum(prompts) > 2 * sum(outputs)


def test_lognormal_draws_follow_the_distribution_they_name():
    """Far from the range's bounds the truncation is negligible: half the draws fall at or
    below the median, and 84% within one sigma above it (the normal's 84.1% in log space)."""
    shape, rng = Lognormal(median=300, sigma=1.0), random.Random(0)
    draws = [shape.draw(rng, 1, 10**7) for _ in range(20_000)]
    assert sum(d <= 300 for d in draws) / len(draws) == pytest.approx(0.5, abs=0.015)
    assert sum(d <= 300 * 2.718281828 for d in draws) / len(draws) == pytest.approx(0.841, abs=0.015)


def test_lognormal_draws_respect_a_range_that_cuts_deep_into_the_distribution():
    """A narrow range, a median at its top, a sigma so small that the CDF rounds to 0 below
    it: every draw is in the range, and all land at the median where the mass is."""
    rng = random.Random(1)
    assert {Lognormal(median=50, sigma=1e-4).draw(rng, 1, 50) for _ in range(1000)} == {50}
    draws = [Lognormal(median=4, sigma=2.0).draw(rng, 3, 6) for _ in range(1000)]
    assert set(draws) == {3, 4, 5, 6}


BASE = {"version": 1, "prompts": {"source": "random_tokens", "count": 4, "input_len": [8, 8]},
        "output_len": [4, 4], "sampling": {"temperature": 0, "ignore_eos": True}, "seed": 0, "hardware": "any",
        "validity": {"min_duration_s": 0.1, "min_requests": 4}}
GOOD = {"distribution": "lognormal", "median": 300, "sigma": 1.0, "range": [16, 2000]}


def with_input_len(tmp_path, input_len):
    spec = {**BASE, "prompts": {**BASE["prompts"], "input_len": input_len}}
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump({"workloads": {"w": spec}}))
    return path


def test_a_good_distribution_spec_is_read_into_its_range_and_shape(tmp_path):
    workload = load_workloads(with_input_len(tmp_path, GOOD))["w"]
    assert workload.input_len == (16, 2000) and workload.input_shape == Lognormal(300.0, 1.0)
    assert workload.output_len == (4, 4) and workload.output_shape is None


@pytest.mark.parametrize("input_len, message", [
    ({**GOOD, "distribution": "normal"}, "field 'prompts.input_len.distribution' must be lognormal "
                                         "(a [min, max] list is uniform), got 'normal'"),
    ({k: v for k, v in GOOD.items() if k != "median"}, "field 'prompts.input_len.median' is missing"),
    ({**GOOD, "median": "long"}, "field 'prompts.input_len.median' must be of type float, got 'long'"),
    ({**GOOD, "median": 3000}, "field 'prompts.input_len.median' must lie in its range [16, 2000], got 3000.0"),
    ({**GOOD, "sigma": 0}, "field 'prompts.input_len.sigma' must be a finite number > 0, got 0.0"),
    ({**GOOD, "sigma": float("inf")}, "field 'prompts.input_len.sigma' must be a finite number > 0, got inf"),
    ({**GOOD, "range": [2000, 16]}, "field 'prompts.input_len.range' must be [min, max] with 1 <= min <= max"),
    ({**GOOD, "mean": 400}, "field 'prompts.input_len.mean' is unknown (a length distribution has "
                            "distribution, median, sigma, range)"),
    ([16], "field 'prompts.input_len' must be [min, max] with 1 <= min <= max, got [16]"),
])
def test_a_bad_length_spec_is_one_line_naming_the_field(tmp_path, input_len, message):
    with pytest.raises(WorkloadError) as error:
        load_workloads(with_input_len(tmp_path, input_len))
    assert str(error.value).startswith(f"workload 'w': {message}")
    assert "\n" not in str(error.value)
