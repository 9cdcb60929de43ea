"""Checkpoints: look inside one safely, fake where it was saved, save atomically, fix prefixes.

Introduced in 05_save_load_scenarios (inspect_checkpoint, save_as_if_on) and
06_training_checkpoints (save_atomic and the prefix helpers). Nothing here unpickles with
``weights_only=False``: a checkpoint that needs code to load is refused.
"""

from __future__ import annotations

import contextvars
import os
import pickle
import re
import tempfile
import warnings
import zipfile
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from utils.errors import CheckpointError, UnsafeCheckpointError
from utils.text import (
    first_sentence,
    format_bytes,
    strip_ansi,
    table_html,
    table_text,
)

if TYPE_CHECKING:
    from utils.dcp import DcpInfo


def inspect_checkpoint(path: str | os.PathLike) -> CheckpointInfo | DcpInfo:
    """Return what the checkpoint at ``path`` holds, without loading its data.

    Per tensor: key path (``model/fc.weight``), shape, dtype, storage size and the location
    tag it was saved with (``.locations``: the set of tags). It is ``torch.load`` with
    ``weights_only=True``, ``mmap=True`` and a ``map_location`` callable that notes each
    storage's tag and returns it unchanged, so a ``cuda:0`` file inspects on a CPU. Raises
    CheckpointError (empty, truncated, not a checkpoint) or UnsafeCheckpointError (its
    ``.needs``: the code it asks for; ``.info``: its tensors, nothing of it run). A DCP
    folder goes to :func:`utils.dcp.inspect_dcp` (10). Introduced in 05_save_load_scenarios.
    """
    path = Path(path)
    if path.is_dir() and any(p.name == ".metadata" or p.suffix == ".distcp"
                             for p in path.iterdir()):
        from utils.dcp import inspect_dcp  # a torch.distributed.checkpoint folder (10)

        return inspect_dcp(path)
    fmt = _sniff(path)
    name = path.name
    tags, record = _tag_recorder()
    try:
        with warnings.catch_warnings():  # loading sparse tensors warns about invariant checks
            warnings.filterwarnings("ignore", message="Sparse invariant checks")
            loaded = torch.load(path, map_location=record, weights_only=True,
                                mmap=fmt == "zip")
    except pickle.UnpicklingError as error:
        message = strip_ansi(str(error))
        found = _unsafe_globals(path, fmt, message)
        operand = re.search(r"Unsupported operand (\d+)", message)
        if not found and operand and _head_protocol(path) > 2:
            raise CheckpointError(
                f"{name!r} is a {fmt}-format torch.save checkpoint written with pickle "
                f"protocol {_head_protocol(path)}, whose opcodes (here {operand.group(1)}) "
                "PyTorch's safe loader (weights_only=True) does not support. Re-save it with "
                "the default protocol, or, only if you trust where it came from, load it "
                "with weights_only=False."
            ) from None
        if not found and "blocked" not in message:
            raise CheckpointError(
                f"{name!r} could not be unpickled: the file is damaged or truncated, or uses "
                f"pickle operations the safe loader refuses. "
                f"(PyTorch said: {first_sentence(message)})"
            ) from None
        found = found or ["a blocked module"]
        raise UnsafeCheckpointError(
            f"{name!r} was refused: its pickle asks for {', '.join(found)}, which "
            "weights_only=True will not run. Nothing in it was executed. If you made this "
            "file yourself, save a state_dict instead; if you trust the objects, allowlist "
            "them with torch.serialization.safe_globals([...]). weights_only=False runs "
            "any code in the file: only for files you trust.",
            # what it holds and where it was saved, read without running any of it
            needs=found, info=_refused_contents(path, fmt, found),
        ) from None
    except RuntimeError as error:
        if "TorchScript" in str(error):
            raise CheckpointError(
                f"{name!r} is a TorchScript archive (torch.jit.save), not a torch.save "
                "checkpoint. torch.jit.load reads it, and runs its code."
            ) from None
        problem = _zip_problem(path) if fmt == "zip" else None
        said = "" if problem else f" (PyTorch said: {first_sentence(str(error))})"
        raise CheckpointError(
            f"{name!r} cannot be read: {problem or 'it is damaged or truncated'}.{said}"
        ) from None
    except (EOFError, KeyError, ValueError, IndexError, TypeError, OSError) as error:
        raise CheckpointError(
            f"{name!r} cannot be read: it is damaged or truncated ({fmt} format; "
            f"{type(error).__name__}: {error}). Save or download it again."
        ) from None

    found: list[tuple[str, torch.Tensor]] = []
    _walk(loaded, "", set(), found)
    return CheckpointInfo(name=name, format=fmt, file_bytes=path.stat().st_size,
                          entries=_entries(found, tags))


