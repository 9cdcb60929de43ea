"""Look inside a distributed checkpoint (a ``torch.distributed.checkpoint`` folder) safely.

Introduced in 10_sharded_training. ``dcp.save`` writes ``.metadata`` (a pickle saying, per
tensor, its shape, dtype and which chunk sits in which rank's ``__<rank>_<n>.distcp``
file) and the data files. Only ``.metadata`` is read, by an unpickler that accepts only
the classes DCP writes there.
"""

from __future__ import annotations

import io
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from utils.errors import CheckpointError, UnsafeCheckpointError
from utils.text import format_bytes, table_html, table_text


def inspect_dcp(folder: str | os.PathLike) -> DcpInfo:
    """Return what the DCP checkpoint in ``folder`` holds, reading only its ``.metadata``.

    Per entry: key (``model.0.weight``), full shape and dtype, and its chunks (offsets,
    sizes, the file and so the rank); non-tensor items have no shape. No process group
    is needed. Raises FileNotFoundError, CheckpointError (damaged) or
    UnsafeCheckpointError. Introduced in 10_sharded_training.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"No DCP checkpoint folder at {str(folder)!r}.")
    if not (folder / METADATA_FILE).is_file():
        found = sorted(p.name for p in folder.iterdir())[:10]
        raise FileNotFoundError(
            f"{str(folder)!r} has no {METADATA_FILE} file, so it is not a finished DCP "
            f"checkpoint (it holds: {', '.join(found) or 'nothing'}). dcp.save writes "
            f"{METADATA_FILE} last: a folder without it is an interrupted save."
        )
    metadata = _read_metadata(folder)
    state = getattr(metadata, "state_dict_metadata", None)
    storage = getattr(metadata, "storage_data", None) or {}
    if not isinstance(state, dict):
        raise CheckpointError(f"'{folder.name}/{METADATA_FILE}' holds no DCP metadata "
                              f"(found {type(metadata).__name__}).")
    files_of: dict[tuple[str, tuple[int, ...]], str] = {}
    for index, info in storage.items():
        offset = tuple(index.offset) if getattr(index, "offset", None) is not None else ()
        files_of[(index.fqn, offset)] = str(getattr(info, "relative_path", "?"))
    entries = []
    for key, meta in state.items():
        if hasattr(meta, "chunks"):  # a tensor
            chunks = tuple(
                Chunk(tuple(c.offsets), tuple(c.sizes), file, _rank_of(file))
                for c in meta.chunks
                for file in [files_of.get((key, tuple(c.offsets)), "?")]
            )
            entries.append(DcpEntry(key, tuple(meta.size), meta.properties.dtype, chunks))
        else:  # bytes: a pickled non-tensor item
            file = next((f for (fqn, _), f in files_of.items() if fqn == key), "?")
            entries.append(DcpEntry(key, None, None, (Chunk((), (), file, _rank_of(file)),)))
    files = {p.name: p.stat().st_size for p in sorted(folder.iterdir())
             if _DATA_FILE.match(p.name) or p.suffix == ".distcp"}
    return DcpInfo(name=folder.name, files=files, entries=entries)


# --- what inspect_dcp is built on, and the other helpers ---

METADATA_FILE = ".metadata"
_DATA_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
_SAFE_MODULES = {
    "torch.distributed.checkpoint.metadata",  # Metadata, TensorStorageMetadata, ...
}
_SAFE_NAMES = {
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles a DCP ``.metadata`` file, refusing any class DCP does not write there."""

    def find_class(self, module: str, name: str) -> Any:
        is_dtype = module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        if module in _SAFE_MODULES or (module, name) in _SAFE_NAMES or is_dtype:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


