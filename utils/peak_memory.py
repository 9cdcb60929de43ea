"""Peak memory of loading a checkpoint two ways, measured in a fresh process.

    python -m utils.peak_memory CHECKPOINT

Introduced in 06_training_checkpoints, which runs it in a subprocess.
Prints two numbers, in MiB above the memory right after ``import torch``: the peak of
(1) building the model on the meta device and loading with mmap=True and assign=True,
then (2) the usual way: build the model, torch.load the file, load_state_dict copies.
A peak can only grow, so the small one is measured first.
"""

import resource
import sys

import torch
from torch import nn

from utils.step_memory import resident_bytes


def build() -> nn.Module:
    return nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)])


def peak_mib() -> float:
    """This process's peak resident memory. On Linux VmHWM: ru_maxrss there would
    include the parent's peak, carried across exec."""
    try:
        return resident_bytes("VmHWM") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # macOS: bytes


if __name__ != "__main__":
    raise ImportError("utils.peak_memory is a script: python -m utils.peak_memory CHECKPOINT")

base = peak_mib()
with torch.device("meta"):
    model = build()
model.load_state_dict(torch.load(sys.argv[1], mmap=True), assign=True)
mmap_extra = peak_mib() - base
del model

model = build()
model.load_state_dict(torch.load(sys.argv[1]))
print(mmap_extra, peak_mib() - base)
