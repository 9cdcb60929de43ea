"""Placement: where every tensor of a module lives, and which ones ``Module.to`` leaves behind.

Introduced in 03_module_to; 04_cross_device_errors uses :func:`audit`. Only ``.device``,
``.dtype`` and ``.shape`` are read (never the data), so a model on ``meta`` works too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from utils.devices import DeviceNotAvailableError, parse_device
from utils.text import columns, marked_table_html


def where(obj: nn.Module | torch.Tensor | dict | list | tuple) -> PlacementTable:
    """Return a table of every tensor reachable from ``obj``: name, kind, device, dtype, shape.

    ``obj`` is a module, a tensor, or a dict/list/tuple of them. For a module: its
    parameters, buffers, plain tensor attributes, tensors in list/tuple/set/dict
    attributes and modules kept only in such a container, each with whether
    ``Module.to`` moves it; names are dotted paths (``heads.0.weight``). A tensor that
    is the same object as a registered parameter (``nn.LSTM._flat_weights``) is moved;
    one that is a registered buffer is left behind (``.to`` replaces buffers).
    Introduced in 03_module_to.
    """
    if not isinstance(obj, (nn.Module, torch.Tensor, dict, list, tuple)):
        raise TypeError(
            f"where() looks inside a module, a tensor, or a dict/list of them; got "
            f"{type(obj).__name__}. Pass the model itself (not its output or a function)."
        )
    return PlacementTable(_walk_loose(obj, "", _Walk(), 0))


def audit(module: nn.Module, device: str | torch.device) -> Findings:
    """Return the findings for ``module`` and ``device``: tensors not on ``device`` after ``.to``.

    One :class:`Finding` (path, why, fix) per tensor that ``module.to(device)`` would
    leave elsewhere, or that is registered but not moved yet; empty means clean.
    ``device`` may be one this machine lacks (``audit(model, 'cuda')`` on a laptop):
    only ``.device`` is read. Introduced in 03_module_to; used in 04_cross_device_errors.
    """
    if not isinstance(module, nn.Module):
        hint = " To check a tensor, compare tensor.device." if isinstance(
            module, torch.Tensor) else ""
        raise TypeError(
            f"audit() needs an nn.Module, got {type(module).__name__}.{hint} "
            f"Call it as utils.audit(model, device); utils.where() accepts tensors and dicts."
        )
    target = _target_device(device)
    findings = Findings()
    findings.target = target
    for placement in where(module):
        if placement.device == target or placement.kind == RECOMPUTED:
            continue
        if placement.alias_of and placement.moved_by_to:
            continue  # a parameter alias: its registered name gets the finding
        if placement.moved_by_to:
            findings.append(Finding(
                placement.name, placement.kind, placement.device, target, True,
                "it is registered, so Module.to moves it, but it has not been moved yet",
                _to_fix(module, placement, target)))
        else:
            findings.append(Finding(
                placement.name, placement.kind, placement.device, target, False,
                _why(placement), _fix(placement)))
    return findings


# --- what where and audit are built on ---

#: Kinds of tensor that ``Module.to`` moves (they are registered on a registered module).
PARAMETER = "parameter"
BUFFER = "buffer"
NON_PERSISTENT_BUFFER = "non-persistent buffer"
#: Kinds that ``Module.to`` leaves where they are.
TENSOR_ATTRIBUTE = "plain tensor attribute"
IN_LIST = "tensor in a list"
IN_TUPLE = "tensor in a tuple"
IN_SET = "tensor in a set"
IN_DICT = "tensor in a dict"
#: A plain attribute that a forward pre-hook rebuilds from a registered tensor before
#: every call (``weight`` under weight_norm, spectral_norm or pruning): not a straggler.
RECOMPUTED = "plain attribute, recomputed before each forward from a registered tensor"
#: A tensor passed to :func:`where` directly, not found inside a module.
LOOSE = "tensor"

_CONTAINER_KINDS = {None: TENSOR_ATTRIBUTE, "list": IN_LIST, "tuple": IN_TUPLE, "set": IN_SET,
                    "dict": IN_DICT}
# Attributes every nn.Module has; anything else in a module's __dict__ was set by its author.
_MODULE_INTERNALS = frozenset(vars(nn.Module()))
_MAX_DEPTH = 6  # how deep into nested lists/dicts to look for tensors


@dataclass(frozen=True)
class Placement:
    """One tensor: where it is and whether ``Module.to`` moves it (None outside a module).

    ``alias_of`` names the registered parameter or buffer it is the same object as, or is "".
    """

    name: str
    kind: str
    device: torch.device
    dtype: torch.dtype
    shape: tuple[int, ...]
    moved_by_to: bool | None
    alias_of: str = ""

    def row(self) -> tuple[str, str, str, str, str, str]:
        """The printable cells: name, kind, device, dtype, shape, reached by Module.to."""
        moved = {True: "yes", False: "NO", None: "-"}[self.moved_by_to]
        if self.kind == RECOMPUTED:
            moved = "rebuilt each call"
        kind = f"{self.kind} (same object as {self.alias_of})" if self.alias_of else self.kind
        dtype = str(self.dtype).replace("torch.", "")
        return self.name, kind, str(self.device), dtype, str(tuple(self.shape)), moved


_HEADERS = ("name", "kind", "device", "dtype", "shape", "reached by Module.to")


class PlacementTable(list):
    """The list of :class:`Placement` rows :func:`where` returns; prints as a table."""

    def __str__(self) -> str:
        if not self:
            return "(no tensors found)"
        return "\n".join(columns(_HEADERS, [p.row() for p in self], rule=True))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self:
            return "<p>(no tensors found)</p>"
        return marked_table_html(_HEADERS, [p.row() for p in self],
                                 [p.moved_by_to is False for p in self])

    def devices(self) -> set[torch.device]:
        """The set of devices the tensors are on."""
        return {p.device for p in self}

    def left_behind(self) -> PlacementTable:
        """The rows ``Module.to`` would not move."""
        return PlacementTable(p for p in self if p.moved_by_to is False)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _placement(name: str, kind: str, tensor: torch.Tensor, moved: bool | None,
               alias_of: str = "") -> Placement:
    return Placement(name, kind, tensor.device, tensor.dtype, tuple(tensor.shape), moved, alias_of)


class _Walk:
    """What one call of :func:`where` has seen so far (so nothing is listed twice)."""

    def __init__(self) -> None:
        self.parameters: dict[int, str] = {}  # id -> dotted name of a registered parameter
        self.buffers: dict[int, str] = {}  # id -> dotted name of a registered buffer
        self.modules: set[int] = set()  # ids of registered modules
        self.seen: set[int] = set()  # ids of modules and containers already walked

    def register(self, module: nn.Module, prefix: str) -> None:
        """Note every registered module, parameter and buffer of ``module`` (a root)."""
        self.modules.update(id(m) for m in module.modules())
        for name, param in module.named_parameters(prefix):
            self.parameters.setdefault(id(param), name)
        for name, buffer in module.named_buffers(prefix):
            self.buffers.setdefault(id(buffer), name)


def _recomputed(module: nn.Module, name: str) -> bool:
    """True for ``weight`` under weight_norm, spectral_norm or pruning: a pre-hook rebuilds it."""
    if not module._forward_pre_hooks:
        return False
    return hasattr(module, f"{name}_orig") or (
        hasattr(module, f"{name}_g") and hasattr(module, f"{name}_v"))


def _walk_module(module: nn.Module, prefix: str, registered: bool, how: str,
                 walk: _Walk) -> Iterator[Placement]:
    """Parameters, buffers, submodules, then what ``.to`` does not see; ``registered`` is
    False for a module reached through a plain container (``how`` says which)."""
    if id(module) in walk.seen:
        return
    walk.seen.add(id(module))
    for name, param in module._parameters.items():
        if param is not None:
            kind = PARAMETER if registered else f"{PARAMETER} of a module in a plain {how}"
            yield _placement(_join(prefix, name), kind, param, registered)
    for name, buffer in module._buffers.items():
        if buffer is not None:
            base = NON_PERSISTENT_BUFFER if name in module._non_persistent_buffers_set else BUFFER
            kind = base if registered else f"{base} of a module in a plain {how}"
            yield _placement(_join(prefix, name), kind, buffer, registered)
    for name, child in module._modules.items():
        if child is not None:
            yield from _walk_module(child, _join(prefix, name), registered, how, walk)
    for name, value in vars(module).items():
        if name in _MODULE_INTERNALS:
            continue
        if isinstance(value, torch.Tensor) and _recomputed(module, name):
            yield _placement(_join(prefix, name), RECOMPUTED, value, None)
        else:
            yield from _walk_value(value, _join(prefix, name), None, walk, 0)


def _walk_value(value: object, name: str, how: str | None, walk: _Walk,
                depth: int) -> Iterator[Placement]:
    """Tensors inside an attribute value: a tensor, a list/tuple/set/dict, or a module in one."""
    if isinstance(value, torch.Tensor):
        kind = _CONTAINER_KINDS[how]
        if id(value) in walk.parameters:  # the same object: Module.to moves it in place
            yield _placement(name, kind, value, True, walk.parameters[id(value)])
        elif id(value) in walk.buffers:  # Module.to replaces buffers: this reference stays
            yield _placement(name, kind, value, False, walk.buffers[id(value)])
        else:
            yield _placement(name, kind, value, False)
        return
    if isinstance(value, nn.Module):
        if how is not None and id(value) not in walk.modules:  # registered: listed already
            yield from _walk_module(value, name, False, how, walk)
        return
    if depth >= _MAX_DEPTH or id(value) in walk.seen:
        return
    if isinstance(value, dict):
        walk.seen.add(id(value))
        for key, item in value.items():
            yield from _walk_value(item, _join(name, str(key)), "dict", walk, depth + 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        walk.seen.add(id(value))
        kind = "list" if isinstance(value, list) else "tuple" if isinstance(value, tuple) else "set"
        for index, item in enumerate(value):
            yield from _walk_value(item, _join(name, str(index)), kind, walk, depth + 1)


def _walk_loose(obj: object, prefix: str, walk: _Walk, depth: int) -> Iterator[Placement]:
    """Tensors passed to :func:`where` directly: modules are roots, tensors are loose."""
    if isinstance(obj, nn.Module):
        walk.register(obj, prefix)
        yield from _walk_module(obj, prefix, True, "", walk)
    elif isinstance(obj, torch.Tensor):
        yield _placement(prefix or "tensor", LOOSE, obj, None)
    elif isinstance(obj, (dict, list, tuple)) and depth < _MAX_DEPTH and id(obj) not in walk.seen:
        walk.seen.add(id(obj))
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for key, value in items:
            yield from _walk_loose(value, _join(prefix, str(key)), walk, depth + 1)


def _fix(placement: Placement) -> str:
    """How to make Module.to move this tensor."""
    leaf = placement.name.rsplit(".", 1)[-1]
    if placement.alias_of:
        return (f"do not keep a second reference to a buffer; read self.{placement.alias_of} "
                f"(or a property that returns it) when you need it")
    if placement.kind == TENSOR_ATTRIBUTE:
        return (f"a constant becomes a buffer: self.register_buffer({leaf!r}, tensor) in "
                f"__init__; a tensor to train becomes an nn.Parameter")
    if placement.kind in (IN_LIST, IN_TUPLE, IN_SET, IN_DICT):
        holder = "ParameterDict" if placement.kind == IN_DICT else "ParameterList"
        return (f"keep trainable tensors in nn.{holder}; otherwise register each one "
                "with register_buffer, or create it in forward with device=x.device")
    if "plain dict" in placement.kind:
        return "hold the modules in nn.ModuleDict instead of a Python dict"
    how = placement.kind.rsplit(" ", 1)[-1]  # list, tuple or set
    return f"hold the modules in nn.ModuleList instead of a Python {how}"


def _why(placement: Placement) -> str:
    if placement.alias_of:
        return (f"it is the same object as the buffer {placement.alias_of}, but Module.to "
                f"replaces buffer objects with moved copies, so this reference keeps the old one")
    if placement.kind == TENSOR_ATTRIBUTE:
        return "a plain tensor attribute is not registered, so Module.to does not see it"
    if placement.kind in (IN_LIST, IN_TUPLE, IN_SET, IN_DICT):
        return "Module.to does not look inside Python lists, tuples, sets or dicts"
    return ("a module in a plain container is not a submodule: not moved, and not in "
            "parameters() or state_dict")


@dataclass(frozen=True)
class Finding:
    """A tensor that will not be on the audited device after ``module.to(device)``, or is not now.

    ``str()`` names the dotted path, says why, and gives the fix.
    """

    name: str
    kind: str
    device: torch.device
    target: torch.device
    moved_by_to: bool
    why: str
    fix: str

    def __str__(self) -> str:
        if self.moved_by_to:
            return (f"{self.name} ({self.kind}) is on {self.device}, not {self.target}: "
                    f"{self.why}. Fix: {self.fix}.")
        return (f"{self.name} ({self.kind}) is on {self.device} and .to({str(self.target)!r}) "
                f"leaves it there: {self.why}. Fix: {self.fix}.")


class Findings(list):
    """The list :func:`audit` returns; prints one numbered finding per line."""

    target: torch.device | None = None

    def __str__(self) -> str:
        if not self:
            return (f"No findings: every tensor ends up on {self.target} after "
                    f".to({str(self.target)!r}).")
        lines = [f"{len(self)} finding(s) for {self.target}:"]
        first = None  # the first finding of a run that shares one container, reason and fix
        for i, finding in enumerate(self, 1):
            if first is not None and _same_container(self[first - 1], finding):
                lines.append(f"{i}. {finding.name} ({finding.kind}) is on {finding.device} "
                             f"too: same reason and fix as {first}.")
                continue
            first = i
            lines.append(f"{i}. {finding}")
        return "\n".join(lines)

    __repr__ = __str__


def _same_container(first: Finding, later: Finding) -> bool:
    """Same top-level container, reason and fix: said once (``heads.0.*``, ``heads.1.*``)."""
    return (not first.moved_by_to and not later.moved_by_to
            and first.name.split(".")[0] == later.name.split(".")[0]
            and (first.kind, first.device, first.why, first.fix)
            == (later.kind, later.device, later.why, later.fix))


def _target_device(device: str | torch.device) -> torch.device:
    """Parse ``device`` for an audit: anything PyTorch parses, present on this machine or not."""
    try:
        target = parse_device(device)
    except DeviceNotAvailableError:
        target = torch.device(device)  # parses: parse_device only objected to availability
    if target.index is None and target.type in ("cuda", "xpu", "mps"):
        backend = getattr(torch, target.type, None)
        current = 0
        if target.type != "mps" and backend is not None and backend.is_available():
            current = backend.current_device()
        target = torch.device(target.type, current)  # where a bare 'cuda' really lands
    if target.type == "cpu":
        target = torch.device("cpu")  # CPU tensors report 'cpu', never 'cpu:0'
    return target


def _to_fix(module: nn.Module, placement: Placement, target: torch.device) -> str:
    """The fix for a registered tensor not moved yet: which module's ``.to`` moves it."""
    to = f".to({str(target)!r})"
    owner = placement.name.rpartition(".")[0]
    also = f" (or {to} on its submodule {owner} alone)" if owner else ""
    return (f"call {to} on the {type(module).__name__} you audited{also}; it works in place, "
            f"no reassignment needed")


def __getattr__(name: str):
    """``utils.placement.placement_figure``, now in utils/figures.py, is still reached here."""
    if name == "placement_figure":
        from utils.figures import placement_figure
        return placement_figure
    raise AttributeError(f"module 'utils.placement' has no attribute {name!r}")
