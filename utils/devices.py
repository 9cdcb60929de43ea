"""Devices: pick one, name a second one, check a device string, report the machine.

Introduced in notebook 00_devices; every later notebook's setup cell uses
``pick_device`` and ``environment_report``.

The choice order is cuda, then mps, then xpu, then cpu. Set the environment
variable ``LESSONS_DEVICE`` (for example ``LESSONS_DEVICE=cpu``) to override the
choice for a whole class or a test run.
"""

from __future__ import annotations

import difflib
import os
import platform
import sys
from importlib import metadata

import torch

#: Environment variable that overrides :func:`pick_device` (e.g. ``cpu``, ``cuda:1``).
DEVICE_ENV_VAR = "LESSONS_DEVICE"

#: Accelerator types in the order :func:`pick_device` tries them.
ACCELERATOR_ORDER = ("cuda", "mps", "xpu")

#: Device types a lesson can name and this module can check for availability.
KNOWN_TYPES = ("cpu", "cuda", "mps", "xpu", "meta")

# Words people type for a device, and what PyTorch calls it.
_NICKNAMES = {
    "gpu": "cuda",
    "nvidia": "cuda",
    "rocm": "cuda",
    "hip": "cuda",
    "apple": "mps",
    "metal": "mps",
    "intel": "xpu",
    "host": "cpu",
}


class DeviceNotAvailableError(RuntimeError):
    """A device string that PyTorch understands, naming a device this machine lacks."""


def _count(device_type: str) -> int:
    """Number of usable devices of ``device_type`` on this machine (0 when none)."""
    if device_type in ("cpu", "meta"):
        return 1
    if device_type == "cuda":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_type == "mps":
        backend = getattr(torch.backends, "mps", None)
        return 1 if backend is not None and backend.is_available() else 0
    if device_type == "xpu":
        xpu = getattr(torch, "xpu", None)
        return xpu.device_count() if xpu is not None and xpu.is_available() else 0
    return 0


def available_devices() -> list[str]:
    """Return the real devices of this machine, e.g. ``['cuda:0', 'cuda:1', 'cpu']``.

    Accelerators come first, in :data:`ACCELERATOR_ORDER`; ``'cpu'`` is always
    last. ``meta`` is left out: it holds no data. Introduced in 00_devices.
    """
    names = []
    for device_type in ACCELERATOR_ORDER:
        count = _count(device_type)
        if device_type == "mps":
            names += ["mps"] * min(count, 1)
        else:
            names += [f"{device_type}:{index}" for index in range(count)]
    return names + ["cpu"]


def _suggestion(word: str) -> str | None:
    """The device string a mistyped one most likely meant, or None."""
    lowered = word.strip().lower()
    base, _, index = lowered.partition(":")
    if not index and base[-1:].isdigit() and base.rstrip("0123456789") in KNOWN_TYPES:
        stem = base.rstrip("0123456789")  # 'cuda0' -> 'cuda:0'
        return f"{stem}:{base[len(stem):]}"
    if base in _NICKNAMES:
        base = _NICKNAMES[base]
    else:
        close = difflib.get_close_matches(base, KNOWN_TYPES, n=1, cutoff=0.6)
        if not close:
            return None
        base = close[0]
    if index and not index.isdigit():
        index = "0"
    guess = f"{base}:{index}" if index else base
    return guess if guess != word else None


def parse_device(spec: str | torch.device | int) -> torch.device:
    """Return ``torch.device(spec)`` after checking this machine has that device.

    Raises ``ValueError`` for a string PyTorch cannot parse (with a suggestion:
    ``'gpu'`` -> ``'cuda'``) and :class:`DeviceNotAvailableError` for a device
    this machine does not have (listing the ones it does). ``meta`` is always
    available. Introduced in 00_devices.
    """
    if isinstance(spec, torch.device):
        device = spec
    elif isinstance(spec, (str, int)) and not isinstance(spec, bool):
        try:
            device = torch.device(spec)
        except RuntimeError as error:
            hint = _suggestion(str(spec))
            did_you_mean = f" Did you mean {hint!r}?" if hint else ""
            raise ValueError(
                f"{spec!r} is not a device string PyTorch understands.{did_you_mean} "
                f"Write a type, optionally with an index: 'cpu', 'cuda', 'cuda:0', 'mps', "
                f"'xpu', 'meta'. (PyTorch said: {error})"
            ) from None
    else:
        raise TypeError(
            f"Expected a device string or torch.device, got {type(spec).__name__}: {spec!r}."
        )

    count = _count(device.type)
    index = device.index if device.index is not None else 0
    if device.type not in KNOWN_TYPES:
        return device  # a backend this module does not know; let PyTorch judge it
    if device.type == "mps" and index > 0:
        count = 0
    if index >= count:
        what = f"{device.type}:{index}" if device.index is not None else device.type
        have = ", ".join(repr(name) for name in available_devices())
        if count == 0:
            problem = f"this machine has no {device.type} device"
        else:
            problem = f"this machine has {count} {device.type} device(s), numbered from 0"
        raise DeviceNotAvailableError(
            f"Device {what!r} is not available: {problem}. Devices here: {have}. "
            f"Use utils.pick_device() to get the best one that exists."
        )
    return device