# --- how inspect_checkpoint reads a file, and the other helpers ---

#: A legacy (pre-1.6) checkpoint starts with pickle protocol 2, then torch's magic number.
LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
ZIP_MAGIC = b"PK\x03\x04"

#: Wrapper prefixes: DataParallel / DistributedDataParallel, then torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")

@dataclass(frozen=True)
class TensorEntry:
    """One tensor in a checkpoint: its key, what it is, and where it was saved."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    location: str
    nbytes: int
    storage_bytes: int = 0  # the whole storage it views, as torch.save writes it
    shared: bool = False  # an earlier entry already showed this storage


@dataclass
class CheckpointInfo:
    """What :func:`inspect_checkpoint` found. Renders as a table in a notebook."""

    name: str
    format: str  # "zip" (torch.save since 1.6) or "legacy"
    file_bytes: int
    entries: list[TensorEntry] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)  # what a refused file asks for

    @property
    def locations(self) -> set[str]:
        """The saved location tags, e.g. ``{'cpu'}`` or ``{'cuda:0'}``."""
        return {entry.location for entry in self.entries}

    @property
    def tensor_bytes(self) -> int:
        """Bytes of the entries' own elements (a view counts only its elements)."""
        return sum(entry.nbytes for entry in self.entries)

    @property
    def storage_bytes(self) -> int:
        """Bytes of tensor data the file holds: each storage once, whole (views included)."""
        return sum(entry.storage_bytes for entry in self.entries if not entry.shared)

    def summary(self) -> str:
        """One line: name, format, size, tensor count, storage bytes and location tags."""
        tags = ", ".join(sorted(self.locations)) or "none"
        refused = (f" (refused by weights_only=True: it needs {', '.join(self.needs)}; "
                   "nothing of it run)" if self.needs else "")
        return (
            f"{self.name}: {self.format} format, {format_bytes(self.file_bytes)}, "
            f"{len(self.entries)} tensor(s) in {format_bytes(self.storage_bytes)} of storage, "
            f"saved location tag(s): {tags}{refused}"
        )

    def rows(self, limit: int = 40) -> list[tuple[str, str, str, str, str]]:
        """(key, shape, dtype, location, storage or 'shared') as strings, at most ``limit``."""
        return [
            (e.key, str(tuple(e.shape)), str(e.dtype).removeprefix("torch."), e.location,
             "shared" if e.shared else format_bytes(e.storage_bytes))
            for e in self.entries[:limit]
        ]

    def __str__(self) -> str:
        return table_text(self.summary(), _HEADER, self.rows(), len(self.entries))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return table_html(self.summary(), _HEADER, self.rows(), len(self.entries))


_HEADER = ("key", "shape", "dtype", "saved on", "storage saved")


