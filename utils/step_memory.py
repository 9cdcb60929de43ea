"""Peak memory of one real training step on the CPU, measured (07_moving_data_fast).

Also a script, for a fresh process: ``python utils/step_memory.py WIDTH DEPTH BATCH``.
"""

from __future__ import annotations

import ctypes
import gc
import math
import sys

import torch
from torch import nn

_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
_GLIBC_DEFAULT_THRESHOLD = 128 * 1024


def mlp(width: int, depth: int) -> nn.Sequential:
    """Return ``depth`` layers Linear(width, width) with ReLU between (07_moving_data_fast)."""
    layers: list[nn.Module] = []
    for index in range(depth):
        layers += [nn.Linear(width, width)] + ([nn.ReLU()] if index < depth - 1 else [])
    return nn.Sequential(*layers)


def train_step(model: nn.Module, batch: torch.Tensor) -> None:
    """One step: forward, sum as the loss, backward, ``Adam(foreach=False).step()`` (07)."""
    optimizer = torch.optim.Adam(model.parameters(), foreach=False)
    model(batch).sum().backward()
    optimizer.step()


def resident_bytes(field: str) -> int:
    """VmHWM (the peak) or VmRSS (now) of this process, in bytes, from /proc (Linux only)."""
    with open("/proc/self/status") as status:
        return int(status.read().split(f"{field}:")[1].split()[0]) * 1024


def measure_training_step(width: int, depth: int, batch_size: int) -> float:
    """Return the peak resident bytes of one :func:`train_step` of ``mlp(width, depth)`` on
    ``batch_size`` rows, above the memory before; NaN off Linux. Introduced in 07.

    After a warm-up step, blocks of 64 KiB and more go back to the system when freed
    (glibc's ``mallopt``), so the resident size follows the live tensors.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        open("/proc/self/clear_refs", "w").close()
    except OSError:
        return math.nan
    libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
    try:
        train_step(mlp(width, 2), torch.randn(batch_size, width))  # warm-up
        gc.collect()
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # the peak (VmHWM) starts again from the memory in use now
        base = resident_bytes("VmRSS")
        train_step(mlp(width, depth), torch.randn(batch_size, width))
        return float(resident_bytes("VmHWM") - base)
    finally:
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(measure_training_step(*map(int, sys.argv[1:4])))
