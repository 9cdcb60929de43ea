"""labchecks, lab 10: right answers pass however written, each known wrong answer gets its
own diagnosis, and an untouched stub is "not attempted" without starting any process.

The sharded checkpoint the answers load is written once, by one real 2-process launch.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch.distributed.checkpoint.state_dict import get_model_state_dict

from labchecks import lab10 as checks
from labchecks import processes


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One real launch writes the checkpoint every answer loads: exercise 2's check, given a
    right answer and an empty folder, starts it itself. Yields the folder and that verdict."""
    folder = tmp_path_factory.mktemp("lab10")
    return folder, checks.check_load_sharded(load_in_place, folder=str(folder))


# --- exercise 1: load_sharded -------------------------------------------------------------------


def load_in_place(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict(state["model"])


def load_via_conversion(folder, model):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = os.path.join(folder, "..", "converted.pt")
    dcp_to_torch_save(folder, target)
    model.load_state_dict(torch.load(target, weights_only=True)["model"])


def load_into_live_tensors(folder, model):
    dcp.load({"model": model.state_dict()}, checkpoint_id=folder)  # the model's own tensors


def load_with_reader(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, storage_reader=dcp.FileSystemReader(folder))
    model.load_state_dict(state["model"])


def load_with_state_dict_helpers(folder, model):
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state["model"])


def load_via_temporary_file(folder, model):
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as scratch:
        target = os.path.join(scratch, "full.pt")
        dcp_to_torch_save(folder, target)
        state = torch.load(target, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])


def load_with_no_dist(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=folder, no_dist=True)
    model.load_state_dict(state["model"])


def load_with_a_path_object(folder, model):
    from pathlib import Path

    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=Path(folder))
    model.load_state_dict(state["model"])


def load_into_empty_tensors(folder, model):
    state = {"model": {key: torch.empty_like(value) for key, value in model.state_dict().items()}}
    dcp.load(state, checkpoint_id=folder)
    with torch.no_grad():
        for key, value in model.state_dict().items():
            value.copy_(state["model"][key])


def load_with_assign(folder, model):
    state = {"model": {key: value.clone() for key, value in model.state_dict().items()}}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict(state["model"], assign=True)


def load_forgets_to_copy(folder, model):
    state = {"model": {k: v.clone() for k, v in model.state_dict().items()}}
    dcp.load(state, checkpoint_id=folder)


def load_whole_checkpoint_into_model(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict({f"model.{k}": v for k, v in state["model"].items()})


def load_under_another_name(folder, model):
    state = {"weights": model.state_dict()}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict(state["weights"])


def load_one_shard_file(folder, model):
    shard = sorted(name for name in os.listdir(folder) if name.endswith(".distcp"))[0]
    model.load_state_dict(torch.load(os.path.join(folder, shard), weights_only=True))


def load_starts_a_process_group(folder, model):
    dist.init_process_group("gloo")
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=folder)


def load_keys_missing(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=folder)
    model.load_state_dict({k: v for k, v in state["model"].items() if k.endswith("weight")})


def load_wrong_folder(folder, model):
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=os.path.join(folder, "missing"))


RIGHT_LOADS_SHARDED = [load_in_place, load_via_conversion, load_into_live_tensors,
                       load_with_reader, load_with_state_dict_helpers, load_via_temporary_file,
                       load_with_no_dist, load_with_a_path_object, load_into_empty_tensors,
                       load_with_assign]


@pytest.mark.parametrize("answer", RIGHT_LOADS_SHARDED)
def test_load_sharded_passes_however_written(judged, answer):
    _status(checks.check_load_sharded(answer, folder=str(judged[0])), checks.PASSED)


WRONG_LOADS_SHARDED = {
    "torch-load": (lambda folder, model: model.load_state_dict(torch.load(folder)),
                   "a DCP checkpoint is a folder"),
    "no-model-key": (lambda folder, model: dcp.load(model.state_dict(), checkpoint_id=folder),
                     "(it looked for '0."),
    "no-copy": (load_forgets_to_copy, "dcp.load fills the tensors of the state dict you pass"),
    "prefixed-keys": (load_whole_checkpoint_into_model, "that is the whole checkpoint"),
    "other-name": (load_under_another_name, "(it looked for 'weights."),
    "shard-file": (load_one_shard_file, "a .distcp file holds one rank's pieces"),
    "process-group": (load_starts_a_process_group, "None is needed"),
    "keys-missing": (load_keys_missing, "missing keys ['0.bias', '2.bias']"),
    "wrong-folder": (load_wrong_folder, "no .metadata file there"),
    "does-nothing": (lambda folder, model: None, "it never called dcp.load"),
    "not-a-dict": (lambda folder, model: dcp.load([model.state_dict()], checkpoint_id=folder),
                   "your function raised"),
    "name-error": (lambda folder, model: dcp.load({"model": model.state_dict()},
                                                  checkpoint_id=checkpoint_folder),  # noqa: F821
                   "a typo, or a name from a cell you have not run"),
}