def _tag_recorder() -> tuple[dict[int, str], Any]:
    """Return ({storage: tag}, a map_location callable that fills it, moving nothing)."""
    tags: dict[int, str] = {}

    def record(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        tags[storage._cdata] = location
        return storage

    return tags, record


def _checkpoints_in(folder: Path) -> str:
    found = sorted(p.name for p in folder.iterdir()
                   if p.suffix in (".pt", ".pth", ".ckpt", ".bin", ".tar"))
    return ", ".join(found[:10]) if found else "none"


def _sniff(path: Path) -> str:
    """Return 'zip' or 'legacy', or raise a helpful error for anything else."""
    name = str(path)
    if not path.exists():
        folder = path.parent if str(path.parent) else Path(".")
        where = (f" Checkpoint files in {str(folder)!r}: {_checkpoints_in(folder)}."
                 if folder.is_dir() else f" The folder {str(folder)!r} does not exist either.")
        raise FileNotFoundError(f"No checkpoint at {name!r}: the file does not exist.{where}")
    if path.is_dir():
        raise IsADirectoryError(
            f"{name!r} is a folder, not a checkpoint file. Pass one file inside it; "
            f"checkpoint files there: {_checkpoints_in(path)}."
        )
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(
            f"{name!r} is empty (0 bytes): the save that wrote it failed or was interrupted. "
            "Save it again (utils.save_atomic never leaves an empty or partial file)."
        )
    with open(path, "rb") as handle:
        head = handle.read(64)
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(LEGACY_MAGIC) or (head[:1] == b"\x80" and LEGACY_MAGIC[2:] in head):
        return "legacy"  # any pickle protocol (pickle_protocol=4 adds a frame first)
    if len(head) >= 9 and int.from_bytes(head[:8], "little") < size and head[8:9] == b"{":
        found = "a safetensors file: load it with safetensors.torch.load_file"
    elif head[:1] == b"\x80":
        found = ("a plain pickle, not a torch.save checkpoint. Unpickling it can run any code: "
                 "open it only if you trust where it came from")
    else:
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            found = f"an unknown binary file starting with {head[:8]!r}"
        else:
            found = f"a text file starting with {text.splitlines()[0][:40]!r}"
    raise CheckpointError(
        f"{name!r} is not a PyTorch checkpoint: it is {found}. "
        "A torch.save file is a zip archive (or, before PyTorch 1.6, starts with "
        "torch's magic number)."
    )


def _head_protocol(path: Path) -> int:
    """The pickle protocol a file starts with (0 when it does not start with one)."""
    with open(path, "rb") as handle:
        head = handle.read(2)
    return head[1] if head[:1] == b"\x80" and len(head) == 2 else 0


def _zip_problem(path: Path) -> str | None:
    """Why a zip file cannot be a torch.save checkpoint, or None when it looks like one."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return ("its zip directory is missing or damaged, so the file is truncated or corrupted "
                "(an interrupted save or download). Save or download it again")
    shown = ", ".join(names[:5]) or "nothing"
    if not any(n.endswith("/data.pkl") for n in names):
        return (f"it is a zip archive without data.pkl (it holds: {shown}), so it was not "
                "written by torch.save")
    if not any(n.endswith("/version") and "/.data/" not in n for n in names):
        return (f"it is a zip archive with a data.pkl but no version record (it holds: "
                f"{shown}), so it was not written by torch.save")
    return None


def _unsafe_globals(path: Path, fmt: str, message: str) -> list[str]:
    if fmt == "zip":
        try:
            return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception:  # noqa: BLE001 - fall back to the names in PyTorch's message
            pass
    return sorted(set(re.findall(r"GLOBAL ([\w.]+)", message)))


#: nn.Module state levels that state_dict keys leave out (``_parameters/weight`` -> ``weight``).
_MODULE_LEVELS = frozenset({"_parameters", "_buffers", "_modules"})


def _walk(obj: Any, key: str, seen: set[int], found: list[tuple[str, torch.Tensor]]) -> None:
    if isinstance(obj, torch.Tensor):
        found.append((key, obj))
        return
    if id(obj) in seen:
        return
    if isinstance(obj, _StandIn):  # what a refused file built: look inside its state
        seen.add(id(obj))
        state = getattr(obj, "_state", None)
        if isinstance(state, Mapping):
            for name, value in state.items():
                if name in _MODULE_LEVELS:
                    _walk(value, key, seen, found)
                elif not str(name).startswith("_"):
                    part = repr(name) if "/" in str(name) else str(name)
                    _walk(value, f"{key}/{part}" if key else part, seen, found)
        elif state is not None:
            _walk(state, key, seen, found)
        _walk(getattr(obj, "_args", ()), key, seen, found)
        return
    if isinstance(obj, Mapping):
        seen.add(id(obj))
        for name, value in obj.items():
            part = repr(name) if "/" in str(name) else str(name)  # 'a/b' is not a, then b
            _walk(value, f"{key}/{part}" if key else part, seen, found)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seen.add(id(obj))
        for index, value in enumerate(obj):
            _walk(value, f"{key}/{index}" if key else str(index), seen, found)


class _StandIn:
    """Stands in for what a refused pickle names: keeps its arguments and state, runs nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args = args

    def __setstate__(self, state: Any) -> None:
        self._state = state


def _stand_in(name: str) -> tuple[type, str]:
    module, _, short = name.rpartition(".")
    return type(short, (_StandIn,), {"__module__": module}), name


def _refused_contents(path: Path, fmt: str, needs: list[str]) -> CheckpointInfo | None:
    """A refused file's tensors, read by the safe loader with each name it asks for
    allowlisted as a :class:`_StandIn`; None when they cannot be read."""
    tags, record = _tag_recorder()
    named = list(needs)
    for _ in range(64):
        try:
            with torch.serialization.safe_globals([_stand_in(n) for n in named]):
                loaded = torch.load(path, map_location=record, weights_only=True)
            break
        except pickle.UnpicklingError as error:
            more = set(re.findall(r"GLOBAL ([\w.]+)", strip_ansi(str(error)))) - set(named)
            if not more:
                return None
            named += sorted(more)
        except Exception:  # noqa: BLE001 - a damaged file: no contents to show
            return None
    else:
        return None
    found: list[tuple[str, torch.Tensor]] = []
    _walk(loaded, "", set(), found)
    return CheckpointInfo(name=path.name, format=fmt, file_bytes=path.stat().st_size,
                          entries=_entries(found, tags), needs=list(needs))


def _entries(found: list[tuple[str, torch.Tensor]], tags: dict[int, str]) -> list[TensorEntry]:
    seen: set[int] = set()
    entries = []
    for key, tensor in found:
        location, storage_bytes, shared = _where(tensor, tags, seen)
        entries.append(TensorEntry(
            key=key or "(the saved object)",
            shape=tuple(tensor.shape),
            dtype=tensor.dtype,
            location=location,
            nbytes=tensor.numel() * tensor.element_size(),
            storage_bytes=storage_bytes,
            shared=shared,
        ))
    return entries


def _where(tensor: torch.Tensor, tags: dict[int, str],
           seen: set[int]) -> tuple[str, int, bool]:
    """(location tag, storage bytes, shared with an earlier entry) for one loaded tensor."""
    if tensor.is_meta:
        return "meta (no data saved)", 0, False
    if tensor.layout != torch.strided:  # sparse: its values tensor holds a storage and a tag
        values = tensor._values() if tensor.layout == torch.sparse_coo else tensor.values()
        tag = tags.get(values.untyped_storage()._cdata)
        return (f"{tag} (sparse)" if tag else "n/a (sparse)"), 0, False
    storage = tensor.untyped_storage()
    shared = storage._cdata in seen
    seen.add(storage._cdata)
    return tags.get(storage._cdata, "unknown"), storage.nbytes(), shared


# --- writing a checkpoint "as if saved on" another device ---

_PRETEND_LOCATION: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "pretend_location", default=None
)
_TAGGER_REGISTERED = False


