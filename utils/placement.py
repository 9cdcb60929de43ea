"""Placement: where every tensor of a module lives, and which ones ``Module.to`` leaves behind.

Introduced in notebook 03_module_to; notebook 04_cross_device_errors uses :func:`audit`
to catch each cause of a cross-device error before the model runs.

Nothing here copies, moves or reads tensor data: only ``.device``, ``.dtype`` and
``.shape`` are looked at, so a 44M-parameter model is audited in milliseconds, and a
model on ``meta`` (no data at all) works as well as one on a GPU.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from torch import nn

from utils.devices import DeviceNotAvailableError, parse_device
from utils.figures import _DEVICE_COLOURS, _META_COLOUR

#: Kinds of tensor that ``Module.to`` moves (they are registered on a registered module).
PARAMETER = "parameter"
BUFFER = "buffer"
NON_PERSISTENT_BUFFER = "non-persistent buffer"
#: Kinds that ``Module.to`` leaves where they are.
TENSOR_ATTRIBUTE = "plain tensor attribute"
IN_LIST = "tensor in a list"
IN_DICT = "tensor in a dict"
#: A tensor passed to :func:`where` directly, not found inside a module.
LOOSE = "tensor"

_MOVED_KINDS = (PARAMETER, BUFFER, NON_PERSISTENT_BUFFER)
# Attributes every nn.Module has; anything else in a module's __dict__ was set by its author.
_MODULE_INTERNALS = frozenset(vars(nn.Module()))
_MAX_DEPTH = 6  # how deep into nested lists/dicts to look for tensors


@dataclass(frozen=True)
class Placement:
    """One tensor reachable from an object: where it is and whether ``Module.to`` moves it.

    ``moved_by_to`` is None for a tensor that is not inside a module. ``alias_of``
    names the registered tensor this entry is the same object as (for example
    ``nn.LSTM._flat_weights``), or is empty.
    """

    name: str
    kind: str
    device: torch.device
    dtype: torch.dtype
    shape: tuple[int, ...]
    moved_by_to: bool | None
    alias_of: str = ""

    def row(self) -> tuple[str, str, str, str, str, str]:
        """The printable cells: name, kind, device, dtype, shape, moved by Module.to."""
        moved = {True: "yes", False: "NO", None: "-"}[self.moved_by_to]
        kind = f"{self.kind} (same object as {self.alias_of})" if self.alias_of else self.kind
        dtype = str(self.dtype).replace("torch.", "")
        return self.name, kind, str(self.device), dtype, str(tuple(self.shape)), moved


_HEADERS = ("name", "kind", "device", "dtype", "shape", "moved by Module.to")


class PlacementTable(list):
    """A list of :class:`Placement` rows that prints as a table (text or HTML).

    Returned by :func:`where`. Introduced in 03_module_to.
    """

    def __str__(self) -> str:
        if not self:
            return "(no tensors found)"
        rows = [_HEADERS, *(p.row() for p in self)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADERS))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                 for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self:
            return "<p>(no tensors found)</p>"
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in _HEADERS)
        body = []
        for placement in self:
            left_behind = placement.moved_by_to is False
            style = " style='color:#b00000;font-weight:bold'" if left_behind else ""
            cells = "".join(f"<td style='text-align:left'>{html.escape(c)}</td>"
                            for c in placement.row())
            body.append(f"<tr{style}>{cells}</tr>")
        return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"

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


def _walk_module(module: nn.Module, prefix: str, registered: bool, how: str,
                 aliases: dict[int, str], seen: set[int]) -> Iterator[Placement]:
    """Every tensor of ``module`` and its submodules, plain attributes and containers included.

    ``registered`` is False for a module reached through a plain list/dict (``how``
    says which): then even its parameters are not moved by the owner's ``to``.
    """
    for path, sub in module.named_modules(prefix=prefix):
        if id(sub) in seen:
            continue
        seen.add(id(sub))
        for name, param in sub._parameters.items():
            if param is not None:
                kind = PARAMETER if registered else f"{PARAMETER} of a module in a plain {how}"
                yield _placement(_join(path, name), kind, param, registered)
        for name, buffer in sub._buffers.items():
            if buffer is not None:
                base = NON_PERSISTENT_BUFFER if name in sub._non_persistent_buffers_set else BUFFER
                kind = base if registered else f"{base} of a module in a plain {how}"
                yield _placement(_join(path, name), kind, buffer, registered)
        for name, value in vars(sub).items():
            if name not in _MODULE_INTERNALS:
                yield from _walk_value(value, _join(path, name), None, aliases, seen, 0)


def _walk_value(value: object, name: str, how: str | None, aliases: dict[int, str],
                seen: set[int], depth: int) -> Iterator[Placement]:
    """Tensors inside an attribute value: a tensor, a list/tuple/dict, or a module in one."""
    if isinstance(value, torch.Tensor):
        kind = {None: TENSOR_ATTRIBUTE, "list": IN_LIST, "dict": IN_DICT}[how]
        alias = aliases.get(id(value), "")
        yield _placement(name, kind, value, bool(alias), alias)
    elif isinstance(value, nn.Module) and how is not None:
        yield from _walk_module(value, name, False, how, aliases, seen)
    elif depth < _MAX_DEPTH and isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk_value(item, _join(name, str(index)), "list", aliases, seen, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(value, dict):
        for key, item in value.items():
            yield from _walk_value(item, _join(name, str(key)), "dict", aliases, seen, depth + 1)


def _registered(module: nn.Module) -> dict[int, str]:
    """id -> dotted name of every registered parameter and buffer (for spotting aliases)."""
    names = {}
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        names.setdefault(id(tensor), name)
    return names


def where(obj: nn.Module | torch.Tensor | dict | list | tuple) -> PlacementTable:
    """Return a table of every tensor reachable from ``obj``: name, kind, device, dtype, shape.

    ``obj`` is a module, a tensor, or a dict/list/tuple of them. For a module the
    table lists its parameters, buffers (persistent or not), plain tensor
    attributes, tensors in list/dict attributes and the tensors of modules kept in
    a plain list or dict, each with whether ``Module.to`` moves it. Names are
    dotted paths (``heads.0.weight``). A tensor in a container that is the same
    object as a registered one (``nn.LSTM._flat_weights``) is marked as such.
    The table prints as text and shows as an HTML table in a notebook; it is a
    list of :class:`Placement`. Introduced in 03_module_to.
    """
    if isinstance(obj, nn.Module):
        return PlacementTable(_walk_module(obj, "", True, "", _registered(obj), set()))
    if isinstance(obj, torch.Tensor):
        return PlacementTable([_placement("tensor", LOOSE, obj, None)])
    if isinstance(obj, (dict, list, tuple)):
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        table = PlacementTable()
        for key, value in items:
            if isinstance(value, nn.Module):
                table += _walk_module(value, str(key), True, "", _registered(value), set())
            elif isinstance(value, torch.Tensor):
                table.append(_placement(str(key), LOOSE, value, None))
            elif isinstance(value, (dict, list, tuple)):
                table += [replace(p, name=f"{key}.{p.name}") for p in where(value)]
        return table
    raise TypeError(
        f"where() looks inside a module, a tensor, or a dict/list of them; got "
        f"{type(obj).__name__}. Pass the model itself (not its output or a function)."
    )


# ----------------------------------------------------------------------------- audit


def _fix(placement: Placement) -> str:
    """How to make Module.to move this tensor."""
    leaf = placement.name.rsplit(".", 1)[-1]
    if placement.kind == TENSOR_ATTRIBUTE:
        return (f"register it in __init__: self.register_buffer({leaf!r}, tensor) "
                f"(persistent=False keeps it out of state_dict), or make it an nn.Parameter")
    if placement.kind == IN_LIST:
        return ("keep trainable tensors in nn.ParameterList; otherwise register each one "
                "with register_buffer, or create it in forward with device=x.device")
    if placement.kind == IN_DICT:
        return ("keep trainable tensors in nn.ParameterDict; otherwise register each one "
                "with register_buffer, or create it in forward with device=x.device")
    if "plain list" in placement.kind:
        return "hold the modules in nn.ModuleList instead of a Python list"
    return "hold the modules in nn.ModuleDict instead of a Python dict"


def _why(placement: Placement) -> str:
    if placement.kind == TENSOR_ATTRIBUTE:
        return "a plain tensor attribute is not registered, so Module.to does not see it"
    if placement.kind in (IN_LIST, IN_DICT):
        return "Module.to does not look inside Python lists or dicts"
    return ("the module holding it sits in a plain Python container, so it is not a "
            "submodule: not in parameters(), not in state_dict, not moved")


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
        lines += [f"{i}. {finding}" for i, finding in enumerate(self, 1)]
        return "\n".join(lines)

    __repr__ = __str__


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
    return target


def audit(module: nn.Module, device: str | torch.device) -> Findings:
    """Return the findings for ``module`` and ``device``: tensors not on ``device`` after ``.to``.

    One :class:`Finding` per tensor that ``module.to(device)`` would leave elsewhere
    (plain tensor attributes, tensors in lists/dicts, tensors of modules in a plain
    list/dict) or that is registered but not on ``device`` yet. An empty list
    means clean. Each finding's ``str()`` names the dotted path, why, and the fix.

    ``device`` may be any device PyTorch can parse, including ``meta`` and devices
    this machine lacks: the audit only reads ``.device``, never copies or allocates,
    so ``audit(model, 'cuda')`` on a laptop finds what a GPU machine would trip on.
    A bare ``'cuda'`` means the current CUDA device (``cuda:0`` when none is
    visible), which is where ``.to('cuda')`` puts tensors. Tensors in containers
    that are the same objects as registered ones (``nn.LSTM._flat_weights``) are
    not findings. Introduced in 03_module_to; used throughout 04_cross_device_errors.
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
        if placement.device == target or placement.alias_of:
            continue
        if placement.moved_by_to:
            findings.append(Finding(
                placement.name, placement.kind, placement.device, target, True,
                "it is registered, so Module.to moves it, but it has not been moved yet",
                f"call model.to({str(target)!r}) (no reassignment needed), or move "
                f"the data to {placement.device} instead"))
        else:
            findings.append(Finding(
                placement.name, placement.kind, placement.device, target, False,
                _why(placement), _fix(placement)))
    return findings