@pytest.mark.parametrize(("answer", "phrase"), WRONG_LOADS_SHARDED.values(),
                         ids=WRONG_LOADS_SHARDED.keys())
def test_load_sharded_names_each_mistake(judged, answer, phrase):
    feedback = assert_one_line(_status(checks.check_load_sharded(answer, folder=str(judged[0])),
                                       checks.FAILED, phrase))
    assert ".cpp" not in feedback.message


def test_load_sharded_alone_writes_its_own_checkpoint(judged):
    # no exercise 3 before it: the check started the 2 processes itself (the fixture's launch)
    _status(judged[1], checks.PASSED)
    assert (judged[0] / "sharded" / ".metadata").exists()


def test_load_sharded_stub_is_not_attempted(tmp_path):
    _status(checks.check_load_sharded(stub, folder=str(tmp_path)), checks.NOT_ATTEMPTED)
    assert not (tmp_path / "sharded").exists()


def test_load_sharded_wrong_answers_get_messages_of_their_own(judged):
    messages = [checks.check_load_sharded(answer, folder=str(judged[0])).message
                for answer, _ in WRONG_LOADS_SHARDED.values()]
    assert len(set(messages)) == len(messages), messages


def test_load_sharded_with_the_checkpoint_there_starts_no_processes(judged):
    with mock.patch.object(processes, "run_workers", side_effect=AssertionError("launched")):
        _status(checks.check_load_sharded(load_in_place, folder=str(judged[0])), checks.PASSED)


# --- exercise 2: one_file ---------------------------------------------------------------------


def one_file_rewritten_in_place(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, path)
    torch.save(torch.load(path, weights_only=True)["model"], path)


def one_file_through_a_temporary_folder(folder, path):
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as scratch:
        whole = os.path.join(scratch, "whole.pt")
        dcp_to_torch_save(folder, whole)
        state = torch.load(whole, map_location="cpu", weights_only=True)["model"]
    torch.save(state, path)


def one_file_with_paths(folder, path):
    from torch.distributed.checkpoint import format_utils

    target = Path(path)
    format_utils.dcp_to_torch_save(Path(folder), target.with_suffix(".whole"))
    whole = torch.load(target.with_suffix(".whole"), weights_only=True)
    torch.save({key: value for key, value in whole["model"].items()}, target)


def one_file_from_the_metadata(folder, path):
    metadata = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
    state = {"model": {key.removeprefix("model."): torch.empty(tuple(entry.size))
                       for key, entry in metadata.items() if key.startswith("model.")}}
    dcp.load(state, checkpoint_id=folder)
    torch.save(state["model"], path)


def one_file_into_a_handle(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, path + ".tmp")
    state = torch.load(path + ".tmp", weights_only=True)["model"]
    os.remove(path + ".tmp")
    with open(path, "wb") as handle:
        torch.save(state, handle)


def one_file_contiguous_copies(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, path)
    model_state = torch.load(path, weights_only=True).pop("model")
    torch.save({k: v.clone().contiguous() for k, v in model_state.items()}, path)


RIGHT_ONE_FILES = [one_file_rewritten_in_place, one_file_through_a_temporary_folder,
                   one_file_with_paths, one_file_from_the_metadata, one_file_into_a_handle,
                   one_file_contiguous_copies]


@pytest.mark.parametrize("answer", RIGHT_ONE_FILES)
def test_one_file_passes_however_written(judged, answer):
    _status(checks.check_one_file(answer, folder=str(judged[0])), checks.PASSED)


def one_file_nested(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, path)  # {"model": ...}, as saved


def one_file_torch_load_of_the_folder(folder, path):
    torch.save(torch.load(folder, weights_only=True), path)


def one_file_copies_a_shard(folder, path):
    import shutil

    shutil.copyfile(os.path.join(folder, "__0_0.distcp"), path)


