"""Block manager, scheduler and sampling params without a model."""
from __future__ import annotations

import pytest
import torch

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.ops.torch_ops import TorchOps, filter_logits, uniform_noise
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence


def seq(rid: int, n: int, start: int = 0) -> Sequence:
    return Sequence(rid, list(range(start, start + n)), SamplingParams(max_tokens=4), rid)


def computed(bm: BlockManager, s: Sequence) -> Sequence:
    """Give the sequence blocks for all its tokens and publish them as computed."""
    bm.allocate(s, s.num_tokens)
    s.num_computed_tokens = s.num_tokens
    bm.register_computed_blocks(s)
    return s


def test_blocks_are_refcounted_and_prefix_shared():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = computed(bm, seq(0, 10))              # two full blocks published
    assert len(a.block_table) == 3 and bm.num_free_blocks == 5
    b = seq(1, 11)                            # same first 10 tokens
    assert bm.acquire_cached_prefix(b) == 8
    assert b.block_table == a.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table] == [2, 2, 1]
    bm.release(a)
    assert bm.num_free_blocks == 6            # shared blocks still held by b
    bm.release(b)
    assert bm.num_free_blocks == 8
    c = seq(2, 9)                             # freed blocks keep their contents until reused
    assert bm.acquire_cached_prefix(c) == 8
    assert bm.stats.hits == 4


def test_prefix_hit_always_leaves_a_token_to_compute():
    bm = BlockManager(num_blocks=8, block_size=4)
    computed(bm, seq(0, 8))
    b = seq(1, 8)                             # identical 8-token prompt
    assert bm.acquire_cached_prefix(b) == 4   # last block recomputed for logits


def test_reset_prefix_cache_forgets_every_prefix_but_only_when_idle():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = computed(bm, seq(0, 10))
    assert not bm.reset_prefix_cache()        # a sequence holds blocks: its state, not cache
    b = seq(1, 10)
    assert bm.acquire_cached_prefix(b) == 8   # nothing was forgotten
    bm.release(a)
    bm.release(b)
    assert bm.reset_prefix_cache()
    assert bm.cached == {} and bm.num_free_blocks == 8
    assert bm.acquire_cached_prefix(seq(2, 10)) == 0   # the same prompt now computes every block


def test_eviction_reuses_lru_cached_blocks():
    bm = BlockManager(num_blocks=2, block_size=4)
    bm.release(computed(bm, seq(0, 5)))
    big = seq(1, 8, start=100)                # needs both blocks: evicts the cached one
    bm.allocate(big, 8)
    assert bm.cached == {} and bm.num_free_blocks == 0
    assert bm.acquire_cached_prefix(seq(2, 5)) == 0


def test_scheduler_respects_token_budget_and_seq_limit():
    s = Scheduler(EngineConfig("test", max_num_seqs=2, max_num_batched_tokens=10), BlockManager(64, 4))
    for i in range(3):
        s.add(seq(i, 7, start=10 * i))
    batch = s.schedule()
    assert [x.request_id for x in batch.seqs] == [0, 1] and batch.num_new_tokens == [7, 3]
    # Seq 0's prompt is done after this step (it samples); 4 of seq 1's are left.
    assert [x.num_uncomputed_tokens - n for x, n in zip(batch.seqs, batch.num_new_tokens)] == [0, 4]
    s.commit(batch)
    batch.seqs[0].append_pending()                      # sampled; its value not read yet
    batch = s.schedule()                                  # decode + rest of prefill; seq 2 waits
    assert [x.request_id for x in batch.seqs] == [0, 1] and batch.num_new_tokens == [1, 4]
    assert [x.request_id for x in s.waiting] == [2]


def test_scheduler_preempts_latest_when_blocks_run_out():
    s = Scheduler(EngineConfig("test", max_num_seqs=4, max_num_batched_tokens=64), BlockManager(4, 4))
    a, b = seq(0, 8), seq(1, 8, start=50)
    s.add(a)
    s.add(b)
    batch = s.schedule()
    assert batch.seqs == [a, b]
    s.commit(batch)
    a.append_pending()                        # a needs a third block: none free
    batch = s.schedule()
    assert batch.seqs == [a] and s.stats.preemptions == 1
    assert list(s.waiting) == [b] and b.num_computed_tokens == 0 and b.block_table == []


def test_scheduler_skips_sequences_out_of_budget_and_drops_finished_waiting_ones():
    s = Scheduler(EngineConfig("test", max_num_seqs=4, max_num_batched_tokens=64), BlockManager(4, 4))
    a, b = seq(0, 8), seq(1, 8, start=50)
    s.add(a)
    s.add(b)
    s.commit(s.schedule())
    a.append_pending()                        # a needs a third block: none free
    b.append_pending()
    b.out_of_budget = True                    # its last token is in flight: no further step
    batch = s.schedule()
    assert batch.seqs == [a] and s.stats.preemptions == 1 and list(s.waiting) == [b]
    s.finish(b)                               # reading its in-flight token finishes it
    assert not s.waiting and s.running == [a]


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


def test_filter_logits_keeps_top_k_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.5, 0.3, 0.15, 0.05]]))
    out = filter_logits(logits, torch.tensor([2, 0]), torch.tensor([1.0, 0.7]))
    assert torch.isfinite(out[0]).tolist() == [True, True, False, False]
    assert torch.isfinite(out[1]).tolist() == [True, True, False, False]   # 0.5 + 0.3 >= 0.7


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
