"""Helpers for the device-placement notebooks (``import utils``).

Each function's docstring names the notebook that introduces it.
"""

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
    "DEVICE_ENV_VAR",
    "DeviceNotAvailableError",
    "available_devices",
    "describe_device",
    "environment_report",
    "is_accelerator",
    "parse_device",
    "pick_device",
    "second_device",
]
