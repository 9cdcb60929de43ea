"""Stand-ins for library behaviour lab 08's checks need to see, each a context manager that
patches a library while the learner's function runs: ``to_empty``'s junk made visible, and
safetensors loading onto meta. Introduced in lab 08_libraries.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from unittest import mock

import torch
from torch import nn


@contextmanager
def to_empty_shows_its_junk():
    """Make ``Module.to_empty`` fill what it allocates with NaN while the learner's code runs.

    to_empty leaves whatever bytes the allocator hands back, and those can be a just-freed copy
    of the very weights the check saved; NaN makes "not the weights" visible every time.
    """
    real_to_empty = nn.Module.to_empty

    def to_empty(module, *args, **kwargs):
        result = real_to_empty(module, *args, **kwargs)
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                if tensor.is_floating_point() and not tensor.is_meta:
                    tensor.fill_(float("nan"))
        return result

    with mock.patch.object(nn.Module, "to_empty", to_empty):
        yield


NO_DEVICE = object()


@contextmanager
def safetensors_anywhere(calls: list):
    """Let safetensors load onto meta (it refuses: "device meta is invalid") by reading on the
    CPU and moving the result, and record the device each open asked for (:data:`NO_DEVICE`
    when none was named). Patches the module attributes and, in the learner's notebook, the
    names bound to them."""
    import safetensors
    import safetensors.torch

    real_open = safetensors.safe_open

    class Opened:
        def __init__(self, filename, framework="pt", device=NO_DEVICE, **kwargs):
            calls.append(device)
            asked = "cpu" if device is NO_DEVICE else device
            self._target = torch.device("meta") if str(asked) == "meta" else None
            self._file = real_open(filename, framework=framework,
                                   device="cpu" if self._target is not None else asked, **kwargs)

        def __enter__(self):
            self._file.__enter__()
            return self

        def __exit__(self, *exc):
            return self._file.__exit__(*exc)

        def __getattr__(self, name):
            return getattr(self._file, name)

        def get_tensor(self, name):
            tensor = self._file.get_tensor(name)
            return tensor.to(self._target) if self._target is not None else tensor

        def get_tensors(self):
            tensors = self._file.get_tensors()
            if self._target is None:
                return tensors
            return {name: tensor.to(self._target) for name, tensor in tensors.items()}

    real_load_file = safetensors.torch.load_file

    def load_file(filename, device=NO_DEVICE, **kwargs):
        if device is NO_DEVICE:
            calls.append(NO_DEVICE)
            device = "cpu"
        return real_load_file(filename, device=device, **kwargs)

    with mock.patch.object(safetensors, "safe_open", Opened), \
            mock.patch.object(safetensors.torch, "safe_open", Opened), \
            mock.patch.object(safetensors.torch, "load_file", load_file):
        yield {real_open: Opened, real_load_file: load_file}


def rebind(function: Callable, stand_ins: dict):
    """Patch the names in ``function``'s module (the learner's notebook) bound to a key of
    ``stand_ins`` with its value."""
    names = getattr(function, "__globals__", {})
    replaced = {n: stand_ins[v] for n, v in names.items() if _hashable(v) and v in stand_ins}
    return mock.patch.dict(names, replaced)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
