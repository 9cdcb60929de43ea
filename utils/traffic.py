"""A traffic ledger: every copy between devices, and every point where the host waits.

Introduced in 07_moving_data_fast. Timing a copy needs a GPU; *counting* copies and waits
does not. :class:`Ledger` sees each low-level operation (``TorchDispatchMode``) on any
device and writes down each **copy** between devices (``implicit`` when PyTorch made it
for you) and each **wait** of the host for a device that is not the CPU: ``.item()``,
``if t:``, a copy without ``non_blocking=True``, a size that depends on the data
(``nonzero``, boolean masks). On ``meta`` a read returns zeros: the counts are exact, the
values are not. Not seen: ``print(t)`` and copies inside ``torch.load``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from utils.text import format_bytes

_aten = torch.ops.aten
_COPIES = {_aten._to_copy.default, _aten.copy_.default, _aten._copy_from.default,
           _aten._copy_from_and_resize.default}
_DATA_DEPENDENT = {
    "aten::nonzero": "nonzero() (its size depends on the data)",
    "aten::masked_select": "masked_select() (its size depends on the data)",
    "aten::_unique2": "unique() (its size depends on the data)",
    "aten::unique_dim": "unique() (its size depends on the data)",
    "aten::unique_consecutive": "unique_consecutive() (its size depends on the data)",
    "aten::repeat_interleave": "repeat_interleave() (its size depends on the data)",
}
_BOOLEAN_MASK = "boolean-mask indexing (its size depends on the data)"
#: Factories that, given Python data and a device, fill a CPU tensor and move it in one C++
#: call the ATen level does not show. Known by name: a wrapper over ``torch.tensor`` still is.
_HOST_BUILT = {"tensor", "as_tensor", "asarray", "new_tensor"}


@dataclass
class Ledger:
    """Record copies between devices and host waits while the ``with`` block runs.

    ``copies``: :class:`Copy` rows; ``waits``: :class:`Wait` rows. Introduced in
    07_moving_data_fast.
    """

    copies: list[Copy] = field(default_factory=list)
    waits: list[Wait] = field(default_factory=list)

    def __enter__(self) -> Ledger:
        self._modes = [_FunctionSide(self), _DispatchSide(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)

    @property
    def bytes_moved(self) -> int:
        """Total bytes copied between devices, in every direction."""
        return sum(copy.bytes for copy in self.copies)

    def waits_by_reason(self) -> dict[str, int]:
        """How many waits of each kind: {'.item() ...': 3, ...}."""
        return dict(Counter(wait.why for wait in self.waits))

    def per_step(self, steps: int) -> tuple[float, float]:
        """Return ``(bytes moved per step, waits per step)`` over ``steps`` steps."""
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive whole number, got {steps!r}")
        return self.bytes_moved / steps, len(self.waits) / steps

    def summary(self) -> str:
        """One line: copies, bytes and waits, for printing."""
        copies, waits = len(self.copies), len(self.waits)
        return (f"{copies} cop{'y' if copies == 1 else 'ies'} between devices, "
                f"{format_bytes(self.bytes_moved)}; {waits} host wait{'' if waits == 1 else 's'}")

    def _copy(self, source, target, nbytes, non_blocking=False, implicit=False, operation=""):
        self.copies.append(Copy(torch.device(source), torch.device(target), int(nbytes),
                                bool(non_blocking), implicit, operation))

    def _wait(self, device, why):
        self.waits.append(Wait(torch.device(device), why))


@dataclass(frozen=True)
class Copy:
    """One copy ``source`` -> ``target`` of ``bytes``; ``implicit`` when PyTorch made it (07)."""

    source: torch.device
    target: torch.device
    bytes: int
    non_blocking: bool = False
    implicit: bool = False
    operation: str = ""

    @property
    def direction(self) -> str:
        """'host to device', 'device to host' or 'device to device'."""
        if self.source.type == "cpu":
            return "host to device"
        return "device to host" if self.target.type == "cpu" else "device to device"


@dataclass(frozen=True)
class Wait:
    """One point where the host waits for ``device``, and ``why``."""

    device: torch.device
    why: str


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _is_host(device: torch.device) -> bool:
    return device.type == "cpu"


class _DispatchSide(TorchDispatchMode):
    """Sees every ATen operation: copies, scalar reads, data-dependent sizes."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # else torch 2.12+ imports torch._dynamo: seconds
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if func is _aten._local_scalar_dense.default:
            return self._scalar_read(args[0])
        if func in _COPIES:
            return self._copy(func, args, kwargs)
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        devices = [t.device for t in tensors if not _is_host(t.device)]
        if devices:  # the wait comes first: meta cannot run nonzero at all
            if name in _DATA_DEPENDENT and kwargs.get("output_size") is None:
                self.ledger._wait(devices[0], _DATA_DEPENDENT[name])
            elif name == "aten::index" and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1]):
                self.ledger._wait(devices[0], _BOOLEAN_MASK)
        result = func(*args, **kwargs)
        if devices:
            for tensor in tensors:  # a CPU index tensor is copied to the device for you
                if _is_host(tensor.device) and tensor.dim() > 0:
                    self.ledger._copy("cpu", devices[0], _nbytes(tensor), implicit=True,
                                      operation=str(func.overloadpacket))
        return result

    def _scalar_read(self, tensor: torch.Tensor):
        if not _is_host(tensor.device):
            self.ledger._wait(tensor.device, ".item(), float(t), bool(t) or if t: "
                                             "(reads one value on the host)")
        if tensor.is_meta:  # no data: answer zero so the code runs on
            return False if tensor.dtype == torch.bool else (
                0.0 if tensor.is_floating_point() else 0)
        return _aten._local_scalar_dense.default(tensor)

    def _copy(self, func, args, kwargs):
        if func is _aten._to_copy.default:
            source = args[0]
            target_device = kwargs.get("device") or source.device
        else:
            target_tensor, source = args[0], args[1]
            target_device = target_tensor.device
        target_device = torch.device(target_device)
        if "non_blocking" in kwargs:
            non_blocking = bool(kwargs["non_blocking"])
        else:  # copy_(target, source, non_blocking) may pass it by position
            non_blocking = bool(func is _aten.copy_.default and len(args) > 2 and args[2])
        crosses = source.device != target_device
        if crosses and source.is_meta and not target_device.type == "meta":
            result = self._from_meta(func, args, kwargs, target_device)
        else:
            result = func(*args, **kwargs)
        if crosses:
            arrived = result if isinstance(result, torch.Tensor) else args[0]
            self.ledger._copy(source.device, target_device, _nbytes(arrived), non_blocking,
                              operation=str(func.overloadpacket))
            if not non_blocking:
                accelerator = target_device if _is_host(source.device) else source.device
                if _is_host(target_device):
                    why = "a copy to the host without non_blocking=True (.cpu(), .tolist())"
                elif _is_host(source.device):
                    why = "a copy from the host without non_blocking=True"
                else:
                    why = "a copy between two devices without non_blocking=True"
                if not (_is_host(source.device) and _is_host(target_device)):
                    self.ledger._wait(accelerator, why)
        return result

    @staticmethod
    def _from_meta(func, args, kwargs, target_device):
        """A copy out of meta has no data to copy: zeros of the right shape arrive."""
        if func is _aten._to_copy.default:
            source = args[0]
            dtype = kwargs.get("dtype") or source.dtype
            return torch.zeros(source.shape, dtype=dtype, device=target_device)
        return args[0].zero_()


class _FunctionSide(TorchFunctionMode):
    """Sees Python-level calls: ``torch.tensor(data, device=d)`` (see ``_HOST_BUILT``)."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", None) not in _HOST_BUILT:
            return func(*args, **kwargs)
        seen = len(self.ledger.copies)
        result = func(*args, **kwargs)
        data = args[1] if func.__name__ == "new_tensor" and len(args) > 1 else (
            args[0] if args else kwargs.get("data"))
        already_there = isinstance(data, torch.Tensor) and data.device == result.device
        if (len(self.ledger.copies) == seen and not _is_host(result.device)
                and not already_there):
            self.ledger._copy("cpu", result.device, _nbytes(result), implicit=True,
                              operation=getattr(func, "__name__", str(func)))
            self.ledger._wait(result.device, "a copy from the host without non_blocking=True")
        return result