def _pretend_tag(storage: Any) -> str | None:
    return _PRETEND_LOCATION.get()


def _no_restore(storage: Any, location: str) -> None:
    return None  # leave restoring to PyTorch's own deserializers


def save_as_if_on(obj: Any, path: str | os.PathLike, location: str) -> Path:
    """``torch.save(obj, path)`` with every storage tagged ``location``; return ``Path(path)``.

    From CPU tensors it writes the tag a GPU (``'cuda:0'``) or a Mac (``'mps'``) writes, so
    loading it without ``map_location`` raises PyTorch's genuine error on a CPU-only machine
    (``torch.serialization.register_package``). Introduced in 05_save_load_scenarios.
    """
    global _TAGGER_REGISTERED
    try:
        tag = str(torch.device(location))
    except (RuntimeError, TypeError):
        raise ValueError(
            f"{location!r} is not a device PyTorch knows; write a tag such as 'cuda:0', "
            "'cuda:1', 'mps' or 'cpu'."
        ) from None
    if not _TAGGER_REGISTERED:
        torch.serialization.register_package(0, _pretend_tag, _no_restore)
        _TAGGER_REGISTERED = True
    token = _PRETEND_LOCATION.set(tag)
    try:
        torch.save(obj, path)
    finally:
        _PRETEND_LOCATION.reset(token)
    return Path(path)


