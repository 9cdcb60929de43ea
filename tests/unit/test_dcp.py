"""utils.dcp: inspect a DCP folder from its metadata alone, safely; save to a new folder, switch.

The multi-rank cases (which rank wrote which rows, resharding 2 -> 3) run for real in
notebook 10, whose asserts nbval checks; here everything runs in this one process.
"""

from __future__ import annotations

import os
import pickle
import warnings
from unittest import mock

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException

import utils
from utils import dcp as dcp_tools
from utils import figures

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture
def checkpoint(tmp_path):
    """A one-process DCP checkpoint: two tensors and a non-tensor item."""
    folder = tmp_path / "ckpt"
    state = {"model": {"weight": torch.arange(12.0).reshape(3, 4),
                       "steps": torch.tensor(7, dtype=torch.int64)}, "epoch": 3}
    dcp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


def test_inspect_dcp_lists_keys_shapes_dtypes_and_the_rank_that_wrote_each(checkpoint):
    info = dcp_tools.inspect_dcp(checkpoint)
    rows = {key: (shape, dtype, by) for key, shape, dtype, by in info.rows()}
    assert rows["model.weight"] == ("(3, 4)", "float32", "rank 0")
    assert rows["model.steps"] == ("()", "int64", "rank 0")
    assert rows["epoch"] == ("-", "(not a tensor)", "rank 0")
    assert info.ranks == [0] and info.tensor_bytes == 12 * 4 + 8
    assert "DCP folder written by 1 rank(s); 2 tensor(s)" in info.summary()


def test_inspect_dcp_reads_no_tensor_data(checkpoint):
    for data_file in checkpoint.glob("*.distcp"):
        data_file.write_bytes(b"")  # the data is gone; the metadata alone must suffice
    info = dcp_tools.inspect_dcp(checkpoint)
    assert info.entries[0].shape == (3, 4)


def test_inspect_checkpoint_hands_a_dcp_folder_to_inspect_dcp(checkpoint):
    info = utils.inspect_checkpoint(checkpoint)
    assert isinstance(info, dcp_tools.DcpInfo) and info.format == "dcp"


def test_a_folder_without_metadata_is_reported_as_an_interrupted_save(checkpoint):
    (checkpoint / ".metadata").unlink()
    with pytest.raises(FileNotFoundError, match="interrupted save"):
        utils.inspect_checkpoint(checkpoint)


def test_an_empty_metadata_file_is_a_clear_checkpoint_error(checkpoint):
    (checkpoint / ".metadata").write_bytes(b"")
    with pytest.raises(utils.CheckpointError, match="empty"):
        dcp_tools.inspect_dcp(checkpoint)


class _Payload:
    """Unpickling this calls os.system: what a hostile .metadata could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_metadata_file_that_asks_for_code_is_refused_without_running_it(tmp_path):
    folder = tmp_path / "hostile"
    folder.mkdir()
    marker = tmp_path / "ran"
    (folder / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(utils.UnsafeCheckpointError, match="posix.system|os.system"):
        dcp_tools.inspect_dcp(folder)
    assert not marker.exists()


def test_a_damaged_metadata_file_is_a_clear_checkpoint_error(checkpoint):
    data = (checkpoint / ".metadata").read_bytes()
    (checkpoint / ".metadata").write_bytes(data[: len(data) // 2])
    with pytest.raises(utils.CheckpointError, match="damaged or truncated"):
        dcp_tools.inspect_dcp(checkpoint)


def test_save_and_switch_points_latest_at_the_new_folder(tmp_path):
    assert dcp_tools.latest(tmp_path) is None
    folder = dcp_tools.save_and_switch({"w": torch.ones(2)}, tmp_path, step=5, no_dist=True)
    assert folder.name == "step_000005" and dcp_tools.latest(tmp_path) == folder
    loaded = {"w": torch.zeros(2)}
    dcp.load(loaded, checkpoint_id=dcp_tools.latest(tmp_path), no_dist=True)
    assert torch.equal(loaded["w"], torch.ones(2))


def test_a_save_that_dies_leaves_latest_on_the_previous_folder(tmp_path):
    dcp_tools.save_and_switch({"w": torch.zeros(2)}, tmp_path, step=1, no_dist=True)
    with mock.patch.object(FileSystemWriter, "finish", side_effect=OSError("killed")):
        with pytest.raises(CheckpointException):
            dcp_tools.save_and_switch({"w": torch.ones(2)}, tmp_path, step=2, no_dist=True)
    assert (tmp_path / "step_000002").exists()
    assert dcp_tools.latest(tmp_path).name == "step_000001"


def test_overwriting_in_place_then_dying_leaves_a_folder_that_loads_the_wrong_data(tmp_path):
    """Why save_and_switch exists: the same folder, a save that dies, a silent mix-up."""
    dcp.save({"w": torch.zeros(2)}, checkpoint_id=tmp_path, no_dist=True)
    with mock.patch.object(FileSystemWriter, "finish", side_effect=OSError("killed")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(CheckpointException):
                dcp.save({"w": torch.ones(2)}, checkpoint_id=tmp_path, no_dist=True)
    loaded = {"w": torch.full((2,), -1.0)}
    dcp.load(loaded, checkpoint_id=tmp_path, no_dist=True)
    assert torch.equal(loaded["w"], torch.ones(2))  # the unfinished save's data


@pytest.mark.parametrize("content", ["", "../elsewhere", "a/b"])
def test_latest_refuses_a_pointer_that_is_not_a_folder_name(tmp_path, content):
    (tmp_path / "latest").write_text(content)
    with pytest.raises(utils.CheckpointError, match="not a folder name"):
        dcp_tools.latest(tmp_path)


def test_shard_figure_has_a_title_and_labelled_axes(checkpoint):
    import matplotlib.pyplot as plt

    info = dcp_tools.inspect_dcp(checkpoint)
    figure = figures.shard_figure([info, info], ["one", "two"])
    try:
        assert figure._suptitle.get_text()
        assert [axis.get_title() for axis in figure.axes[:2]] == ["one", "two"]
        assert all(axis.get_xlabel() for axis in figure.axes[:2])
    finally:
        plt.close(figure)
