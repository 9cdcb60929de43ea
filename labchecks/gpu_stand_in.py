"""What a GPU machine would run, judged on any machine: the checks' stand-in for a GPU.

A grader without a GPU never runs a branch such as ``batch.cuda() if torch.cuda.is_available()
else batch.to(device)``, and a device of ``meta`` or ``cpu`` cannot show an answer that drops
the device's index: :func:`as_if_on_gpu` runs the code as a machine with two GPUs would, and
:func:`gpu_placement_problem` turns such a run into a Feedback. Introduced in lab 02_copy_pitfall.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from unittest import mock

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from labchecks.feedback import FAILED, Feedback

#: The device a check hands the learner's function to see what a GPU machine would run: an
#: indexed GPU, since a bare 'cuda' (or `.cuda()`) means the current one, cuda:0.
STAND_IN_GPU = torch.device("cuda", 1)


@dataclass
class GpuRun:
    """What the learner's code did under :func:`as_if_on_gpu`: ``named``, each CUDA device it
    named (``.to``, ``.cuda()``, ``device=``, ``map_location``), with a bare 'cuda' or
    ``.cuda()`` recorded as 'cuda' (the current GPU); ``cuda_calls``, how many ``.cuda()``;
    ``syncs``, each synchronize it asked for."""

    named: list[torch.device]
    cuda_calls: int = 0
    syncs: int = 0

    def note(self, device: torch.device, by_cuda: bool) -> None:
        self.named.append(device)
        self.cuda_calls += by_cuda

    def elsewhere(self, asked: torch.device = STAND_IN_GPU) -> list[torch.device]:
        """The CUDA devices named that are not exactly ``asked``."""
        return [d for d in self.named if d != asked]


def misplaced_gpu(run: GpuRun, asked: torch.device = STAND_IN_GPU,
                  fix: str = "`.to(device)`") -> str | None:
    """The clause naming why ``run`` put something on another GPU than ``asked``, else None:
    "`.cuda()` sends it to the current GPU (cuda:0), not to cuda:1, the device you were
    given", or the same for a device named without its index; ``fix`` says what to write."""
    wrong = run.elsewhere(asked)
    if not wrong:
        return None
    if run.cuda_calls:
        said = "`.cuda()` sends it to the current GPU (cuda:0)"
    elif any(d.index is None for d in wrong):
        said = ("you named 'cuda' without the index (e.g. `device.type`, or a device rebuilt "
                "from its type), which means the current GPU, cuda:0")
    else:
        said = f"you sent it to {wrong[0]}"
    return (f"given {asked} (as on a machine with two GPUs), {said}, not to {asked}, the "
            f"device you were given. Pass the `device` argument itself: {fix}")


def cuda_named(value: object) -> torch.device | None:
    """The CUDA device ``value`` names (an int is a CUDA index, as a factory's ``device=``
    takes it; a string or a torch.device), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return torch.device("cuda", value)
    try:
        device = torch.device(value) if isinstance(value, (str, torch.device)) else None
    except RuntimeError:
        return None
    return device if device is not None and device.type == "cuda" else None


class OnMeta(TorchFunctionMode):
    """Sends every tensor the code puts on a CUDA device (``.to``, ``.cuda()``, a factory's
    ``device=``) to meta instead, calling ``noted(device, by_cuda)`` with the device it named
    and whether ``.cuda()`` named it; pinning is a no-op. A thread-local mode: enter it in the
    thread that runs the learner's code. Introduced in lab 02_copy_pitfall."""

    def __init__(self, noted: Callable[[torch.device, bool], None]) -> None:
        super().__init__()
        self.noted = noted

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        tensor = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name == "to" and tensor is not None:
            try:
                device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(
                    *args[1:], **kwargs)
            except Exception:
                return func(*args, **kwargs)
            if device is not None and device.type == "cuda":
                self.noted(device, False)
                new = {"device": "meta", "non_blocking": non_blocking,
                       "copy": bool(kwargs.get("copy", False))}
                if dtype is not None:
                    new["dtype"] = dtype
                if memory_format is not None:
                    new["memory_format"] = memory_format
                return func(tensor, **new)
        elif name == "cuda" and tensor is not None:
            index = args[1] if len(args) > 1 else kwargs.get("device")
            self.noted(cuda_named(index) or torch.device("cuda"), True)
            return tensor.to("meta")
        elif name == "pin_memory" and tensor is not None:
            return tensor
        elif name == "is_pinned" and tensor is not None:
            return True
        elif cuda_named(kwargs.get("device")) is not None:
            self.noted(cuda_named(kwargs["device"]), False)
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


