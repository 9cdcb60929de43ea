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
from utils.ops import aten_ops
from utils.placement import Finding, Placement, audit, placement_figure, where
from utils.widgets import (
    WIDGETS_ENV_VAR,
    explore_save_load,
    quiz,
    view_placement,
    widget_mode,
)

__all__ = [
    "DEVICE_ENV_VAR",
    "DeviceNotAvailableError",
    "Finding",
    "Placement",
    "WIDGETS_ENV_VAR",
    "aten_ops",
    "audit",
    "available_devices",
    "describe_device",
    "environment_report",
    "explore_save_load",
    "is_accelerator",
    "parse_device",
    "pick_device",
    "placement_figure",
    "quiz",
    "second_device",
    "view_placement",
    "where",
    "widget_mode",
]
