"""The one place the engine waits for the device, so host syncs are counted, not guessed."""
from __future__ import annotations

import torch


class HostSyncCounter:
    def __init__(self) -> None:
        self.count = 0

    def to_host(self, tensor: torch.Tensor) -> list:
        """Copy a device tensor to a Python list, blocking until it is ready."""
        if tensor.device.type != "cpu":
            self.count += 1
        return tensor.tolist()
