"""benchmarks/copy_ceiling.py: the card's copy rate, which the decode roofline is drawn at."""
from __future__ import annotations

import pytest
import torch

from benchmarks.copy_ceiling import copy_ceiling

pytestmark = pytest.mark.gpu

# The fastest HBM among the cards these benchmarks run on: the H200's 4.8 TB/s. A copy reads
# and writes each byte, so bytes read + written a second cannot pass it; a rate above it
# would mean the buffers sat in L2, or the bytes were counted twice.
FASTEST_HBM = 4.8e12


def test_the_copy_rate_is_a_plausible_hbm_rate_and_frees_its_buffers():
    allocated = torch.cuda.memory_allocated()
    rate = copy_ceiling(nbytes=1 << 29, reps=5)
    assert 1e12 < rate <= FASTEST_HBM
    assert torch.cuda.memory_allocated() == allocated

