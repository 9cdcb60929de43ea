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
from utils.placement import Finding, Placement, audit, placement_figure, where

__all__ = [
    "DEVICE_ENV_VAR",
    "DeviceNotAvailableError",
    "Finding",
    "Placement",
    "audit",
    "available_devices",
    "describe_device",
    "environment_report",
    "is_accelerator",
    "parse_device",
    "pick_device",
    "placement_figure",
    "second_device",
    "where",
]
