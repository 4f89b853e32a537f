"""gemv_o_mlp's launch shape (engine.ops.cuda_ops.o_mlp_launch): its grid barrier deadlocks
unless every block is resident at once, so the grid may not pass one block per SM; and a
warp owns one feature of each phase, so the grid's warps must cover the widest phase."""
import math

import pytest

from engine.ops.cuda_ops import o_mlp_launch
from engine.ops.kernel_table import constant

MAX_WARPS = constant("O_MLP_MAX_WARPS")


def test_smollm2_135m_runs_fused_on_an_h200():
    assert o_mlp_launch(576, 1536, 132) == (128, 12)


@pytest.mark.parametrize("H,I", [(576, 1536), (960, 2560), (2048, 8192), (64, 8), (1536, 576)])
@pytest.mark.parametrize("num_sms", [1, 16, 78, 132, 144])
def test_the_grid_fits_one_block_per_sm_and_covers_every_feature(H, I, num_sms):
    launch = o_mlp_launch(H, I, num_sms)
    if math.ceil(max(H, I) / num_sms) > MAX_WARPS:
        assert launch is None
        return
    blocks, warps = launch
    assert blocks <= num_sms and warps <= MAX_WARPS
    assert blocks * warps >= max(H, I) > (blocks - 1) * warps      # no block without work


def test_a_layer_too_wide_for_one_block_per_sm_is_not_fused():
    assert o_mlp_launch(2048, 8192, 132) is None                    # the Llama-3.2-1B shape
