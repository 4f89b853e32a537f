"""engine.ops.tensor_map on CPU: what it refuses before it asks the driver, and the kernel
launcher's ctypes form of a map argument (cuda_build._CTYPES), byte for byte. The maps
themselves are checked on the GPU (tests/gpu/test_kernels.py's gemm_tma tests)."""
import ctypes

import pytest

from engine.ops import cuda_build
from engine.ops.tensor_map import MAP_BYTES, swizzled_rows_map


@pytest.mark.parametrize("address,rows,cols,box_rows", [
    (0x1008, 128, 64, 128),    # the matrix not 16-byte aligned
    (0x1000, 128, 60, 128),    # rows of 120 bytes: the row stride not a multiple of 16
    (0x1000, 128, 64, 0),      # an empty box
    (0x1000, 512, 64, 257),    # a box taller than the TMA unit's 256 rows
])
def test_a_map_the_tma_unit_cannot_read_is_refused_before_the_driver(address, rows, cols, box_rows):
    with pytest.raises(ValueError, match="no TMA map"):
        swizzled_rows_map(address, rows, cols, "bf16", box_rows)


def test_a_map_argument_reaches_the_driver_byte_for_byte():
    image = bytes(range(MAP_BYTES))
    argument = cuda_build._CTYPES["T"](image)
    assert ctypes.sizeof(argument) == MAP_BYTES
    assert ctypes.string_at(ctypes.addressof(argument), MAP_BYTES) == image
    assert cuda_build._CTYPES["i"](-3).value == -3 and cuda_build._CTYPES["P"](1 << 40).value == 1 << 40
