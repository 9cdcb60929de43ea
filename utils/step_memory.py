"""Peak memory of one real training step on the CPU, measured in a fresh process.

    python utils/step_memory.py WIDTH DEPTH BATCH

Introduced in 07_moving_data_fast, which runs it in a subprocess to check the prediction
of :func:`utils.footprint` against reality. The model is :func:`mlp` (``DEPTH`` layers
``Linear(WIDTH, WIDTH)`` with ReLU between), trained for one step with
``Adam(foreach=False)`` on a batch of ``BATCH`` rows. Prints one number: the peak resident
memory in bytes above the memory just before the model was built. A warm-up step on a
two-layer model of the same width first loads everything a step needs (libraries, the
BLAS library's buffers), so that only the model's own bytes count.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import torch
from torch import nn


def mlp(width: int, depth: int) -> nn.Sequential:
    """``depth`` layers Linear(width, width), with ReLU between them.

    Introduced in 07_moving_data_fast."""
    layers: list[nn.Module] = []
    for index in range(depth):
        layers += [nn.Linear(width, width)] + ([nn.ReLU()] if index < depth - 1 else [])
    return nn.Sequential(*layers)


def train_step(model: nn.Module, batch: torch.Tensor) -> None:
    """One step: forward, sum as the loss, backward, Adam(foreach=False).step()."""
    optimizer = torch.optim.Adam(model.parameters(), foreach=False)
    model(batch).sum().backward()
    optimizer.step()


def _resident(field: str) -> int:
    """VmHWM (peak) or VmRSS (now) of this process in bytes; Linux only."""
    with open("/proc/self/status") as status:
        return int(status.read().split(f"{field}:")[1].split()[0]) * 1024


def _main(width: int, depth: int, batch_size: int) -> int:
    # Blocks of 64 KiB and more get their own pages and go back to the system when freed,
    # so the resident size follows the live tensors (glibc's M_MMAP_THRESHOLD is -3).
    ctypes.CDLL("libc.so.6").mallopt(-3, 65536)
    torch.set_num_threads(1)
    train_step(mlp(width, 2), torch.randn(batch_size, width))  # warm-up: imports, BLAS buffers
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:  # reset the peak to "now"
        refs.write("5")
    base = _resident("VmRSS")
    torch.manual_seed(0)
    train_step(mlp(width, depth), torch.randn(batch_size, width))
    return _resident("VmHWM") - base


if __name__ == "__main__":
    if not sys.platform.startswith("linux"):
        print("nan")  # the peak of a running process is read from /proc: Linux only
        raise SystemExit(0)
    print(_main(*map(int, sys.argv[1:4])))
