"""Helpers for the device-placement notebooks (``import utils``).

The imports below are the API. Each function's docstring names the notebook that introduces it.
"""

from utils.checkpoints import (
    CheckpointInfo,
    TensorEntry,
    add_prefix,
    inspect_checkpoint,
    save_as_if_on,
    save_atomic,
    strip_prefix,
    strip_wrapper_prefixes,
)
from utils.dcp import DcpInfo, inspect_dcp
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
    unusable_device,
    why_no_cuda,
)
from utils.distributed import Worker, WorkerFailed, process_group, torchrun
from utils.errors import CheckpointError, UnsafeCheckpointError
from utils.explain import Explanation, explain, explain_errors
from utils.figures import placement_figure
from utils.footprint import Footprint, footprint
from utils.ops import aten_ops
from utils.placement import Finding, Placement, audit, where
from utils.scenarios import explore_save_load
from utils.text import cleaned_error, format_bytes
from utils.traffic import Copy, Ledger, Wait
from utils.widgets import WIDGETS_ENV_VAR, quiz, view_placement, widget_mode