def _umask() -> int:
    """The process's umask (reading it means setting it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def save_atomic(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save(obj, path)`` that never leaves a partial file; return ``Path(path)``.

    Writes a temporary file in the same folder, fsyncs it, then ``os.replace``-s it onto
    ``path``: a save that dies halfway leaves the previous checkpoint. Introduced in
    06_training_checkpoints.
    """
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a folder; give a file name to save to.")
    if not folder.is_dir():
        raise FileNotFoundError(
            f"Cannot save to {str(path)!r}: the folder {str(folder)!r} does not exist. "
            "Create it first (Path(...).mkdir(parents=True, exist_ok=True))."
        )
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, on every path
        dir=folder, prefix=f".{path.name}.", suffix=".tmp", delete=False
    )
    try:
        with handle:
            torch.save(obj, handle)
            handle.flush()
            os.chmod(handle.name, 0o666 & ~_umask())  # as open() would: not mkstemp's 0600
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename itself durable
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    return path


def _copy(state_dict: Mapping[str, Any]) -> OrderedDict:
    copied = OrderedDict(state_dict)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        copied._metadata = OrderedDict(metadata)  # type: ignore[attr-defined]
    return copied


def strip_prefix(state_dict: Mapping[str, Any], prefix: str = "module.") -> OrderedDict:
    """Return a copy of ``state_dict`` with a leading ``prefix`` removed from each key.

    Only the start changes (``module.encoder.module.w`` -> ``encoder.module.w``), unlike
    ``key.replace``. Built on ``consume_prefix_in_state_dict_if_present``. Introduced in
    06_training_checkpoints.
    """
    copied = _copy(state_dict)
    consume_prefix_in_state_dict_if_present(copied, prefix)
    return copied


def strip_wrapper_prefixes(state_dict: Mapping[str, Any],
                           target: Any = None) -> OrderedDict:
    """Return a copy of ``state_dict`` without the wrappers' leading prefixes.

    Removes ``module.`` (DataParallel, DDP) and ``_orig_mod.`` (torch.compile) while every
    key starts with one, each at most once; ``target`` (a model, a state dict or its keys)
    stops it when the keys match. Introduced in 06_training_checkpoints.
    """
    if target is not None and hasattr(target, "state_dict"):
        target = target.state_dict()
    wanted = None if target is None else set(target)
    copied = _copy(state_dict)
    left = list(WRAPPER_PREFIXES)  # without a target, each prefix goes at most once
    while copied and (wanted is None or set(copied) != wanted):
        prefix = next((p for p in (left if wanted is None else WRAPPER_PREFIXES)
                       if all(k.startswith(p) for k in copied)), None)
        if prefix is None:
            break
        consume_prefix_in_state_dict_if_present(copied, prefix)
        if prefix in left:
            left.remove(prefix)
    return copied


def add_prefix(state_dict: Mapping[str, Any], prefix: str = "module.") -> OrderedDict:
    """Return a copy of ``state_dict`` with ``prefix`` in front of every key (for a wrapped
    model). Introduced in 06_training_checkpoints."""
    return OrderedDict((prefix + key, value) for key, value in state_dict.items())
