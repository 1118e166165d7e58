"""Reading a device value on the host without stalling the device.

``tensor.item()`` on a GPU waits until every kernel queued before it has run: read a step later, a value still
waits for that later step's queued work, and the device idles while the host catches up. A ``DeferredRead`` copies
the value into page-locked host memory on the device's own queue and records an event after the copy: ``ready()``
asks the event (no wait), ``value()`` waits for this copy alone. On a CPU the value is read at once.
"""

from __future__ import annotations

import torch
from torch import Tensor


class DeferredRead:
    """A device tensor's value on its way to the host (see the module docstring)."""

    def __init__(self, value: Tensor) -> None:
        value = value.detach()
        self.event = None
        if value.device.type == "cuda":
            self.host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            self.host.copy_(value, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = value.cpu()

    def ready(self) -> bool:
        """Whether the value has reached the host (never waits)."""
        return self.event is None or self.event.query()

    def value(self) -> Tensor:
        """The value on the host, waiting for its own copy only."""
        if self.event is not None:
            self.event.synchronize()
        return self.host