class _Stream:
    """A stand-in CUDA stream: its waits are recorded, nothing runs."""

    def __init__(self, run: GpuRun) -> None:
        self.run = run

    def synchronize(self) -> None:
        self.run.syncs += 1

    def wait_stream(self, *args, **kwargs) -> None:
        pass


@contextmanager
def as_if_on_gpu() -> Iterator[GpuRun]:
    """Run the block as a machine with two CUDA GPUs would (``torch.cuda.is_available()`` is
    True), on any machine: whatever the code puts on a GPU goes to meta instead, and the
    :class:`GpuRun` it yields records which GPU the code named and every synchronize.

    Lets a CPU-only grader judge a branch only a GPU machine runs (``batch.cuda() if
    torch.cuda.is_available() else ...``) and a device argument with an index
    (:data:`STAND_IN_GPU`). Code that needs a real GPU (streams, events) may raise inside:
    a check then judges nothing from this run. Modes are per thread: enter it in the
    thread that runs the learner's code. Introduced in lab 02_copy_pitfall.
    """
    run = GpuRun(named=[])
    real_load = torch.load

    def sync(*args, **kwargs) -> None:
        run.syncs += 1

    def load(f, *args, **kwargs):
        location = args[0] if args else kwargs.pop("map_location", None)
        args = args[1:]
        if isinstance(location, Mapping):
            for value in location.values():
                if cuda_named(value) is not None:
                    run.named.append(cuda_named(value))
            location = {k: ("meta" if cuda_named(v) is not None else v)
                        for k, v in location.items()}
        elif cuda_named(location) is not None:
            run.named.append(cuda_named(location))
            location = "meta"
        return real_load(f, *args, map_location=location, **kwargs)

    def module_cuda(self, device=None):
        run.named.append(cuda_named(device) or torch.device("cuda"))
        run.cuda_calls += 1
        return self.to("meta")

    patches = [mock.patch("torch.cuda.is_available", lambda: True),
               mock.patch("torch.cuda.device_count", lambda: 2),
               mock.patch("torch.cuda.current_device", lambda: 0),
               mock.patch("torch.cuda.synchronize", sync),
               mock.patch("torch.cuda.current_stream", lambda *a, **k: _Stream(run)),
               mock.patch("torch.load", load),
               mock.patch.object(nn.Module, "cuda", module_cuda)]
    if hasattr(torch, "accelerator") and hasattr(torch.accelerator, "synchronize"):
        patches.append(mock.patch("torch.accelerator.synchronize", sync))
    with ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        # What the stand-in's meta tensors make PyTorch warn about is not the learner's
        # ("copying ... to a meta parameter ... is a no-op"): show none of it.
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(OnMeta(run.note))
        yield run


def gpu_placement_problem(exercise: str, function: Callable, *args,
                          fix: str = "`.to(device)`") -> Feedback | None:
    """Run ``function(*args)`` under :func:`as_if_on_gpu` (``args`` hold
    :data:`STAND_IN_GPU` as the device): a failed Feedback when it puts anything on another
    GPU than that one (a ``.cuda()`` branch, a device without its index), else None. What
    it raised is not judged (a real GPU may be needed there); what it named before is.
    ``fix``: what to write instead, said last."""
    with as_if_on_gpu() as run:
        try:
            function(*args)
        except Exception:  # noqa: S110 - judged by what it named, not by what a stand-in lacks
            pass
    wrong = misplaced_gpu(run, fix=fix)
    return None if wrong is None else Feedback(exercise, FAILED, wrong + ".")
