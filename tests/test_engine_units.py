"""Block manager, scheduler and sampling params without a model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import StopChecker
from engine.ops.torch_ops import TorchOps, filter_logits, uniform_from_bits, uniform_noise
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.model_source import resolve
from engine.sequence import Sequence
from tests.conftest import MODEL
from tests.sampling_support import no_token_logits, sampling_tensors


def seq(rid: int, n: int, start: int = 0, max_tokens: int = 4) -> Sequence:
    return Sequence(rid, list(range(start, start + n)), SamplingParams(max_tokens=max_tokens), rid,
                    max_num_tokens=n + max_tokens)


def computed(bm: BlockManager, rid: int, token_ids: list[int]) -> list[int]:
    """Give request `rid` blocks for all its tokens and publish them as computed."""
    bm.allocate(rid, len(token_ids))
    bm.publish_full_blocks(rid, token_ids, len(token_ids))
    return bm.block_table(rid)


def scheduler(num_blocks: int, max_num_seqs: int = 4, budget: int = 64) -> Scheduler:
    return Scheduler(EngineConfig("test", max_num_seqs=max_num_seqs, max_num_batched_tokens=budget),
                     BlockManager(num_blocks, 4), StopChecker(None))


def test_blocks_are_refcounted_and_prefix_shared():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = computed(bm, 0, list(range(10)))      # two full blocks published
    assert len(a) == 3 and bm.num_free_blocks == 5 and len(bm.hashes[0]) == 2
    assert bm.acquire_cached_prefix(1, list(range(11))) == 8      # same first 10 tokens
    assert bm.block_table(1) == a[:2]
    assert [bm.blocks[i].ref_count for i in a] == [2, 2, 1]
    bm.release(0)
    assert bm.num_free_blocks == 6            # shared blocks still held by 1
    bm.release(1)
    assert bm.num_free_blocks == 8 and bm.tables == {} and bm.hashes == {}
    assert bm.acquire_cached_prefix(2, list(range(9))) == 8       # freed blocks keep their contents
    assert bm.stats.hits == 4


def test_prefix_hit_always_leaves_a_token_to_compute():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, 0, list(range(8)))
    assert bm.acquire_cached_prefix(1, list(range(8))) == 4       # last block recomputed for logits


def test_reset_prefix_cache_forgets_every_prefix_but_only_when_idle():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, 0, list(range(10)))
    assert not bm.reset_prefix_cache()        # a request holds blocks: its state, not cache
    assert bm.acquire_cached_prefix(1, list(range(10))) == 8      # nothing was forgotten
    bm.release(0)
    bm.release(1)
    assert bm.reset_prefix_cache()
    assert bm.cached == {} and bm.num_free_blocks == 8
    assert bm.acquire_cached_prefix(2, list(range(10))) == 0      # the same prompt now computes every block


def test_blocks_hit_whether_their_tokens_came_as_a_list_or_an_int32_array():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, 0, list(range(100, 110)))                                    # published from a list
    assert bm.acquire_cached_prefix(1, np.arange(100, 111, dtype=np.int32)) == 8
    bm.allocate(2, 9)
    bm.publish_full_blocks(2, np.arange(200, 209, dtype=np.int32), 9)       # from an array
    assert bm.acquire_cached_prefix(3, list(range(200, 209))) == 8
    assert bm.acquire_cached_prefix(4, list(range(200, 204)) + [0] * 5) == 4  # a different second block


def test_a_cached_block_hits_only_after_the_prefix_it_was_computed_after():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, 0, [1] * 4 + [5] * 4)
    computed(bm, 1, [2] * 4 + [7] * 4)
    assert bm.acquire_cached_prefix(2, [1] * 4 + [7] * 4 + [0]) == 4      # [7] * 4 is cached after [2] * 4 only
    assert bm.acquire_cached_prefix(3, [2] * 4 + [7] * 4 + [0]) == 8


def test_eviction_reuses_lru_cached_blocks():
    bm = BlockManager(num_blocks=2, block_size=4)
    computed(bm, 0, list(range(5)))
    bm.release(0)
    bm.allocate(1, 8)                         # needs both blocks: evicts the cached one
    assert bm.cached == {} and bm.num_free_blocks == 0
    bm.release(1)
    assert bm.acquire_cached_prefix(2, list(range(5))) == 0


def test_blocks_are_taken_least_recently_freed_first_and_never_past_the_free_ones():
    bm = BlockManager(num_blocks=6, block_size=4)
    bm.allocate(0, 12)
    bm.allocate(1, 8)
    bm.release(1)                             # its tail block first: 4, then 3
    assert bm.allocate(2, 12) == [5, 4, 3]    # 5 was never used, so it is freed longest
    with pytest.raises(RuntimeError, match="2 KV blocks wanted, 0 free"):
        bm.grow(3, 2)
    assert 3 not in bm.tables and bm.block_table(2) == [5, 4, 3]


def test_scheduler_respects_token_budget_and_seq_limit_and_emits_diffs():
    s = scheduler(64, max_num_seqs=2, budget=10)
    for i in range(3):
        s.add(seq(i, 7, start=10 * i))
    out = s.schedule()
    assert out.request_ids == [0, 1] and out.num_scheduled_tokens == [7, 3] and out.num_computed_tokens == [0, 0]
    assert [r.request_id for r in out.new_requests] == [0, 1] and out.new_requests[1].token_ids.tolist() == list(range(10, 17))
    # Seq 0's prompt is done after this step: it samples, a placeholder until read.
    assert out.samples == [True, False] and [s.requests[i].num_pending for i in (0, 1)] == [1, 0]
    out = s.schedule()                        # decode + rest of prefill; seq 2 waits
    assert out.request_ids == [0, 1] and out.num_scheduled_tokens == [1, 4] and out.num_computed_tokens == [7, 3]
    assert out.new_requests == [] and out.new_block_ids == {1: [3]} and out.samples == [True, True]
    assert [x.request_id for x in s.waiting] == [2] and s.requests[0].num_pending == 2
    assert s.update_from_output([0], [42], now=1.0) == []
    assert s.requests[0].token_ids[-1] == 42 and s.requests[0].num_pending == 1


def test_scheduler_preempts_latest_when_blocks_run_out():
    s = scheduler(4)
    a, b = seq(0, 8), seq(1, 8, start=50)
    s.add(a)
    s.add(b)
    assert s.schedule().request_ids == [0, 1]
    s.update_from_output([0, 1], [5, 6], now=0.0)       # both sampled one token: a needs a third block
    out = s.schedule()
    assert out.request_ids == [0] and out.preempted_request_ids == [1] and s.stats.preemptions == 1
    assert list(s.waiting) == [b] and b.num_computed_tokens == 0 and s.block_manager.block_table(1) == []
    out = s.schedule()                        # no room for b yet: it waits, nothing more is preempted
    assert out.request_ids == [0] and out.preempted_request_ids == [] and out.new_requests == []


def test_scheduler_finishes_on_stop_tokens_and_length_and_reports_it_once():
    s = scheduler(16)
    a, b = seq(0, 3, max_tokens=2), seq(1, 3, max_tokens=5)
    b.sampling.stop_token_ids = [99]
    s.add(a)
    s.add(b)
    s.schedule()
    assert s.update_from_output([0, 1], [5, 99], now=2.0) == [b]
    assert b.finish_reason == "stop" and b.output_token_ids == [99] and b.finish_time == 2.0
    out = s.schedule()
    assert out.finished_request_ids == [1] and out.request_ids == [0]
    assert a.samples_no_more                  # its second and last token is in flight: no further step
    out = s.schedule()
    assert out.request_ids == [] and out.finished_request_ids == []
    assert s.update_from_output([1], [7], now=3.0) == []           # b's later token was speculative
    assert s.update_from_output([0], [6], now=3.0) == [a]
    assert a.finish_reason == "length" and a.output_token_ids == [5, 6] and not s.has_unfinished()
    assert s.schedule().finished_request_ids == [0] and s.block_manager.num_free_blocks == 16


def test_end_of_sequence_stops_unless_ignored_and_stop_strings_see_every_token():
    tokenizer = resolve(MODEL).tokenizer
    eos = tokenizer.eos_token_ids[0]
    s = Scheduler(EngineConfig("test", max_num_seqs=4, max_num_batched_tokens=64), BlockManager(16, 4),
                  StopChecker(tokenizer))
    plain, ignoring, stringed = seq(0, 3, max_tokens=8), seq(1, 3, max_tokens=8), seq(2, 3, max_tokens=8)
    ignoring.sampling.ignore_eos = True
    stringed.sampling.stop = ["lo wor"]
    for x in (plain, ignoring, stringed):
        s.add(x)
    s.schedule()
    hello, world = tokenizer.encode("Hello"), tokenizer.encode(" world")
    assert s.update_from_output([0, 1, 2], [hello[0], eos, hello[0]], now=1.0) == []
    s.schedule()
    assert s.update_from_output([0, 1, 2], [eos, eos, world[0]], now=2.0) == [plain, stringed]
    assert plain.finish_reason == stringed.finish_reason == "stop" and ignoring.output_token_ids == [eos, eos]


def test_a_sequence_keeps_its_prompt_as_int32_and_its_known_tokens_current():
    s = Sequence(0, [5, 6, 7], SamplingParams(max_tokens=4), seed=0, max_num_tokens=7)
    assert s.prompt.dtype == np.int32 and not s.prompt.flags.writeable
    s.append_token(8, now=1.0)
    assert s.tokens_holder(3) is s.prompt                # the prompt's tokens come from its array
    assert s.token_ids == [5, 6, 7, 8] and s.num_known == 4 and s.output_token_ids == [8]
    s.append_token(9, now=2.0)                           # the known list, once made, follows outputs
    assert s.tokens_holder(5) == [5, 6, 7, 8, 9] and s.num_tokens == 5 and s.token_times == [1.0, 2.0]
    assert s.prompt_token_ids == [5, 6, 7] and s.num_output_tokens == 2


def test_full_blocks_are_published_once_computed_and_known():
    s = scheduler(16)
    a = seq(0, 7)
    s.add(a)
    s.schedule()                              # 7 prompt tokens: one full block, published once launched
    assert len(s.block_manager.hashes[0]) == 0 and a.num_published_tokens == 0
    s.publish_computed_blocks()
    assert len(s.block_manager.hashes[0]) == 1 and a.num_published_tokens == 4
    s.schedule()                              # the 8th token fills block 2, but its value is in flight
    assert len(s.block_manager.hashes[0]) == 1
    s.update_from_output([0], [50], now=0.0)
    s.schedule()                              # now known: block 2 is counted...
    s.schedule()                              # ...and published by the next schedule, if not before
    assert len(s.block_manager.hashes[0]) == 2 and a.num_published_tokens == 8
    b = Sequence(1, a.token_ids[:8] + [99], SamplingParams(max_tokens=4), 1, max_num_tokens=13)
    s.add(b)                                  # a's first 8 tokens: both blocks hit
    out = s.schedule()
    assert out.new_requests[0].request_id == 1 and b.num_computed_tokens == 9 and out.num_computed_tokens[-1] == 8


def test_a_preempted_sequence_finished_by_its_in_flight_token_leaves_the_queue():
    s = scheduler(4)
    a, b = seq(0, 8), seq(1, 8, start=50, max_tokens=1)
    s.add(a)
    s.add(b)
    s.schedule()                              # both prompts; both sample
    # a's pending token needs a third block; b's only token is still in flight.
    assert s.schedule().preempted_request_ids == [1] and b.num_pending == 1
    assert s.update_from_output([0, 1], [5, 6], now=0.0) == [b]
    assert b.finish_reason == "length" and b.output_token_ids == [6] and not s.waiting and s.running == [a]


@pytest.mark.parametrize("kwargs, field", [
    ({"max_tokens": 0}, "max_tokens"), ({"temperature": -0.1}, "temperature"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"top_k": -1}, "top_k"),
    ({"stop": [""]}, "stop"),
])
def test_sampling_params_reject_out_of_range(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_noise_is_a_function_of_seed_counter_and_index():
    seeds = torch.tensor([1, 2, 1], dtype=torch.int64)
    counters = torch.tensor([0, 0, 1], dtype=torch.int64)
    u = uniform_noise(seeds, counters, 1000)
    assert ((u > 0) & (u < 1)).all()
    assert torch.equal(u, uniform_noise(seeds, counters, 1000))
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert abs(u.mean().item() - 0.5) < 0.02


def test_uniform_draws_stay_inside_zero_and_one_at_the_extreme_bits():
    # u = 1 gave g = -log(-log u) = +inf: that token won whatever its logit, and a token that
    # top-k had dropped came out as -inf + inf = NaN, which argmax takes.
    u = uniform_from_bits(torch.tensor([0, (1 << 32) - 1]))
    assert ((u > 0) & (u < 1)).all()
    assert torch.isfinite(-torch.log(-torch.log(u))).all()


def test_filter_logits_keeps_top_k_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    out = filter_logits(logits, torch.tensor([2, 0]), torch.tensor([1.0, 0.7]))
    assert torch.isfinite(out[0]).tolist() == [True, True, False, False]
    assert torch.isfinite(out[1]).tolist() == [True, True, False, False]   # 0.5 + 0.3 >= 0.7


def test_filter_logits_keeps_every_token_tied_at_the_cut():
    # As the CUDA sampler cuts, by value: both 2s stay at top_k 2, and at top_p 0.5 the three
    # tokens of 0.2 stay (strictly above them lies 0.4 < 0.5), where a cut by rank would keep
    # whichever of the tied tokens the sort put first.
    logits = torch.tensor([[3.0, 2.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    out = filter_logits(logits, torch.tensor([2, 1]), torch.tensor([1.0, 1.0]))
    assert torch.isfinite(out).tolist() == [[True, True, True, False], [True, True, True, True]]
    logits = torch.log(torch.tensor([[0.2, 0.4, 0.2, 0.2], [0.2, 0.4, 0.2, 0.2]]))
    out = filter_logits(logits, torch.tensor([0, 4]), torch.tensor([0.5, 0.3]))
    assert torch.isfinite(out[0]).all()
    assert torch.isfinite(out[1]).tolist() == [False, True, False, False]   # 0.4 >= 0.3: only the best


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_row_with_a_nan_or_nothing_above_minus_inf_samples_no_token(temperature):
    from engine.ops.base import NO_TOKEN
    logits = no_token_logits()
    s = sampling_tensors(5, temperature, top_k=50 if temperature else 0, device="cpu")
    tokens = TorchOps().sample(logits, s)
    assert tokens[[1, 2, 4]].tolist() == [NO_TOKEN] * 3
    assert ((tokens[[0, 3]] >= 0) & (tokens[[0, 3]] < 1000)).all()
    if temperature == 0.0:
        assert tokens[[0, 3]].tolist() == logits[[0, 3]].argmax(-1).tolist()


def test_embed_reads_no_token_as_token_zero():
    from engine.ops.base import NO_TOKEN
    table = torch.randn(10, 4)
    assert torch.equal(TorchOps().embed(torch.tensor([3, NO_TOKEN]), table), table[[3, 0]])


@pytest.mark.parametrize("dtype, bound", [(torch.float32, 1e-6), (torch.bfloat16, 2 ** -8)])
def test_cpu_logits_are_float32_within_the_head_dtype_rounding(dtype, bound):
    # bf16 on CPU takes oneDNN's bf16 GEMM, whose output is rounded to bf16 (as HF's
    # and vLLM's bf16 logits are); float32 stays exact to float32 sums.
    head = torch.randn(4096, 64).to(dtype)
    hidden = torch.randn(5, 64).to(dtype)
    out = TorchOps().logits(hidden, head)
    exact = hidden.double() @ head.double().t()
    assert out.dtype == torch.float32 and out.shape == (5, 4096)
    assert ((out.double() - exact).abs() <= exact.abs() * bound + 1e-5).all()


@pytest.mark.parametrize("rows", [1, 8, 64])
def test_cpu_float32_linear_is_exact_to_float32_sums(rows):
    # On CPU the float32 projections go through oneDNN's inner product instead of MKL's sgemm.
    weight, x = torch.randn(960, 576), torch.randn(rows, 576)
    out = TorchOps().linear(x, weight)
    exact = x.double() @ weight.double().t()
    assert out.dtype == torch.float32 and out.shape == (rows, 960)
    assert ((out.double() - exact).abs() <= 1e-5 * (x.double().abs() @ weight.double().abs().t())).all()
