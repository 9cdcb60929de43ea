"""Devices: pick one, name a second one, check a device string, report the machine.

Introduced in 00_devices; every setup cell uses ``pick_device`` and ``environment_report``.
``LESSONS_DEVICE=cpu`` (any device) overrides the choice for a class or a test run.
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

#: Accelerator types this module knows, in the order :func:`available_devices` lists them.
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


def pick_device() -> torch.device:
    """Return the device the lessons run on: ``LESSONS_DEVICE`` if set, else the accelerator.

    The accelerator is ``torch.accelerator.current_accelerator(check_available=True)``, else
    cpu; it comes with its index (``cuda:0``), as ``tensor.device`` reports it. Introduced
    in 00_devices.
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
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is None:
        return torch.device("cpu")
    return torch.device(accelerator.type, torch.accelerator.current_device_index())


class DeviceNotAvailableError(RuntimeError):
    """A device string that PyTorch understands, naming a device this machine lacks."""


_CPU_ONLY = "this torch is a CPU-only build"
_NO_CUDA_BUILT = "this torch is built without CUDA"
_NO_DRIVER = "CUDA build, but no NVIDIA driver found"
_OLD_DRIVER = "CUDA build, but the NVIDIA driver is too old for it"
_NO_GPU = "CUDA build and an NVIDIA driver, but no GPU it can use (check CUDA_VISIBLE_DEVICES)"
_NO_MPS_BUILT = "this torch is built without MPS"
_NO_XPU_BUILT = "this torch is built without XPU"
_NO_XPU = "XPU build, but no Intel GPU found"

#: PyTorch's own phrases when code asks for a device this machine cannot use: (phrase,
#: device type, the learner's case). Matched ignoring case (capitals changed between releases).
NO_DEVICE_MESSAGES: tuple[tuple[str, str, str], ...] = (
    # a CPU-only (or Mac) build: CUDA is not compiled in
    ("Torch not compiled with CUDA enabled", "cuda", _NO_CUDA_BUILT),
    ("PyTorch is not linked with support for cuda devices", "cuda", _NO_CUDA_BUILT),
    # a CUDA build (what `pip install torch` gives on Linux) on a machine without a GPU
    ("Found no NVIDIA driver on your system", "cuda", _NO_DRIVER),
    # the same machine, reached through a storage's .cuda() (seen on 2.14.1+cu130, lab 05)
    ("invalid argument to exchangeDevice", "cuda", _NO_DRIVER),
    # a CUDA build with a driver older than the CUDA it was built for
    ("The NVIDIA driver on your system is too old", "cuda", _OLD_DRIVER),
    ("CUDA driver version is insufficient", "cuda", _OLD_DRIVER),
    # a driver, but no device it can use (none installed, or CUDA_VISIBLE_DEVICES hides them)
    ("No CUDA GPUs are available", "cuda", _NO_GPU),
    ("no CUDA-capable device is detected", "cuda", _NO_GPU),
    ("CUDA driver initialization failed", "cuda",
     "CUDA build, but the NVIDIA driver failed to start"),
    # a ROCm build (AMD GPUs use the name cuda) without an AMD GPU
    ("No HIP GPUs are available", "cuda", "ROCm build, but no AMD GPU found"),
    # MPS asked for on a build without it (Linux, Windows), or on a Mac that cannot run it
    ("PyTorch is not linked with support for mps devices", "mps", _NO_MPS_BUILT),
    ("PyTorch code is not compiled with MPS enabled", "mps", _NO_MPS_BUILT),
    ("without MPS backend", "mps", _NO_MPS_BUILT),
    ("with arguments from the 'MPS' backend", "mps", _NO_MPS_BUILT),
    ("The MPS backend is supported on macOS", "mps",
     "MPS build, but this Mac cannot run it (too old a macOS, or no Metal GPU)"),
    # XPU (Intel GPUs) asked for on a build without it, or without an Intel GPU
    ("Torch not compiled with XPU enabled", "xpu", _NO_XPU_BUILT),
    ("PyTorch is not linked with support for xpu devices", "xpu", _NO_XPU_BUILT),
    ("No XPU devices are available", "xpu", _NO_XPU),
    ("you might not have an XPU device", "xpu", _NO_XPU),
)


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

    Accelerators first, ``'cpu'`` last, no ``meta``. Introduced in 00_devices.
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

    Raises ``ValueError`` for a string PyTorch cannot parse (suggesting ``'cuda'`` for
    ``'gpu'``) and :class:`DeviceNotAvailableError` for a device this machine lacks.
    Introduced in 00_devices.
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


def is_accelerator(device: str | torch.device) -> bool:
    """True for a real accelerator (cuda, mps, xpu), not cpu or meta. Introduced in 00_devices."""
    kind = torch.device(device).type
    built_for = torch.accelerator.current_accelerator()
    return kind in ACCELERATOR_ORDER or (built_for is not None and kind == built_for.type)


def second_device(device: str | torch.device | None = None) -> torch.device:
    """Return a device other than the CPU: ``device`` (default: :func:`pick_device`) when it
    is an accelerator, otherwise ``meta`` (shapes and dtypes, no data).

    Meta is faithful for where tensors end up, but it is not a GPU: it computes nothing.
    Introduced in 00_devices; used from 01_tensor_to on.
    """
    device = pick_device() if device is None else parse_device(device)
    return device if is_accelerator(device) else torch.device("meta")


