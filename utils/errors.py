"""The errors the checkpoint helpers raise (utils.checkpoints, utils.dcp); from 05."""

from __future__ import annotations

from typing import Any


class CheckpointError(ValueError):
    """A file that is not a readable torch.save checkpoint (empty, truncated, not one)."""


class UnsafeCheckpointError(CheckpointError):
    """A checkpoint whose pickle asks for code that ``weights_only=True`` refuses to run.

    ``needs``: what it asks for; ``info``: a CheckpointInfo of its tensors, or None.
    """

    def __init__(self, message: str, needs: list[str] | None = None, info: Any = None) -> None:
        super().__init__(message)
        self.needs = needs or []
        self.info = info
