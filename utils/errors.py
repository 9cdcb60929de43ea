"""The errors the checkpoint helpers raise (utils.checkpoints, utils.dcp).

Introduced in 05_save_load_scenarios, where ``inspect_checkpoint`` refuses a file.
"""

from __future__ import annotations

from typing import Any


class CheckpointError(ValueError):
    """A file that is not a readable torch.save checkpoint (empty, truncated, not one)."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose pickle asks for code that ``weights_only=True`` refuses to run.

    ``needs`` lists what it asks for (``module.name``); ``info`` is a CheckpointInfo of its
    tensors and location tags, read from the pickle's opcodes without running anything (None
    when they could not be followed).
    """

    def __init__(self, message: str, needs: list[str] | None = None, info: Any = None) -> None:
        super().__init__(message)
        self.needs = needs or []
        self.info = info
