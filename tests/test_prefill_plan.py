"""The prefill step's plan on the host (engine.ops.cuda_ops.PrefillTiles): the K/V tiles each
row of the prefill grid reads, and how the wgmma kernel splits the longest tiles' keys; and
the tile width gemm_tma takes for a projection. Pure numpy and arithmetic, so checked here
without a GPU; tests/gpu/test_kernels.py runs the kernels."""
import numpy as np
import pytest

from engine.ops.cuda_ops import PrefillTiles, gemm_tma_width

H200_SLOTS = {1: 528, 2: 264, 3: 132}   # 132 SMs: 4 blocks of 64 query rows an SM, 2 of 128, 1 of 192


def plan(query_lens, seq_lens) -> PrefillTiles:
    return PrefillTiles.of_step(np.array(query_lens), np.array(seq_lens))


def test_each_grid_row_counts_its_longest_key_chain():
    # Grid rows run each sequence's tiles backwards: row 0 holds every sequence's last tile.
    # [130 after 70 cached], 64-row tiles: they read 134, 198 and 200 keys, 3, 4 and 4 K/V
    # tiles of 64; [1 after 899]: one tile, 900 keys, 15 K/V tiles, in the first's grid row.
    p = plan([130, 1], [200, 900])
    assert p.by_m_tiles == {1: 4, 2: 3, 3: 2}
    rows, total = p.key_tiles(1)
    assert rows.tolist() == [4, 4, 15] and total == 3 + 4 + 4 + 15
    rows, total = p.key_tiles(2)                   # 128-row tiles: 198 and 200 keys
    assert rows.tolist() == [4, 15] and total == 4 + 4 + 15
    rows, total = p.key_tiles(3)                   # 192-row tiles (the warp-specialized kernel's): 200 keys
    assert rows.tolist() == [15] and total == 4 + 15


