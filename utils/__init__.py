"""Helpers for the device-placement notebooks (``import utils``).

Each function's docstring names the notebook that introduces it.
"""

from utils.checkpoints import (
    CheckpointError,
    CheckpointInfo,
    TensorEntry,
    UnsafeCheckpointError,
    add_prefix,
    cleaned_error,
    inspect_checkpoint,
    save_as_if_on,
    save_atomic,
    strip_prefix,
    strip_wrapper_prefixes,
)
from utils.devices import (
    DEVICE_ENV_VAR,
    DeviceNotAvailableError,
    available_devices,
    describe_device,
    environment_report,
    is_accelerator,
    parse_device,
    pick_device,
    second_device,
)

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "DEVICE_ENV_VAR",
    "DeviceNotAvailableError",
    "TensorEntry",
    "UnsafeCheckpointError",
    "add_prefix",
    "available_devices",
    "cleaned_error",
    "describe_device",
    "environment_report",
    "inspect_checkpoint",
    "is_accelerator",
    "parse_device",
    "pick_device",
    "save_as_if_on",
    "save_atomic",
    "second_device",
    "strip_prefix",
    "strip_wrapper_prefixes",
]
