"""The GPU lease on the real GPU (tests/test_gpu_lease.py simulates many on CPU): NVML counts
the host's GPUs, a process leases GPU 0 before CUDA starts, and torch then sees that one device."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]
TASK = """
import json, os
import torch
from jobs import gpu_lease
before = gpu_lease.cuda_initialised()
with gpu_lease.lease(timeout_s=0) as held:
    torch.zeros(1, device="cuda")   # CUDA starts here, on the leased GPU
    print(json.dumps({"index": held.index, "devices": held.devices, "nvml": gpu_lease.device_count(),
                      "visible": os.environ["CUDA_VISIBLE_DEVICES"], "torch_sees": torch.cuda.device_count(),
                      "initialised_before": before, "initialised_after": gpu_lease.cuda_initialised(),
                      "bound_to": gpu_lease.usable_devices(held.devices)}))
"""


def test_a_task_leases_gpu_0_before_cuda_starts_and_torch_sees_only_it(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ROADGATE_GPU_COUNT")}
    child = subprocess.run([sys.executable, "-c", TASK], cwd=REPO, capture_output=True, text=True, timeout=300,
                           env=env | {"ROADGATE_GPU_LEASE_DIR": str(tmp_path)})
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert (got["index"], got["visible"], got["torch_sees"]) == (0, "0", 1)
    assert got["devices"] == got["nvml"] >= 1   # counted by NVML, not simulated
    assert not got["initialised_before"] and got["initialised_after"] and got["bound_to"] == [0]