def one_file_flattened_keys(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, path)
    whole = torch.load(path, weights_only=True)
    torch.save({f"model.{k}": v for k, v in whole["model"].items()}, path)


def one_file_never_filled(folder, path):
    metadata = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata
    torch.save({key.removeprefix("model."): torch.zeros(tuple(entry.size))
                for key, entry in metadata.items() if key.startswith("model.")}, path)


def one_file_elsewhere(folder, path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, os.path.join(os.path.dirname(path), "model.pt"))


WRONG_ONE_FILES = {
    "nested": (one_file_nested, "the file holds {'model': ...}"),
    "torch-load-folder": (one_file_torch_load_of_the_folder, "a DCP checkpoint is a folder"),
    "a-shard": (one_file_copies_a_shard, "a .distcp file holds one rank's pieces"),
    "flattened": (one_file_flattened_keys, "not a plain state dict with the model's keys"),
    "never-filled": (one_file_never_filled, "not the saved weights"),
    "elsewhere": (one_file_elsewhere, "no file at `path`"),
}


@pytest.mark.parametrize(("answer", "phrase"), WRONG_ONE_FILES.values(),
                         ids=WRONG_ONE_FILES.keys())
def test_one_file_names_each_mistake(judged, answer, phrase):
    assert_one_line(_status(checks.check_one_file(answer, folder=str(judged[0])),
                            checks.FAILED, phrase))


def test_one_file_stub_is_not_attempted(tmp_path):
    _status(checks.check_one_file(stub, folder=str(tmp_path)), checks.NOT_ATTEMPTED)
    assert not (tmp_path / "sharded").exists()


# --- exercise 1: bytes_per_gpu ----------------------------------------------------------------


def bytes_named_parts(parameters, gpus, sharded):
    weights = gradients = 4 * parameters
    adam = 2 * 4 * parameters
    total = weights + gradients + adam
    if sharded:
        total /= gpus
    return total


def bytes_integer_division(parameters, gpus, sharded):
    return 16 * parameters // (gpus if sharded else 1)


def bytes_with_dtype_sizes(parameters, gpus, sharded):
    size = torch.finfo(torch.float32).bits // 8
    share = gpus if sharded else 1
    return parameters * size * 4 / share


RIGHT_BYTES = {
    "one-line": lambda p, g, s: 16 * p / g if s else 16 * p,
    "named-parts": bytes_named_parts,
    "integer-division": bytes_integer_division,
    "dtype-sizes": bytes_with_dtype_sizes,
    "keywords": lambda parameters, gpus, sharded: (parameters * 16) / (gpus if sharded else 1),
    "element-size": lambda p, g, s: p * torch.empty(0).element_size() * 4 / (g if s else 1),
}


@pytest.mark.parametrize("answer", RIGHT_BYTES.values(), ids=RIGHT_BYTES.keys())
def test_bytes_per_gpu_passes_however_written(answer):
    _status(checks.check_bytes_per_gpu(answer), checks.PASSED)


WRONG_BYTES = {
    "weights-only": (lambda p, g, s: 4 * p / g if s else 4 * p, "only the weights"),
    "no-adam": (lambda p, g, s: 8 * p / g if s else 8 * p, "not Adam's two averages"),
    "one-average": (lambda p, g, s: 12 * p / g if s else 12 * p, "Adam keeps two"),
    "ddp-divided": (lambda p, g, s: 16 * p / g, "divided by the GPUs for DDP too"),
    "fsdp-whole": (lambda p, g, s: 16 * p, "did not divide for FSDP"),
    "gigabytes": (lambda p, g, s: 16 * p / (g if s else 1) / 1e9, "gigabytes or megabytes"),
    "a-string": (lambda p, g, s: f"{16 * p} bytes", "return a number of bytes"),
    "off": (lambda p, g, s: 20 * p / (g if s else 1), "not 14_000_000_000"),
}


@pytest.mark.parametrize(("answer", "phrase"), WRONG_BYTES.values(), ids=WRONG_BYTES.keys())
def test_bytes_per_gpu_names_each_mistake(answer, phrase):
    assert_one_line(_status(checks.check_bytes_per_gpu(answer), checks.FAILED, phrase))


def test_bytes_per_gpu_stub_is_not_attempted():
    _status(checks.check_bytes_per_gpu(stub), checks.NOT_ATTEMPTED)