# ---------------------------------------------------------------------------- figure


def placement_figure(module: nn.Module, device: str | torch.device | None = None,
                     title: str | None = None, max_rows: int = 40) -> Figure:
    """Draw ``module``'s tree with each tensor as a box coloured by its device.

    Tensors that ``Module.to`` leaves behind are marked with a red edge and
    "left behind by .to"; with ``device`` given, tensors not on it are marked
    "not on <device>". Long models are cut at ``max_rows`` rows (the figure says
    how many were left out). Returns the matplotlib Figure. Introduced in 03_module_to.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"placement_figure() needs an nn.Module, got {type(module).__name__}.")
    target = _target_device(device) if device is not None else None
    rows: list[tuple[int, str, Placement | None]] = []  # depth, label, tensor or None
    drawn: set[str] = set()
    for placement in where(module):
        parts = placement.name.split(".")
        for depth in range(1, len(parts)):
            owner = ".".join(parts[:depth])
            if owner not in drawn:
                drawn.add(owner)
                rows.append((depth - 1, parts[depth - 1], None))
        rows.append((len(parts) - 1, parts[-1], placement))
    hidden = max(0, len(rows) - max_rows)
    rows = rows[:max_rows]
    height = len(rows) + 1 + (1 if hidden else 0)
    figure, axes = plt.subplots(figsize=(10, 0.6 + 0.32 * height))
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.5 - (1 if hidden else 0), len(rows) + 0.5)
    axes.axis("off")
    axes.set_title(title or f"Where the tensors of {type(module).__name__} live")
    axes.text(0.1, len(rows), type(module).__name__, fontsize=10, weight="bold",
              family="monospace", va="center")
    for index, (depth, label, placement) in enumerate(rows):
        y = len(rows) - 1 - index
        x = 0.4 + 0.45 * depth
        if placement is None:
            axes.text(x, y, f"{label}/", fontsize=9, family="monospace", va="center",
                      color="#444444")
            continue
        colour = _DEVICE_COLOURS.get(placement.device.type, _META_COLOUR)
        left_behind = placement.moved_by_to is False
        off_target = target is not None and placement.device != target
        axes.text(x, y, f"{label}  [{placement.device}]", fontsize=9, family="monospace",
                  va="center", bbox={"boxstyle": "round,pad=0.25", "facecolor": colour,
                                     "edgecolor": "#c00000" if left_behind else "#777777",
                                     "linewidth": 2 if left_behind else 0.8})
        marks = [m for m, on in (("left behind by .to", left_behind),
                                 (f"not on {target}", off_target)) if on]
        note = placement.kind + (f"  ✗ {', '.join(marks)}" if marks else "")
        axes.text(4.6, y, note, fontsize=8, va="center",
                  color="#c00000" if marks else "#555555")
    if hidden:
        axes.text(0.4, -1, f"... {hidden} more rows not drawn", fontsize=9, style="italic")
    devices = sorted({p.device.type for _, _, p in rows if p is not None})
    handles = [Patch(facecolor=_DEVICE_COLOURS.get(d, _META_COLOUR), edgecolor="#777777",
                     label=d) for d in devices]
    handles.append(Patch(facecolor="white", edgecolor="#c00000", linewidth=2,
                         label="left behind by .to"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                title="device", title_fontsize=8)
    figure.tight_layout()
    return figure
