"""Read a checkpoint's tensors and location tags from its pickle opcodes, running nothing.

Used by :func:`utils.inspect_checkpoint` (introduced in notebook 05_save_load_scenarios)
for a file that ``torch.load(..., weights_only=True)`` refuses: a whole pickled model, a
Lightning-style checkpoint with hyper-parameter objects, a NumPy scalar. Loading such a
file means running the code it names; this module does not load it. Like PyTorch's own
``torch.serialization.get_unsafe_globals_in_checkpoint``, it walks the opcodes with
``pickletools.genops`` and never imports or calls what the file names: every class or
function is kept as its name, and a small stack machine follows the opcodes far enough to
see which storages (with their location tags) each tensor uses and under which keys.
"""

from __future__ import annotations

import io
import math
import pickletools
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

#: The functions torch.save pickles to rebuild a tensor or a Parameter.
_REBUILD_TENSOR = "torch._utils._rebuild_tensor_v2"
_REBUILD_TENSOR_V1 = "torch._utils._rebuild_tensor"
_REBUILD_META = "torch._utils._rebuild_meta_tensor_no_storage"
_REBUILD_PARAMETERS = ("torch._utils._rebuild_parameter",
                       "torch._utils._rebuild_parameter_with_state")
#: nn.Module state levels that state_dict keys leave out (``_parameters/weight`` -> ``weight``).
_MODULE_LEVELS = frozenset({"_parameters", "_buffers", "_modules"})
_STORAGE_NAME = re.compile(r"^torch\.(\w+Storage)$")
_MAX_DEPTH = 64


@dataclass(eq=False)
class Named:
    """A class or function the pickle names (by ``GLOBAL``); never imported."""

    name: str


@dataclass(eq=False)
class Built:
    """What calling or instantiating a named thing would have made: its name and inputs."""

    name: str
    args: tuple = ()
    state: Any = None
    items: dict = field(default_factory=dict)  # SETITEM(S) on it (OrderedDict, ...)
    appended: list = field(default_factory=list)  # APPEND(S) on it


@dataclass(eq=False)
class Storage:
    """A storage the pickle refers to by persistent id: its tag, dtype and size."""

    key: str
    location: str
    dtype: torch.dtype | None
    numel: int


@dataclass(eq=False)
class Tensor:
    """A tensor the pickle rebuilds: shape, dtype and the storage behind it (None on meta)."""

    storage: Storage | None
    shape: tuple[int, ...]
    dtype: torch.dtype | None


