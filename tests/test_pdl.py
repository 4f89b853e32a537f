"""Which edges of a captured graph engine.ops.pdl makes programmatic (the choice; the driver
calls that rewrite the graph run on the GPU, tests/gpu/test_model_cuda.py)."""
from engine.ops.pdl import OUR_KERNELS, edges_to_make_programmatic


def test_only_edges_between_two_of_our_kernels_become_programmatic():
    names = {1: "gemv_norm_qkv_rope_bf16", 2: "attn_decode_bf16_d64_g3", 3: "gemv_plain_bf16",
             4: "nvjet_sm90_tst_24x64_64x16_4x2_h_bz_TNN",   # cuBLAS: launched without pdl_start
             5: None,                                       # a copy or memset node
             6: "sample_bf16"}
    edges = [(1, 2), (2, 3), (3, 4), (4, 6), (3, 5), (5, 6), (3, 6)]
    assert edges_to_make_programmatic(edges, names.get) == [(1, 2), (2, 3), (3, 6)]


def test_our_kernels_are_the_kernel_tables():
    assert {"embed_rows", "plan_decode", "gemv_silu_bf16", "attn_prefill_f16_d128_m1", "sample_f32"} <= OUR_KERNELS
    assert not any(name.startswith(("nvjet", "void at::")) for name in OUR_KERNELS)