def _no_device_case(error: BaseException | str) -> tuple[str, str] | None:
    """(device type, case) of the first :data:`NO_DEVICE_MESSAGES` entry ``error`` matches."""
    text = str(error).casefold()
    for phrase, device_type, case in NO_DEVICE_MESSAGES:
        if phrase.casefold() in text:
            return device_type, case
    return None


def unusable_device(error: BaseException | str) -> str | None:
    """Return the device type (``'cuda'``, ``'mps'``, ``'xpu'``) that ``error`` says is missing.

    ``error`` (an exception or its message) counts only when this machine really lacks
    that type and the message is one of :data:`NO_DEVICE_MESSAGES`; otherwise None.
    Introduced in lab 02_copy_pitfall (its check of ``.cuda()``); lab 04 uses it too.
    """
    found = _no_device_case(error)
    if found is None or _count(found[0]):
        return None
    return found[0]


def _nvidia_driver_present() -> bool:
    """True when the Linux NVIDIA kernel driver is loaded."""
    return os.path.exists("/proc/driver/nvidia/version")


def why_no_cuda() -> str | None:
    """Return why this machine cannot use CUDA, as one phrase, or None when it can.

    E.g. "this torch is a CPU-only build" or "CUDA build, but no NVIDIA driver found".
    Introduced in 00_devices (the environment report's CUDA line).
    """
    if _count("cuda"):
        return None
    if not torch.backends.cuda.is_built():
        if _nvidia_driver_present():
            return (f"{_NO_CUDA_BUILT}, but this machine has an NVIDIA driver: install "
                    "the CUDA build of torch to use the GPU")
        mps = getattr(torch.backends, "mps", None)
        if (mps is not None and mps.is_built()) or getattr(torch.version, "xpu", None):
            return _NO_CUDA_BUILT  # a Mac (MPS) or Intel GPU (XPU) build
        return _CPU_ONLY
    build = "ROCm" if getattr(torch.version, "hip", None) else "CUDA"
    try:
        torch.cuda.init()
    except Exception as error:  # PyTorch says why; its words decide the case
        found = _no_device_case(error)
        if found is not None:
            return found[1]
        said = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"{build} build, but CUDA cannot start here: {said}"
    return f"{build} build, but no usable GPU was found"


def describe_device(device: str | torch.device) -> str:
    """Return one line saying what ``device`` is, for notebook output (00_devices)."""
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

    Python, torch, CUDA / MPS / XPU (or why not), the picked and second device, ipywidgets
    and matplotlib. Introduced in 00_devices.
    """
    override = os.environ.get(DEVICE_ENV_VAR, "").strip()
    picked = pick_device()
    why = (f"forced by {DEVICE_ENV_VAR}={override}; without it, the best one available"
           if override else "the best one available")
    second = second_device(picked)
    on_cpu = ": lessons use the CPU" if picked.type == "cpu" else ""

    cuda_count = _count("cuda")
    no_cuda = why_no_cuda()
    if cuda_count:
        names = ", ".join(
            f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(cuda_count)
        )
        cuda_line = f"yes, {cuda_count} device(s): {names}"
    elif no_cuda == _CPU_ONLY:
        cuda_line = f"no ({no_cuda})"  # the CPU-only build's line, as stored in the notebooks
    else:
        cuda_line = f"no ({no_cuda}{on_cpu})"

    mps = getattr(torch.backends, "mps", None)
    if _count("mps"):
        mps_line = "yes"
    elif mps is not None and mps.is_built():
        mps_line = f"no (MPS build, but this Mac cannot use it{on_cpu})"
    else:
        mps_line = "no (not an Apple silicon build)"

    xpu_count = _count("xpu")
    xpu = getattr(torch, "xpu", None)
    if xpu_count:
        xpu_line = f"yes, {xpu_count} device(s)"
    elif xpu is not None and getattr(torch.version, "xpu", None):
        xpu_line = f"no (XPU build, but no Intel GPU found{on_cpu})"
    else:
        xpu_line = "no"

    if torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    elif getattr(torch.version, "hip", None):
        build = f"ROCm {torch.version.hip}"
    else:
        build = "CPU-only or non-CUDA build"
    stand_in = "a stand-in: holds no data, computes nothing"
    rows = [
        ("Python", f"{platform.python_version()} ({sys.platform})"),
        ("torch", f"{torch.__version__} ({build})"),
        ("CUDA available", cuda_line),
        ("MPS available", mps_line),
        ("XPU available", xpu_line),
        ("picked device", f"{picked} ({why})"),
        ("second device", f"{second} ({'real' if is_accelerator(second) else stand_in})"),
        ("ipywidgets", _version("ipywidgets")),
        ("matplotlib", _version("matplotlib")),
    ]
    if not is_accelerator(picked):
        rows.append(
            (
                "missing",
                "a GPU. What only a GPU can show is quoted from a GPU run, labelled "
                '"Quoted"; the meta device stands in as a second device',
            )
        )
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}} : {value}" for label, value in rows)
