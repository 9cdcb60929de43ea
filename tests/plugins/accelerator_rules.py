"""The real accelerators' rules, enforced on the meta stand-in device (a maintainer's tool).

On a CPU-only machine the lessons' second device is ``meta``. Meta is faithful for placement but
lenient at run time: ``cpu_tensor @ meta_tensor`` silently returns a CPU tensor, a Conv2d with
meta weights accepts a CPU input, and meta holds float64 happily. A Mac (MPS) or a GPU (CUDA)
refuses all three. :class:`AcceleratorRules` is a ``TorchDispatchMode`` that sees every ATen
operation and applies those rules to the stand-in device:

``mps-float64``
    MPS has no float64: an operation that brings a float64 tensor onto the device (creates one
    there, or casts or copies one there) raises on a Mac.
``cuda-mixed-devices``
    An operation whose tensors live on different devices raises on CUDA and MPS. Allowed, as
    CUDA allows them: zero-dimensional CPU tensors (they act as scalars), CPU index tensors in
    advanced indexing (``t[idx]``, ``t[idx] = v``), and the operations that exist to move data
    (``to``, ``copy_``).
``cuda-numpy``
    ``.numpy()`` of a device tensor raises (unless ``force=True``).

When the operation also fails on meta (``nn.Linear`` with meta weights and a CPU input raises
there too), nothing changes: meta's own exception propagates with a note naming the rule, so a
cell tagged ``raises-exception`` keeps its output. Only where meta would silently succeed does
the mode raise its own error (a subclass of the exception the real device raises), naming the
rule, the operation, the line that ran it, and saying that a Mac or GPU would fail there.

Rules listed in :attr:`AcceleratorRules.allowed` are recorded but not raised: the pytest plugin
(tests/plugins/accelerator_rules_plugin.py) uses that for cells tagged ``meta-only:<rule>``.

The mode is meant to be pushed first, at the bottom of the mode stack, and stays there: other
dispatch modes entered later (``utils.ops.aten_ops``, a traffic ledger) stack on top of it and
see every operation first; their calls reach this mode and then the kernels. It is never shown
to learners. Not covered: tensors created in threads other than the one that installed it
(dispatch modes are per thread), and tensors that reach meta without an ATen operation other
than through ``torch.tensor``/``torch.as_tensor`` (patched while installed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import linecache
import os
import traceback

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: Device types that stand in for an accelerator on this machine.
STAND_IN_TYPES = frozenset({"meta"})

#: Rule id -> (the real devices that fail, what they do).
RULES = {
    "mps-float64": ("A Mac (MPS)", "MPS has no float64: a Mac raises 'TypeError: Cannot "
                    "convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
                    "float64. Please use float32 instead.'"),
    "cuda-mixed-devices": ("A GPU (CUDA) or a Mac (MPS)", "an operation on tensors on "
                           "different devices raises on a GPU and on a Mac: 'RuntimeError: "
                           "Expected all tensors to be on the same device ...'; only "
                           "zero-dimensional CPU tensors and CPU index tensors may mix"),
    "cuda-numpy": ("A GPU (CUDA) or a Mac (MPS)", ".numpy() of a device tensor raises on a GPU "
                   "or a Mac: 'TypeError: can't convert cuda:0 device type tensor to numpy. "
                   "Use Tensor.cpu() to copy the tensor to host memory first.'"),
}

_aten = torch.ops.aten
# Operations whose job is to move data between devices (CUDA accepts mixed devices there).
_TRANSFERS = frozenset({
    _aten._to_copy, _aten.copy_, _aten.copy, _aten._copy_from, _aten._copy_from_and_resize,
    _aten.to, _aten.set_, _aten.set_data, _aten._has_compatible_shallow_copy_type,
    _aten.is_same_size,
})
# Advanced indexing: CPU index tensors (argument 1, "indices") may index a device tensor.
_INDEXING = frozenset({
    _aten.index, _aten.index_put, _aten.index_put_, _aten._index_put_impl_,
    _aten._unsafe_index, _aten._unsafe_index_put,
})
_THIS_FILE = os.path.abspath(__file__)
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(_THIS_FILE)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


class AcceleratorRuleError(Exception):
    """A rule of real accelerators broken where the meta stand-in silently allowed it."""

    rule = ""


class MixedDevicesRuleError(AcceleratorRuleError, RuntimeError):
    """Tensors on different devices in one operation (CUDA raises RuntimeError)."""

    rule = "cuda-mixed-devices"


class Float64RuleError(AcceleratorRuleError, TypeError):
    """float64 on the device (MPS raises TypeError)."""

    rule = "mps-float64"


class NumpyRuleError(AcceleratorRuleError, TypeError):
    """``.numpy()`` of a device tensor (CUDA raises TypeError)."""

    rule = "cuda-numpy"


_ERRORS = {cls.rule: cls for cls in (MixedDevicesRuleError, Float64RuleError, NumpyRuleError)}


@dataclasses.dataclass
class Violation:
    """One broken rule: which, by what, where, and what happened on meta."""

    rule: str
    what: str
    where: str
    meta_raised: bool = False  # meta raised too: behaviour already matches the real device
    allowed: bool = False  # recorded only (a meta-only cell)

    def message(self) -> str:
        """The sentence a maintainer reads: rule, operation, place, and the real device's answer."""
        on_meta = ("meta raised as well" if self.meta_raised
                   else "the meta stand-in silently allowed it")
        who, what = RULES[self.rule]
        return (f"accelerator rule {self.rule!r} broken: {self.what}, at {self.where}; "
                f"{on_meta}, but {what}. {who} would fail here. "
                f"(Maintainer check, tests/plugins/accelerator_rules.py.)")


