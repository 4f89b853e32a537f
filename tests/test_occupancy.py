"""The occupancy arithmetic that sizes the decode work list and weighs GEMM tiles, on an
H200's limits (tests/gpu/test_kernels.py checks it against the driver's own answer)."""
import pytest

from engine.ops.cuda_build import SmLimits, blocks_per_sm

H200 = SmLimits(registers=65536, threads=2048, blocks=32, shared=233472, reserved_shared=1024)


@pytest.mark.parametrize("registers,blocks", [(72, 7), (80, 6), (96, 5), (128, 4), (166, 3), (255, 2)])
def test_registers_set_the_blocks_of_128_threads(registers, blocks):
    # 166 registers: what the compiler gave the Llama shape's decode kernel, left alone.
    assert blocks_per_sm(H200, 128, registers, shared=0) == blocks


def test_a_quarter_of_the_sm_holds_whole_warps_only():
    # 81 registers round up to 88: 2,816 a warp, so 5 warps in a quarter's 16,384 (not 5.8).
    assert blocks_per_sm(H200, 128, 81, shared=0) == 5
    # 96 threads at 40 registers: 12 warps a quarter, 48 in all, 16 blocks of 3 warps.
    assert blocks_per_sm(H200, 96, 40, shared=0) == 16
    assert blocks_per_sm(H200, 1024, 255, shared=0) == 0      # 8 warps fit, the block has 32


def test_shared_memory_counts_the_reserve_of_every_block():
    assert blocks_per_sm(H200, 128, 32, shared=56 * 1024) == 4       # 4 x 57 KiB: the SM's 228 KiB exactly
    assert blocks_per_sm(H200, 128, 32, shared=56 * 1024 + 1) == 3   # rounded up to 128 bytes, 4 no longer fit
    assert blocks_per_sm(H200, 128, 32, shared=65536) == 3


@pytest.mark.parametrize("threads,registers,blocks", [(1024, 32, 2), (32, 16, 32)])
def test_warps_and_blocks_bound_it_too(threads, registers, blocks):
    assert blocks_per_sm(H200, threads, registers, shared=0) == blocks