def _indexed(device_type: str) -> torch.device:
    """The current device of an accelerator type, with its index (``cuda:0``, ``mps:0``)."""
    if device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    if device_type == "xpu":
        return torch.device("xpu", torch.xpu.current_device())
    return torch.device(device_type, 0)


def pick_device() -> torch.device:
    """Return the device the lessons run on.

    If ``LESSONS_DEVICE`` is set, that device (checked with :func:`parse_device`);
    otherwise the first available of cuda, mps, xpu, else cpu. Accelerators come
    back with their index (``cuda:0``, ``mps:0``), because that is what
    ``tensor.device`` reports, so ``tensor.device == pick_device()`` works.
    Introduced in 00_devices.
    """
    override = os.environ.get(DEVICE_ENV_VAR, "").strip()
    if override:
        try:
            device = parse_device(override)
        except (ValueError, DeviceNotAvailableError) as error:
            raise type(error)(f"{DEVICE_ENV_VAR}={override!r}: {error}") from None
        if device.type == "meta":
            raise ValueError(
                f"{DEVICE_ENV_VAR}={override!r}: meta holds no data, so lessons cannot run "
                f"on it. Use a real device: {', '.join(available_devices())}."
            )
        if device.index is None and is_accelerator(device):
            device = _indexed(device.type)
        return device
    for device_type in ACCELERATOR_ORDER:
        if _count(device_type):
            return _indexed(device_type)
    return torch.device("cpu")


def is_accelerator(device: str | torch.device) -> bool:
    """True when ``device`` is a real accelerator (cuda, mps, xpu), not cpu or meta.

    Introduced in 00_devices.
    """
    return torch.device(device).type in ACCELERATOR_ORDER


def second_device(device: str | torch.device | None = None) -> torch.device:
    """Return a device other than the CPU for lessons that move tensors between two.

    ``device`` (default: :func:`pick_device`) when it is an accelerator; otherwise
    ``meta``, a device with shapes and dtypes but no data. Meta is faithful for
    where tensors end up (what moves, what is returned, what stays behind) but it
    is not a GPU: it computes nothing, some mixed cpu/meta operations succeed where
    a GPU raises, and moving to meta replaces Parameter objects where a GPU keeps
    them. Say which one you got with :func:`describe_device`.
    Introduced in 00_devices; used from 01_tensor_to on.
    """
    device = pick_device() if device is None else parse_device(device)
    return device if is_accelerator(device) else torch.device("meta")


def describe_device(device: str | torch.device) -> str:
    """Return one line saying what ``device`` is, for notebook output.

    Introduced in 00_devices.
    """
    device = torch.device(device)
    if device.type == "meta":
        return (
            "meta: a stand-in device with shapes and dtypes but no data. "
            "It shows where tensors end up; it is not a GPU and does not compute."
        )
    if device.type == "cpu":
        return "cpu: the computer's main memory and processor."
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device.index or 0)
        return f"{device}: a CUDA GPU ({name})."
    if device.type == "mps":
        return f"{device}: the GPU of an Apple silicon Mac (Metal Performance Shaders)."
    if device.type == "xpu":
        name = torch.xpu.get_device_name(device.index or 0)
        return f"{device}: an Intel GPU ({name})."
    return f"{device}: a {device.type} device."


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment_report() -> str:
    """Return a short text report of this machine for a notebook's setup cell.

    Lines: Python, torch (and its CUDA build), CUDA / MPS / XPU availability with
    device names, the picked and second device, ipywidgets and matplotlib
    versions, and what is missing for the GPU-only lessons.
    Introduced in 00_devices.
    """
    cuda_count = _count("cuda")
    if cuda_count:
        names = ", ".join(
            f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(cuda_count)
        )
        cuda_line = f"yes, {cuda_count} device(s): {names}"
    elif torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        cuda_line = "no (this torch is a CPU-only build)"
    else:
        cuda_line = "no (this torch supports CUDA, but no GPU or driver was found)"

    mps = getattr(torch.backends, "mps", None)
    if _count("mps"):
        mps_line = "yes"
    elif mps is not None and mps.is_built():
        mps_line = "no (built with MPS, but this Mac cannot use it)"
    else:
        mps_line = "no (not an Apple silicon build)"

    xpu_count = _count("xpu")
    xpu_line = f"yes, {xpu_count} device(s)" if xpu_count else "no"

    override = os.environ.get(DEVICE_ENV_VAR, "").strip()
    picked = pick_device()
    why = f"set by {DEVICE_ENV_VAR}={override}" if override else "the best one available"
    second = second_device(picked)

    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only or non-CUDA build"
    rows = [
        ("Python", f"{platform.python_version()} ({sys.platform})"),
        ("torch", f"{torch.__version__} ({build})"),
        ("CUDA available", cuda_line),
        ("MPS available", mps_line),
        ("XPU available", xpu_line),
        ("picked device", f"{picked} ({why})"),
        ("second device", f"{second} ({'real' if is_accelerator(second) else 'meta stand-in'})"),
        ("ipywidgets", _version("ipywidgets")),
        ("matplotlib", _version("matplotlib")),
    ]
    if not is_accelerator(picked):
        rows.append(
            (
                "missing",
                "no accelerator: GPU-only lessons quote PyTorch's real messages as text; "
                "the meta device stands in for placement lessons",
            )
        )
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}} : {value}" for label, value in rows)