def _is_cell(filename: str) -> bool:
    return "ipykernel_" in filename or filename.startswith("<ipython-input")


def _where() -> str:
    """The notebook cell line (and the innermost library line) that ran the operation."""
    frames = [f for f in traceback.extract_stack()[:-1]
              if os.path.abspath(f.filename) != _THIS_FILE
              and not os.path.abspath(f.filename).startswith(_TORCH_DIR)]
    if not frames:
        return "an unknown place"
    cells = [f for f in frames if _is_cell(f.filename)]
    inner = frames[-1]

    def show(frame) -> str:
        line = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
        if _is_cell(frame.filename):
            return f"cell line {frame.lineno}: `{line}`"
        path = os.path.abspath(frame.filename)
        if path.startswith(_REPO + os.sep):
            path = os.path.relpath(path, _REPO)
        return f"{path}:{frame.lineno} in {frame.name}: `{line}`"

    if cells and cells[-1] is not inner:
        return f"{show(cells[-1])} (via {show(inner)})"
    return show(inner)


def _tensors(values):
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, torch.Tensor))


def _describe(func, args, kwargs) -> str:
    """'aten.mm got mat1 on cpu, mat2 on meta' (argument names from the operator's schema)."""
    names = [a.name for a in func._schema.arguments]
    parts = []
    for name, value in list(zip(names, args, strict=False)) + list(kwargs.items()):
        found = list(_tensors([value]))
        if found:
            devices = sorted({str(t.device) + ("(0-dim)" if t.dim() == 0 else "") for t in found})
            parts.append(f"{name} on {'/'.join(devices)}")
    return f"{func.overloadpacket.__name__}(...) got {', '.join(parts)}"


class AcceleratorRules(TorchDispatchMode):
    """A dispatch mode applying MPS's and CUDA's rules to the stand-in device (see module doc).

    ``violations`` lists every :class:`Violation` seen since the last :meth:`take`.
    ``allowed`` holds rule ids to record without raising. ``enabled`` holds the rules checked.
    """

    def __init__(self, stand_in_types=STAND_IN_TYPES) -> None:
        super().__init__()
        self.stand_in_types = frozenset(stand_in_types)
        self.enabled = set(RULES)
        self.allowed: set[str] = set()
        self.violations: list[Violation] = []

    def take(self) -> list[Violation]:
        """Return the violations recorded so far and forget them."""
        found, self.violations = self.violations, []
        return found

    # -- the rules -------------------------------------------------------------------------
    def _mixed(self, func, args, kwargs) -> str | None:
        packet = func.overloadpacket
        if packet in _TRANSFERS:
            return None
        values = list(args) + list(kwargs.values())
        if packet in _INDEXING and len(values) > 1:
            values = [values[0]] + values[2:]  # indices (argument 1) may stay on the CPU
        devices = {t.device for t in _tensors(values)
                   if not (t.device.type == "cpu" and t.dim() == 0)}
        return _describe(func, args, kwargs) if len(devices) > 1 else None

    def _on_device_float64(self, tensors) -> bool:
        return any(t.dtype == torch.float64 and t.device.type in self.stand_in_types
                   for t in tensors)

    def _float64(self, func, args, kwargs, out) -> str | None:
        outs = list(_tensors(out if isinstance(out, (list, tuple)) else [out]))
        if not self._on_device_float64(outs):
            return None
        if self._on_device_float64(_tensors(list(args) + list(kwargs.values()))):
            return None  # already there: the rule broke where it first arrived
        return f"{func.overloadpacket.__name__}(...) made a float64 tensor on " + \
            ", ".join(sorted({str(t.device) for t in outs}))

    # -- enforcement -----------------------------------------------------------------------
    def _broken(self, rule: str, what: str, meta_raised: bool) -> Violation:
        found = Violation(rule, what, _where(), meta_raised, rule in self.allowed)
        self.violations.append(found)
        return found

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        __tracebackhide__ = True  # IPython and pytest show the cell's line, not this frame
        kwargs = kwargs or {}
        mixed = self._mixed(func, args, kwargs) if "cuda-mixed-devices" in self.enabled else None
        try:
            out = func(*args, **kwargs)
        except Exception as error:
            if mixed:
                error.add_note(self._broken("cuda-mixed-devices", mixed, True).message())
            raise
        if mixed:
            self._raise_unless_allowed(self._broken("cuda-mixed-devices", mixed, False))
        if "mps-float64" in self.enabled:
            made = self._float64(func, args, kwargs, out)
            if made:
                self._raise_unless_allowed(self._broken("mps-float64", made, False))
        return out

    def _raise_unless_allowed(self, found: Violation) -> None:
        __tracebackhide__ = True
        if not found.allowed:
            raise _ERRORS[found.rule](found.message())

    # -- what no dispatch mode sees ---------------------------------------------------------
    def check_numpy(self, tensor: torch.Tensor, force: bool, original):
        """``Tensor.numpy`` with the ``cuda-numpy`` rule applied."""
        if force or "cuda-numpy" not in self.enabled or tensor.device.type == "cpu":
            return original(tensor, force=force)
        what = f"numpy() of a tensor on {tensor.device}"
        try:
            result = original(tensor, force=force)
        except Exception as error:
            error.add_note(self._broken("cuda-numpy", what, True).message())
            raise
        self._raise_unless_allowed(self._broken("cuda-numpy", what, False))
        return result

    def check_created(self, tensor: torch.Tensor, name: str) -> torch.Tensor:
        """``torch.tensor``/``torch.as_tensor`` results (they reach meta without an ATen op)."""
        if "mps-float64" in self.enabled and self._on_device_float64([tensor]):
            self._raise_unless_allowed(
                self._broken("mps-float64", f"torch.{name}(...) made a float64 tensor on "
                             f"{tensor.device}", False))
        return tensor


