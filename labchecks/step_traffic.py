"""What a training loop costs per step: its copies between devices and its host waits.

A check runs the learner's loop under :func:`recorded_run` twice, for a few steps and for more;
what differs between the two :class:`utils.Ledger` records is what each extra step costs
(:func:`extra_copies`), so a one-time move before the loop and one read after it are free.
:class:`HostReads` says which Python call made a host wait. Introduced in lab 07_moving_data_fast.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode

from labchecks.feedback import Feedback
from labchecks.gpu_stand_in import as_if_on_gpu
from utils.traffic import Ledger


def recorded_run(within: Callable, train: Callable, *args,
                 as_a_gpu: bool = False) -> tuple[Ledger, object, Feedback | None]:
    """Run ``train(*args)`` through ``within`` (the check's timed call: ``within(function,
    *args)`` returns ``(result, problem)``) under a ledger; return (ledger, result, problem),
    the ledger with ``reads``: the host reads by name (:class:`HostReads`), and ``gpu``: the
    :class:`~labchecks.gpu_stand_in.GpuRun` when ``as_a_gpu`` (run as a machine with two GPUs
    would, given cuda:1, its tensors on meta; else None)."""
    reads = HostReads()
    ledger = Ledger()
    ledger.gpu = None

    def recorded(*args):  # the modes are per thread: enter them in the learner's thread
        with ledger, reads:
            if not as_a_gpu:
                return train(*args)
            with as_if_on_gpu() as ledger.gpu:
                return train(*args)

    result, problem = within(recorded, *args)
    ledger.reads = reads.counts
    return ledger, result, problem


class HostReads(TorchFunctionMode):
    """Counts the Python-level calls that read a tensor on the host, by name (``item``,
    ``__float__``, ``__bool__``...): the ledger sees their wait, this says which one it was."""

    NAMES = {"item": "`.item()`", "__float__": "`float(loss)`", "__int__": "`int(...)`",
             "__bool__": "an `if` on a tensor (or `bool(t)`)", "tolist": "`.tolist()`",
             "numpy": "`.numpy()`", "__format__": "formatting a tensor (an f-string)"}

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.NAMES and args and isinstance(args[0], torch.Tensor) \
                and args[0].device.type != "cpu":
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def copy_kind(copy) -> str:
    """How a copy came about: 'back' (to the host), a factory's name, 'index', or 'to'."""
    if copy.target.type == "cpu":
        return "back"
    if copy.implicit and copy.operation in ("tensor", "as_tensor", "asarray", "new_tensor"):
        return copy.operation
    return "index" if copy.implicit else "to"


def extra_copies(short: Ledger, long: Ledger, steps: int = 4) -> Counter:
    """The copies each of the ``steps`` extra steps made, counted by (bytes, kind).

    A copy made once whose size grows with the number of steps (only the rows the loop
    will use, moved before it) differs between the runs too, but fewer than ``steps`` times:
    it is not a per-step copy, and is left out.
    """
    extra = (Counter((c.bytes, copy_kind(c)) for c in long.copies)
             - Counter((c.bytes, copy_kind(c)) for c in short.copies))
    return Counter({key: count for key, count in extra.items() if count >= steps})