def test_key_tiles_agree_with_a_loop_over_every_tile():
    from engine.ops.cuda_ops import _PREFILL_KEYS, _PREFILL_ROWS_PER_M_TILE
    rng = np.random.default_rng(3)
    for _ in range(300):
        query_lens = rng.integers(1, 9000, int(rng.integers(1, 30)))
        seq_lens = query_lens + rng.integers(0, 3000, len(query_lens)) * rng.integers(0, 2, len(query_lens))
        p = plan(query_lens, seq_lens)
        for m_tiles in (1, 2, 3):
            rows = _PREFILL_ROWS_PER_M_TILE * m_tiles
            most = max(-(-n // rows) for n in query_lens)
            expected, total = [0] * most, 0
            for n, length in zip(query_lens.tolist(), seq_lens.tolist()):
                for t in range(-(-n // rows)):           # tile t from the first, at grid row most - 1 - t
                    kv = -(-(length - n + min(n, (t + 1) * rows)) // _PREFILL_KEYS)
                    expected[most - 1 - t] = max(expected[most - 1 - t], kv)
                    total += kv
            got, got_total = p.key_tiles(m_tiles)
            assert got.tolist() == expected and got_total == total


@pytest.mark.parametrize("query_lens,seq_lens,m_tiles,split", [
    # One 4,000-token prompt: its 63 tiles read 1 .. 63 K/V tiles, 18,144 at 9 heads, a share
    # of 35 a slot; the longest reads 1.8 shares: two parts, every row split (819 blocks,
    # more than one wave: the grid must stay longest first).
    ([4000], [4000], 1, (2, 63)),
    ([4000], [4000], 2, (2, 32)),               # 128-row tiles read 2 .. 63, a share of 36
    ([3000], [3000], 1, (3, 47)),               # a share of 20
    ([1000], [1000], 1, (2, 8)),                # 8 rows past the share of 8: 216 blocks, one wave
    ([6000], [6000], 2, (1, 0)),                # the longest reads 1.2 shares of 77: not worth it
    ([4000], [4000], 3, (1, 0)),                # 192-row tiles read 3 .. 63, 1.3 shares of 48 (132 slots)
    ([3000], [3000], 3, (2, 16)),               # 3 .. 48: 1.7 shares of 28
    ([1000] * 64, [1000] * 64, 1, (1, 0)),      # many blocks: balanced as they are
    ([400], [400], 1, (1, 0)),                  # chains of 7 K/V tiles: not worth a merge
    ([64], [8000], 1, (4, 1)),                  # one tile after a long prefix: 4 parts at most
    ([64], [8000], 2, (4, 1)),
    ([256, 256, 1], [8000, 256, 300], 1, (4, 4)),   # the split rows hold short tiles too
])
def test_the_longest_tiles_are_split_only_where_they_would_set_the_time(query_lens, seq_lens, m_tiles, split):
    assert plan(query_lens, seq_lens).split(9, m_tiles, H200_SLOTS[m_tiles]) == split


def test_a_mixed_steps_decode_rows_keep_its_prompt_whole():
    # A 3,000-token chunk beside 200 decode rows: its tiles would be worth splitting, but the
    # workspace holds every (sequence, row) of the grid: 201 x 47 x 9 heads x 2 parts.
    alone = plan([3000, 1], [3000, 100]).split(9, 1, H200_SLOTS[1])
    assert alone[0] > 1
    assert plan([3000] + [1] * 200, [3000] + [100] * 200).split(9, 1, H200_SLOTS[1]) == (1, 0)


def test_more_heads_fill_the_gpu_without_a_split():
    # The same prompt at 32 heads (the Llama-3.2-1B shape) makes 32 / 9 times the blocks.
    assert plan([2000], [2000]).split(9, 1, H200_SLOTS[1]) == (4, 32)
    assert plan([2000], [2000]).split(32, 1, H200_SLOTS[1]) == (1, 0)


def test_a_lone_short_prompt_is_the_one_whose_split_blocks_fit_one_wave_of_the_64_row_ws_kernel():
    # CudaOps.prefill_short_ws: the warp-specialized kernel's 64-row tiles, 2 blocks an SM on
    # 132 SMs (264 slots), where all the blocks of its split run at once. 1 x 1,000: 16 tiles,
    # 8 of them split in 2, x 9 heads = 216 blocks; 1 x 1,500: 24 tiles in 3 parts = 648.
    ws_slots = 264
    assert plan([1000], [1000]).blocks(9, 1, ws_slots) == 9 * (16 + 8) == 216
    assert plan([1500], [1500]).blocks(9, 1, ws_slots) == 9 * (24 + 2 * 24) == 648
    fits = {tuple(q): plan(q, q).blocks(9, 1, ws_slots) <= ws_slots
            for q in ([600], [1000], [100, 200], [1025], [1500], [2000], [1000] * 8)}
    assert fits == {(600,): True, (1000,): True, (100, 200): True, (1025,): False, (1500,): False,
                    (2000,): False, (1000,) * 8: False}
    assert plan([4000], [4000]).blocks(9, 3, H200_SLOTS[3]) == 9 * 21     # unsplit: its tiles


@pytest.mark.parametrize("M,N,width", [
    (8192, 576, 192),    # o, down: 256 wastes a quarter of the last tile; 3 tiles of 192 fit exactly
    (8192, 960, 256),    # q|k|v: 128 pairs of tiles of 256 are 2 rounds on 66 clusters, 160 of 192 would be 3
    (4096, 960, 256),    # 64 pairs: 1 round of 256 against 80 pairs, 2 rounds of 192
    (2048, 960, 192),    # 32 pairs of 256 or 40 of 192: one round either way, the narrower one shorter
    (64 * 1000, 960, 192),   # 16 rounds of 256 against 19 of 192: 4,096 W rows against 3,648
])
def test_gemm_tma_takes_the_width_whose_rounds_are_shortest(M, N, width):
    assert gemm_tma_width(M, N, num_sms=132) == width


@pytest.mark.parametrize("M,width", [
    (2048, 128),   # 96 pairs of cooperative tiles, 2 rounds on 66 clusters (512 W rows), against 3 of ping-pong (384)
    (512, 128),    # 24 pairs or 48: one round either way, the narrower one shorter
    (4096, 256),   # 3 rounds of 256 or 6 of 128: a tie
    (8192, 256),   # 6 rounds of 256 or 12 of 128: a tie
])
def test_the_fused_gate_up_takes_the_cooperative_tiles_unless_a_round_would_idle(M, width):
    assert gemm_tma_width(M, 1536, num_sms=132, silu=True) == width   # SmolLM2's 1,536 outputs


def test_gemm_tma_keeps_the_wide_tile_on_a_tie():
    # 50 pairs of row tiles: 150 work items of 256 (3 rounds on 66 clusters) or 200 of 192 (4)
    assert gemm_tma_width(50 * 256, 768, num_sms=132) == 256
