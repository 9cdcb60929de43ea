"""What a training step keeps in memory, per part, computed on the meta device.

Introduced in 07_moving_data_fast. :func:`footprint` runs one step of a meta copy of your
model, so "will this fit on a 16 GB GPU?" is answered on a laptop. It counts parameters
and buffers, gradients, optimizer state (on the model's device), activations (what
autograd saves for backward, each storage once) and inputs. Not counted: one-operation
temporaries, the CUDA context and workspaces, the caching allocator's reserve.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from utils.text import format_bytes


def footprint(model: nn.Module, inputs: torch.Tensor | tuple, *,
              optimizer: type | Callable | None = torch.optim.Adam,
              loss: Callable | None = None, training: bool = True,
              dtype: torch.dtype | None = None) -> Footprint:
    """Return the :class:`Footprint` of one training step of ``model`` on ``inputs``.

    ``inputs``: a tensor or tuple of tensors. ``optimizer``: a ``torch.optim`` class, a
    function of the parameters, or None. ``loss``: a function of the output (default: its
    sum). ``training=False``: forward under ``no_grad``. ``dtype`` casts the copy first.
    Introduced in 07_moving_data_fast.
    """
    _check_model(model)
    _check_optimizer(optimizer)
    batch = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    if not all(isinstance(t, torch.Tensor) for t in batch):
        kinds = ", ".join(type(t).__name__ for t in batch)
        raise TypeError(f"inputs must be a tensor or a tuple of tensors, got {kinds}.")
    meta_model = _on_meta(model, dtype)
    meta_batch = tuple(t.detach().to("meta") for t in batch)
    parameters = list(meta_model.parameters())
    trainable = [p for p in parameters if p.requires_grad]
    fixed = {_storage_key(t) for t in [*parameters, *meta_model.buffers(), *meta_batch]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type == "meta" and _storage_key(tensor) not in fixed:
            saved.setdefault(_storage_key(tensor), _storage_bytes(tensor))
        return tensor

    gradients = optimizer_state = 0
    if not training:
        with torch.no_grad():
            meta_model(*meta_batch)
    else:
        built = _make_optimizer(optimizer, trainable)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            output = meta_model(*meta_batch)
        (loss or _default_loss)(output).backward()
        gradients = _unique_bytes(p.grad for p in trainable if p.grad is not None)
        if built is not None:
            built.step()
            state = [value for per_parameter in built.state.values()
                     for value in per_parameter.values()
                     if isinstance(value, torch.Tensor) and value.device.type == "meta"]
            optimizer_state = _unique_bytes(state)
    return Footprint(parameters=_unique_bytes(parameters),
                     buffers=_unique_bytes(meta_model.buffers()),
                     gradients=gradients, optimizer_state=optimizer_state,
                     activations=sum(saved.values()),
                     inputs=_unique_bytes(meta_batch))


# --- what footprint is built on ---

PARTS = ("parameters", "buffers", "gradients", "optimizer_state", "activations", "inputs")


@dataclass(frozen=True)
class Footprint:
    """Bytes per part of one training step; ``total`` is their sum (07_moving_data_fast)."""

    parameters: int
    buffers: int
    gradients: int
    optimizer_state: int
    activations: int
    inputs: int

    @property
    def total(self) -> int:
        """The sum of every part, in bytes."""
        return sum(asdict(self).values())

    def as_dict(self) -> dict[str, int]:
        """{part: bytes}, in the order of ``PARTS``."""
        return asdict(self)

    def fits(self, budget_bytes: float) -> bool:
        """True when ``total`` is at most ``budget_bytes``."""
        return self.total <= budget_bytes

    def summary(self) -> str:
        """One line per part, then the total, for printing."""
        width = max(map(len, PARTS))
        lines = [f"{part.replace('_', ' '):{width}s} {format_bytes(value):>10s}"
                 for part, value in self.as_dict().items()]
        return "\n".join([*lines, f"{'total':{width}s} {format_bytes(self.total):>10s}"])


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage()._cdata


def _storage_bytes(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes()


def _unique_bytes(tensors) -> int:
    seen: dict[int, int] = {}
    for tensor in tensors:
        seen.setdefault(_storage_key(tensor), _storage_bytes(tensor))
    return sum(seen.values())


def _on_meta(model: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """A copy of ``model`` on meta, made without copying any data (ties are kept)."""
    memo: dict[int, object] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) in memo:
            continue
        meta = tensor.detach().to("meta")
        if isinstance(tensor, nn.Parameter):
            meta = nn.Parameter(meta, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = meta
    clone = copy.deepcopy(model, memo)
    return clone.to(dtype) if dtype is not None else clone


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"footprint() needs an nn.Module, got {type(model).__name__}. Pass the "
                        "model itself, e.g. footprint(model, batch).")


def _check_optimizer(optimizer) -> None:
    """Raise a TypeError that says what to pass when ``optimizer`` cannot build one."""
    if optimizer is None:
        return
    if isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"footprint() got an optimizer already built ({type(optimizer).__name__})"
                        " on your model's parameters. Pass the class, e.g. torch.optim.Adam, or "
                        "a function such as lambda params: torch.optim.SGD(params, lr=0.1).")
    if isinstance(optimizer, type) and not issubclass(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer={optimizer.__name__} is not an optimizer class. Pass one "
                        "from torch.optim (torch.optim.Adam, torch.optim.SGD, ...) or None.")
    if not callable(optimizer):
        raise TypeError(f"optimizer must be an optimizer class, a function of the parameters, "
                        f"or None; got {type(optimizer).__name__}.")


def _make_optimizer(optimizer, parameters: list[nn.Parameter]):
    """Build the optimizer from a class or a function of the parameters; None for none."""
    if optimizer is None:
        return None
    built = optimizer(parameters)
    if not isinstance(built, torch.optim.Optimizer):
        raise TypeError(f"the optimizer function returned {type(built).__name__}, not a "
                        "torch.optim.Optimizer.")
    return built


def _default_loss(output) -> torch.Tensor:
    if isinstance(output, (tuple, list)):
        output = output[0]
    return output.float().sum()