# -- installing it -------------------------------------------------------------------------
_ACTIVE: list[AcceleratorRules] = []
_PATCHED: dict[str, object] = {}


def _patch() -> None:
    original_numpy = torch.Tensor.numpy

    @functools.wraps(original_numpy)
    def numpy(self, *, force=False):
        return (_ACTIVE[-1].check_numpy(self, force, original_numpy) if _ACTIVE
                else original_numpy(self, force=force))

    _PATCHED["numpy"] = original_numpy
    torch.Tensor.numpy = numpy
    for name in ("tensor", "as_tensor"):
        original = getattr(torch, name)

        def make(original=original, name=name):
            @functools.wraps(original)
            def create(*args, **kwargs):
                result = original(*args, **kwargs)
                return _ACTIVE[-1].check_created(result, name) if _ACTIVE else result
            return create

        _PATCHED[name] = original
        setattr(torch, name, make())


def _unpatch() -> None:
    if "numpy" in _PATCHED:
        torch.Tensor.numpy = _PATCHED.pop("numpy")
    for name in ("tensor", "as_tensor"):
        if name in _PATCHED:
            setattr(torch, name, _PATCHED.pop(name))


class enforce:
    """``with enforce() as rules:``: the rules hold inside the block (for tests and scripts)."""

    def __init__(self, allowed=(), enabled=None) -> None:
        self.rules = AcceleratorRules()
        self.rules.allowed = set(allowed)
        if enabled is not None:
            self.rules.enabled = set(enabled)

    def __enter__(self) -> AcceleratorRules:
        if not _ACTIVE:
            _patch()
        _ACTIVE.append(self.rules)
        self.rules.__enter__()
        return self.rules

    def __exit__(self, *exc) -> None:
        self.rules.__exit__(*exc)
        _ACTIVE.remove(self.rules)
        if not _ACTIVE:
            _unpatch()


# -- the kernel side of the pytest plugin ----------------------------------------------------
_KERNEL: list[enforce] = []


def kernel_begin_cell(allowed: list[str] | str) -> None:
    """Install the rules for good (first call), forget old violations, allow ``allowed``.

    ``allowed`` is a list of rule ids, or ``"all"``; an unknown rule id raises ValueError.
    """
    allowed = list(RULES) if allowed == "all" else allowed
    unknown = set(allowed) - set(RULES)
    if unknown:
        raise ValueError(f"unknown accelerator rule(s) {sorted(unknown)}; "
                         f"the rules are {sorted(RULES)}")
    if not _KERNEL:
        _KERNEL.append(enforce())
        _KERNEL[0].__enter__()
    rules = _KERNEL[0].rules
    rules.take()
    rules.allowed = set(allowed)


def kernel_end_cell() -> str:
    """The violations of the cell just run, as JSON (a list of dicts)."""
    if not _KERNEL:
        return "[]"
    rules = _KERNEL[0].rules
    rules.allowed = set()
    return json.dumps([dataclasses.asdict(v) | {"message": v.message()} for v in rules.take()])