@dataclass
class Found:
    """One tensor found: its key path, shape, dtype, location tag, bytes, storage bytes."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype | None
    location: str
    nbytes: int
    storage_bytes: int
    shared: bool


class PickleScanError(ValueError):
    """The opcodes could not be followed (damaged file, or a construct this reader lacks)."""


def _storage_dtype(named: Any) -> torch.dtype | None:
    """``torch.FloatStorage`` -> float32, looked up by name on our own torch (not the file's)."""
    if not isinstance(named, Named):
        return None
    match = _STORAGE_NAME.match(named.name)
    with warnings.catch_warnings():  # the typed storage classes are deprecated: say nothing
        warnings.simplefilter("ignore", UserWarning)
        storage_class = getattr(torch, match.group(1), None) if match else None
        dtype = getattr(storage_class, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _as_dtype(named: Any) -> torch.dtype | None:
    """``GLOBAL 'torch float32'`` -> torch.float32 (meta tensors pickle their dtype so)."""
    if isinstance(named, Named) and named.name.startswith("torch."):
        dtype = getattr(torch, named.name.removeprefix("torch."), None)
        return dtype if isinstance(dtype, torch.dtype) else None
    return None


def _persistent(pid: Any) -> Any:
    """torch.save's persistent id ``('storage', type, key, location, numel, ...)``."""
    if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
        numel = pid[4] if isinstance(pid[4], int) else 0
        return Storage(key=str(pid[2]), location=str(pid[3]), dtype=_storage_dtype(pid[1]),
                       numel=numel)
    return Built("persistent id", (pid,))


def _ints(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return value
    return None


def _call(func: Any, args: Any) -> Any:
    """What REDUCE would make, without calling anything: tensors recognised, rest recorded."""
    name = func.name if isinstance(func, (Named, Built)) else type(func).__name__
    args = args if isinstance(args, tuple) else (args,)
    if name in (_REBUILD_TENSOR, _REBUILD_TENSOR_V1) and args and isinstance(args[0], Storage):
        shape = _ints(args[2]) if len(args) > 2 else None
        if shape is not None:
            return Tensor(args[0], shape, args[0].dtype)
    if name == _REBUILD_META and len(args) >= 2 and _ints(args[1]) is not None:
        return Tensor(None, _ints(args[1]), _as_dtype(args[0]))
    if name in _REBUILD_PARAMETERS and args and isinstance(args[0], Tensor):
        return args[0]
    return Built(name, args)


class _Machine:
    """Just enough of the pickle virtual machine to follow containers, memo and calls."""

    def __init__(self) -> None:
        self.stack: list[Any] = []
        self.marks: list[int] = []
        self.memo: dict[int, Any] = {}

    def pop_mark(self) -> list[Any]:
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def run(self, opcodes) -> Any:  # noqa: C901 - one branch per opcode family
        push, stack = self.stack.append, self.stack
        for opcode, arg, _ in opcodes:
            name = opcode.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                return stack.pop() if stack else None
            if name == "MARK":
                self.marks.append(len(stack))
            elif opcode.arg is not None and name not in (
                    "GLOBAL", "INST", "PERSID", "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET",
                    "LONG_BINGET", "EXT1", "EXT2", "EXT4"):
                push(arg)  # a number, string or bytes constant
            elif name == "NONE":
                push(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                push(name == "NEWTRUE")
            elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE", "EMPTY_SET"):
                push({"EMPTY_LIST": list, "EMPTY_DICT": dict, "EMPTY_TUPLE": tuple,
                      "EMPTY_SET": list}[name]())
            elif name in ("LIST", "TUPLE", "FROZENSET"):
                items = self.pop_mark()
                push(tuple(items) if name == "TUPLE" else list(items))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                count = int(name[-1])
                items = tuple(stack[-count:])
                del stack[-count:]
                push(items)
            elif name == "DICT":
                items = self.pop_mark()
                push(self._dict(items))
            elif name in ("APPEND", "APPENDS", "ADDITEMS"):
                items = [stack.pop()] if name == "APPEND" else self.pop_mark()
                target = stack[-1]
                (target if isinstance(target, list) else _appended(target)).extend(items)
            elif name in ("SETITEM", "SETITEMS"):
                items = stack[-2:] if name == "SETITEM" else None
                if name == "SETITEM":
                    del stack[-2:]
                else:
                    items = self.pop_mark()
                target = stack[-1]
                mapping = target if isinstance(target, dict) else _items(target)
                mapping.update(self._dict(items))
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                self.pop_mark()
            elif name == "DUP":
                push(stack[-1])
            elif name == "GLOBAL":
                push(Named(arg.replace(" ", ".")))
            elif name == "STACK_GLOBAL":
                attribute, module = stack.pop(), stack.pop()
                push(Named(f"{module}.{attribute}"))
            elif name in ("EXT1", "EXT2", "EXT4"):
                push(Named(f"extension code {arg}"))
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                push(_call(func, args))
            elif name in ("NEWOBJ", "NEWOBJ_EX"):
                if name == "NEWOBJ_EX":
                    stack.pop()  # kwargs
                args, cls = stack.pop(), stack.pop()
                push(Built(getattr(cls, "name", "?"), args if isinstance(args, tuple) else ()))
            elif name == "OBJ":
                items = self.pop_mark()
                push(Built(getattr(items[0], "name", "?"), tuple(items[1:])) if items else None)
            elif name == "INST":
                push(Built(arg.replace(" ", "."), tuple(self.pop_mark())))
            elif name == "BUILD":
                state = stack.pop()
                if isinstance(stack[-1], Built):
                    stack[-1].state = state
            elif name == "PERSID":
                push(_persistent(arg))
            elif name == "BINPERSID":
                push(_persistent(stack.pop()))
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                self.memo[int(arg)] = stack[-1]
            elif name == "MEMOIZE":
                self.memo[len(self.memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                push(self.memo[int(arg)])
            elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                if name == "NEXT_BUFFER":
                    push(Named("out-of-band buffer"))
            else:
                raise PickleScanError(f"opcode {name} is not followed by this reader")
        raise PickleScanError("the pickle ends without a STOP opcode (truncated)")

    @staticmethod
    def _dict(items: list[Any]) -> dict:
        result: dict = {}
        for key, value in zip(items[::2], items[1::2], strict=False):
            try:
                result[key] = value
            except TypeError:  # an unhashable key (a list): keep it under its text
                result[repr(key)] = value
        return result


def _items(target: Any) -> dict:
    return target.items if isinstance(target, Built) else {}


def _appended(target: Any) -> list:
    return target.appended if isinstance(target, Built) else []


def _walk(obj: Any, key: str, seen: set[int], found: list[tuple[str, Tensor]],
          depth: int = 0) -> None:
    if isinstance(obj, Tensor):
        found.append((key, obj))
        return
    if depth > _MAX_DEPTH or id(obj) in seen or isinstance(obj, (str, bytes, int, float)):
        return
    seen.add(id(obj))

    def join(part: Any) -> str:
        text = repr(part) if "/" in str(part) else str(part)
        return f"{key}/{text}" if key else text

    if isinstance(obj, dict):
        for name, value in obj.items():
            transparent = name in _MODULE_LEVELS
            _walk(value, key if transparent else join(name), seen, found, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            _walk(value, join(index), seen, found, depth + 1)
    elif isinstance(obj, Built):
        _walk(obj.items, key, seen, found, depth + 1)
        _walk(obj.appended, key, seen, found, depth + 1)
        _walk(obj.state, key, seen, found, depth + 1)
        _walk(obj.args, join("(args)") if obj.args else key, seen, found, depth + 1)


def _main_pickle(path: Path, fmt: str) -> bytes | io.BufferedReader:
    if fmt == "zip":
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith("/data.pkl")
                        or n == "data.pkl")
            return archive.read(name)
    handle = open(path, "rb")  # noqa: SIM115 - closed by scan()
    for _ in range(3):  # legacy: magic number, protocol version, sys_info, then the object
        for opcode, _, _ in pickletools.genops(handle):
            if opcode.name == "STOP":
                break
    return handle


def scan(path: str | Path, fmt: str) -> list[Found]:
    """Return every tensor in the checkpoint at ``path``, read from its opcodes only.

    ``fmt`` is ``'zip'`` or ``'legacy'`` (see ``utils.checkpoints._sniff``). Keys are
    joined by ``/`` as in :func:`utils.inspect_checkpoint`; a whole pickled module's
    ``_parameters`` / ``_buffers`` / ``_modules`` levels are left out, so its keys read
    like its state_dict's. Nothing the file names is imported or called. Raises
    PickleScanError when the opcodes cannot be followed. Introduced in
    05_save_load_scenarios (through inspect_checkpoint).
    """
    source = _main_pickle(Path(path), fmt)
    try:
        stream = source if isinstance(source, io.BufferedReader) else io.BytesIO(source)
        try:
            root = _Machine().run(pickletools.genops(stream))
        except (IndexError, KeyError, ValueError, EOFError) as error:
            if isinstance(error, PickleScanError):
                raise
            raise PickleScanError(f"the opcodes could not be followed ({error})") from None
    finally:
        if isinstance(source, io.BufferedReader):
            source.close()
    tensors: list[tuple[str, Tensor]] = []
    _walk(root, "", set(), tensors)
    seen_storages: set[str] = set()
    found = []
    for key, tensor in tensors:
        storage = tensor.storage
        itemsize = tensor.dtype.itemsize if tensor.dtype is not None else 0
        shared = storage is not None and storage.key in seen_storages
        if storage is not None:
            seen_storages.add(storage.key)  # the file's own key: one storage, saved once
        found.append(Found(
            key=key or "(the saved object)",
            shape=tensor.shape,
            dtype=tensor.dtype,
            location=storage.location if storage else "meta (no data saved)",
            nbytes=math.prod(tensor.shape) * itemsize,
            storage_bytes=storage.numel * itemsize if storage else 0,
            shared=shared,
        ))
    return found