@dataclass(frozen=True)
class Chunk:
    """One piece of a tensor in a DCP checkpoint: where it starts, its size, which file."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str
    #: The rank that wrote the file (from its name, ``__<rank>_<n>.distcp``), or None.
    rank: int | None


@dataclass(frozen=True)
class DcpEntry:
    """One item of a DCP checkpoint: a tensor (with shape, dtype, chunks) or a non-tensor."""

    key: str
    shape: tuple[int, ...] | None  # None for a non-tensor item (saved as pickled bytes)
    dtype: torch.dtype | None
    chunks: tuple[Chunk, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor (0 for a non-tensor item)."""
        if self.shape is None or self.dtype is None:
            return 0
        return torch.Size(self.shape).numel() * self.dtype.itemsize

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks whose files hold a piece of this entry, in order."""
        return tuple(sorted({c.rank for c in self.chunks if c.rank is not None}))

    def written_by(self) -> str:
        """Which rank wrote which rows: ``rank 0 [0:3], rank 1 [3:6]``, or ``rank 0``."""
        if self.shape is None or not self.chunks:
            return ", ".join(f"rank {r}" for r in self.ranks) or "?"
        whole = all(tuple(c.sizes) == tuple(self.shape) for c in self.chunks)
        if whole:
            return ", ".join(f"rank {r}" for r in self.ranks)
        return ", ".join(f"rank {c.rank} {_rows(c)}" for c in
                         sorted(self.chunks, key=lambda c: (c.offsets, c.rank or 0)))


def _rows(chunk: Chunk) -> str:
    if not chunk.sizes:
        return "[scalar]"
    start, size = chunk.offsets[0], chunk.sizes[0]
    return f"[{start}:{start + size}]"


@dataclass
class DcpInfo:
    """What :func:`inspect_dcp` found in a DCP folder. Renders as a table in a notebook."""

    name: str
    files: dict[str, int]  # data file name -> bytes
    entries: list[DcpEntry] = field(default_factory=list)
    format: str = "dcp"

    @property
    def tensors(self) -> list[DcpEntry]:
        """The tensor entries (non-tensor items, such as a step counter, left out)."""
        return [e for e in self.entries if e.shape is not None]

    @property
    def ranks(self) -> list[int]:
        """The ranks that wrote a data file, in order."""
        return sorted({int(m.group(1)) for f in self.files if (m := _DATA_FILE.match(f))})

    @property
    def tensor_bytes(self) -> int:
        """Bytes of all the tensors, whole."""
        return sum(e.nbytes for e in self.tensors)

    def summary(self) -> str:
        """One line: name, how many ranks wrote it, files, tensors and their size."""
        files = ", ".join(f"{n} ({format_bytes(b)})" for n, b in sorted(self.files.items()))
        others = len(self.entries) - len(self.tensors)
        extra = f" and {others} other item(s)" if others else ""
        return (f"{self.name}: DCP folder written by {len(self.ranks)} rank(s); "
                f"{len(self.tensors)} tensor(s) in {format_bytes(self.tensor_bytes)}{extra}; "
                f"data files: {files or 'none'}")

    def rows(self, limit: int = 40) -> list[tuple[str, str, str, str]]:
        """(key, shape, dtype, written by) as strings, at most ``limit`` of them."""
        return [(e.key, "-" if e.shape is None else str(tuple(e.shape)),
                 "(not a tensor)" if e.dtype is None else str(e.dtype).removeprefix("torch."),
                 e.written_by()) for e in self.entries[:limit]]

    def __str__(self) -> str:
        return table_text(self.summary(), _HEADER, self.rows(), len(self.entries))

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return table_html(self.summary(), _HEADER, self.rows(), len(self.entries))


_HEADER = ("key", "shape", "dtype", "written by")


def _read_metadata(folder: Path) -> Any:
    where = f"{folder.name}/{METADATA_FILE}"
    data = (folder / METADATA_FILE).read_bytes()
    if not data:
        raise CheckpointError(f"{where!r} is empty: the save that wrote it was interrupted. "
                              "Use the previous checkpoint folder, or save again.")
    try:
        return _MetadataUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as error:
        if "." in str(error) and " " not in str(error):
            raise UnsafeCheckpointError(
                f"{where!r} was refused: it asks for {error}, which a DCP metadata file "
                "never holds. Nothing in it was executed. Open it only if you trust where "
                "it came from (torch.distributed.checkpoint.FileSystemReader unpickles it)."
            ) from None
        raise CheckpointError(f"{where!r} cannot be read: it is damaged or truncated "
                              f"({error}). Save again.") from None
    except (EOFError, AttributeError, ValueError, TypeError, IndexError) as error:
        raise CheckpointError(f"{where!r} cannot be read: it is damaged or truncated "
                              f"({type(error).__name__}: {error}). Save again.") from None


# --- save to a new folder, then switch ---

LATEST_FILE = "latest"


def save_and_switch(state_dict: dict, root: str | os.PathLike, step: int, **save_options) -> Path:
    """``dcp.save`` into ``root/step_<step>``, then point ``root/latest`` at it; return the folder.

    The pointer (a one-line file) is replaced atomically only after ``dcp.save`` returned,
    so a save that dies halfway leaves ``latest`` naming the previous complete folder.
    Every rank calls it; rank 0 switches the pointer. Introduced in 10_sharded_training.
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"step_{step:06d}"
    dcp.save(state_dict, checkpoint_id=folder, **save_options)
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed or dist.get_rank() == 0:
        temporary = root / f".{LATEST_FILE}.{os.getpid()}.tmp"
        with open(temporary, "w") as handle:
            handle.write(folder.name + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, root / LATEST_FILE)
    if distributed:
        dist.barrier()
    return folder


def latest(root: str | os.PathLike) -> Path | None:
    """Return the folder ``root/latest`` names, or None before any save (10_sharded_training)."""
    pointer = Path(root) / LATEST_FILE
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise CheckpointError(f"{str(pointer)!r} holds {name!r}, not a folder name written "
                              "by save_and_switch.")
    return Path(root) / name


def _rank_of(file: str) -> int | None:
    found = _DATA_FILE.match(file)
    return int(found.group(1)) if found else None


def __getattr__(name: str):
    """``utils.dcp.shard_figure`` (notebook 08 calls it there), now in utils/figures.py."""
    if name == "shard_figure":
        from utils.figures import shard_figure
        return shard_figure
    raise AttributeError(f"module 'utils.dcp' has no attribute {name!r}")
