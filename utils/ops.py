"""Which low-level operations a line of PyTorch code runs. Introduced in 01_tensor_to."""

from __future__ import annotations

from collections.abc import Callable

from torch.utils._python_dispatch import TorchDispatchMode


def aten_ops(function: Callable[[], object]) -> list[str]:
    """Run ``function()`` and return the names of the ATen operations it ran, in order.

    For example ``aten_ops(lambda: torch.zeros(3).to("meta"))`` returns
    ``['aten.zeros', 'aten._to_copy']``: one operation to create, one to copy.
    Built on PyTorch's TorchDispatchMode. Introduced in 01_tensor_to.
    """
    with _Recorder() as recorder:
        function()
    return recorder.names


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))
