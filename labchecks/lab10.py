"""Checks for lab 10_sharded_training: what fits, and a sharded checkpoint opened on a laptop.

The checkpoint of exercises 2 and 3 is real: written by 2 processes (FSDP2 and DCP,
:func:`labchecks.processes.run_workers`), then loaded by the learner's function here, in one
process with no process group.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from labchecks import processes
from labchecks.feedback import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    Feedback,
    given,
    not_ready,
    refused_weights,
    state_dict_keys,
    stop_on,
)
from labchecks.grading import graded
from labchecks.processes import fresh_model

__all__ = ["FAILED", "NOT_ATTEMPTED", "PASSED", "Feedback", "check_bytes_per_gpu",
           "check_load_sharded", "check_one_file", "fresh_model"]


#: (parameters, GPUs, sharded) the check asks about: a 7-billion-parameter model on 8 GPUs,
#: with DDP and with FSDP, and small ones (a single GPU, a number of GPUs that divides).
_SIZES = [(7_000_000_000, 8, True), (7_000_000_000, 8, False), (1_000, 1, True),
          (1_000, 4, True), (3_000_000, 2, False), (3_000_000, 6, True)]


def _bytes_mistake(answer: float, parameters: int, gpus: int, sharded: bool) -> str | None:
    """What an answer that is not 16 bytes per parameter (over ``gpus`` when sharded) got
    wrong, or None when it names no known mistake."""
    share = gpus if sharded else 1
    if any(abs(answer - 16 * parameters / share / unit) < 1e-6 * 16 * parameters / share / unit
           for unit in (1e9, 2**30, 1e6, 2**20)):
        return "returned gigabytes or megabytes: return bytes (16 per parameter)"
    for per_parameter, what in ((4, "only the weights: training also keeps each weight's "
                                   "gradient (4 bytes) and Adam's two averages (8 bytes)"),
                                (8, "the weights and their gradients, not Adam's two averages "
                                    "(4 bytes each)"),
                                (12, "one of Adam's averages only: Adam keeps two, exp_avg and "
                                     "exp_avg_sq, 4 bytes each")):
        if answer in (per_parameter * parameters / share, per_parameter * parameters):
            return f"counted {what}"
    if not sharded and gpus > 1 and answer == 16 * parameters / gpus:
        return ("divided by the GPUs for DDP too: DDP keeps a full copy of everything on every "
                "GPU, so only FSDP (sharded=True) divides")
    if sharded and gpus > 1 and answer == 16 * parameters:
        return "did not divide for FSDP: with sharded=True each GPU holds 1/gpus of everything"
    return None


@graded
def check_bytes_per_gpu(bytes_per_gpu: Callable) -> Feedback:
    """Exercise 10.1: ``bytes_per_gpu(parameters, gpus, sharded)``: the bytes each GPU holds
    for weights, gradients and Adam's two averages in float32 (16 per parameter), with DDP
    (all of it) or FSDP (``sharded=True``: 1/gpus of it). Asked about several sizes; an int or
    a float is fine. Introduced in lab 10_sharded_training.
    """
    exercise = "Exercise 1"
    stop_on(not_ready(exercise, bytes_per_gpu))
    for parameters, gpus, sharded in _SIZES:
        answer = given(processes.attempt(exercise, bytes_per_gpu, parameters, gpus, sharded))
        asked = f"bytes_per_gpu({parameters:_}, {gpus}, sharded={sharded})"
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            return Feedback(exercise, FAILED, f"{asked} returned {answer!r}: return a number of "
                                              "bytes.")
        expected = 16 * parameters / (gpus if sharded else 1)
        if abs(answer - expected) <= 1e-9 * expected:
            continue
        mistake = _bytes_mistake(answer, parameters, gpus, sharded)
        if mistake is not None:
            return Feedback(exercise, FAILED, f"{asked} returned {answer:_}: you {mistake}.")
        return Feedback(exercise, FAILED, f"{asked} returned {answer:_}, not {expected:_.0f}: "
                                          "16 bytes per parameter, divided by the GPUs only "
                                          "when sharded.")
    return Feedback(exercise, PASSED, "16 bytes per parameter: all of it on every GPU with DDP, "
                                      "1/N of it with FSDP on N GPUs.")


def _sharded_checkpoint(exercise: str, folder: str) -> tuple[Path, Feedback | None]:
    """The sharded checkpoint in ``folder`` (written first when missing: one 2-process
    launch), and what went wrong writing it, or None."""
    from utils.distributed import WorkerFailed, child_stderr

    sharded = Path(folder) / "sharded"
    if (sharded / ".metadata").exists():
        return sharded, None
    try:
        with contextlib.redirect_stdout(io.StringIO()), child_stderr():
            processes.run_workers(Path(folder), [], shard=True)
    except (TimeoutError, WorkerFailed) as error:
        said = processes.plain_failure(str(error)) or "the 2 processes did not finish"
        return sharded, Feedback(exercise, FAILED, f"the check could not write the sharded "
                                                   f"checkpoint ({said}); run this cell again.")
    return sharded, None


def _in_one_process(exercise: str, function: Callable, *args) -> tuple[Feedback | None, str]:
    """Run the learner's ``function(*args)`` here, without DCP's warnings about a missing
    process group, with twice the usual time limit; return what went wrong (DCP's
    CheckpointException, a BaseException, as a RuntimeError of its last line) and the whole
    text of the error it raised ('' when none)."""
    import warnings

    from torch.distributed.checkpoint.api import CheckpointException

    texts: list[str] = []

    def call(*args):
        try:
            return function(*args)
        except CheckpointException as error:
            texts.append(str(error))
            last = [line for line in str(error).splitlines() if line.strip()]
            raise RuntimeError(last[-1] if last else str(error)) from None
        except Exception as error:
            texts.append(str(error))
            raise

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", category=FutureWarning)
        _, problem, _ = processes.attempt(exercise, call, *args, limit_s=2 * processes.CALL_LIMIT_S)
    return problem, "\n".join(texts) or (problem.message if problem else "")


def _load_state_dict_problem(exercise: str, text: str) -> Feedback | None:
    """A one-line message naming the keys of a failed ``load_state_dict``, or None."""
    if "Error(s) in loading state_dict" not in text:
        return None
    missing, unexpected = state_dict_keys(text, "Missing"), state_dict_keys(text, "Unexpected")
    if unexpected and all(k == "model" or k.startswith("model.") for k in unexpected):
        return Feedback(exercise, FAILED,
                        f"load_state_dict was given keys {unexpected[:3]} where the model has "
                        f"{missing[:3]}: that is the whole checkpoint, {{'model': ...}}. Pass "
                        "its 'model' entry: model.load_state_dict(state['model']).")
    return Feedback(exercise, FAILED,
                    f"{refused_weights(text)} Load into {{'model': model.state_dict()}} with "
                    "dcp.load, then model.load_state_dict(state['model']).")


@graded
def check_load_sharded(load_sharded: Callable, folder: str = "scratch_lab10") -> Feedback:
    """Exercise 10.2: ``load_sharded(checkpoint_folder, model)`` fills ``model`` in one process.

    The folder is a DCP checkpoint written by 2 processes, each holding half of every
    parameter (FSDP2). Passes when the model's weights equal the saved ones, loaded
    here with no process group (a 2 -> 1 reshard). When ``folder`` holds no such checkpoint
    yet, the check writes it first (one 2-process launch; lab 09's worker script, with no
    function of the learner's). Introduced in lab 10_sharded_training.
    """
    exercise = "Exercise 2"
    stop_on(not_ready(exercise, load_sharded))
    sharded = given(_sharded_checkpoint(exercise, folder))
    expected = fresh_model().state_dict()
    torch.manual_seed(123)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))  # other weights
    before = {k: t.clone() for k, t in model.state_dict().items()}
    import torch.distributed.checkpoint as dcp

    loads: list[bool] = []
    real_load = dcp.load

    def recording_load(*args, **kwargs):
        loads.append(True)
        return real_load(*args, **kwargs)

    with mock.patch.object(dcp, "load", recording_load):
        problem, full = _in_one_process(exercise, load_sharded, str(sharded), model)
    if problem is not None:
        message = problem.message
        if "IsADirectoryError" in message or "is a directory" in message.lower():
            return Feedback(exercise, FAILED,
                            "torch.load opens one file; a DCP checkpoint is a folder (one file "
                            "per rank plus .metadata). Load it with dcp.load(state, "
                            "checkpoint_id=folder).")
        refused = _load_state_dict_problem(exercise, full)
        if refused is not None:
            return refused
        if "init_process_group" in full or "environment variable" in full:
            return Feedback(exercise, FAILED,
                            "your function tried to start a process group. None is needed: "
                            "dcp.load reads a checkpoint in one process, without one.")
        if "failed reading zip archive" in full or ".distcp" in full:
            return Feedback(exercise, FAILED,
                            "a .distcp file holds one rank's pieces in DCP's own format, not a "
                            "torch.save file. Load the whole folder with dcp.load(state, "
                            "checkpoint_id=folder).")
        if "metadata" in full and "No such file or directory" in full:
            return Feedback(exercise, FAILED,
                            "dcp.load found no checkpoint where you pointed it (no .metadata "
                            "file there): pass the folder you were given, "
                            "checkpoint_id=folder.")
        missing = re.search(r"Missing key in checkpoint state_dict: ([\w.]+?)\.?$", full, re.M)
        if missing or "Missing key" in full or "model." in full:
            key = f" (it looked for {missing.group(1)!r})" if missing else ""
            return Feedback(exercise, FAILED,
                            f"dcp.load did not find the keys you asked for{key}: the processes "
                            "saved {'model': state_dict}, so the checkpoint's keys start with "
                            "'model.'. Pass {'model': model.state_dict()} to dcp.load.")
        return problem
    if all(torch.equal(t, expected[k]) for k, t in model.state_dict().items()):
        return Feedback(exercise, PASSED, "two processes' shards, loaded into one model with no "
                                          "process group: a 2 -> 1 reshard.")
    if not loads and all(torch.equal(t, before[k]) for k, t in model.state_dict().items()):
        return Feedback(exercise, FAILED, "your function left the model as it was: it never "
                                          "called dcp.load. Load the folder into "
                                          "{'model': model.state_dict()} with dcp.load.")
    return Feedback(exercise, FAILED,
                    "the model's weights are not the saved ones. dcp.load fills the tensors of "
                    "the state dict you pass, in place: pass {'model': model.state_dict()}, "
                    "and if you built new tensors, copy them in with model.load_state_dict().")


@graded
def check_one_file(one_file: Callable, folder: str = "scratch_lab10") -> Feedback:
    """Exercise 10.3: ``one_file(checkpoint_folder, path)`` writes the sharded checkpoint's
    model as one ordinary file at ``path``.

    Passes when ``torch.load(path, weights_only=True)`` gives a plain state dict (keys like
    ``0.weight``) with the saved weights, so that ``model.load_state_dict`` takes it as it is.
    The checkpoint is the one exercise 2 loads (written when missing). Introduced in lab
    10_sharded_training.
    """
    import os

    exercise = "Exercise 3"
    stop_on(not_ready(exercise, one_file))
    sharded = given(_sharded_checkpoint(exercise, folder))
    path = Path(folder) / "plain.pt"
    path.unlink(missing_ok=True)
    problem, full = _in_one_process(exercise, one_file, str(sharded), str(path))
    if problem is not None:
        if "IsADirectoryError" in full or "is a directory" in full.lower():
            return Feedback(exercise, FAILED,
                            "torch.load opens one file; a DCP checkpoint is a folder. Turn it "
                            "into one file with dcp_to_torch_save(folder, ...) first.")
        return problem
    if not path.is_file():
        written = sorted(f for f in os.listdir(folder) if f.endswith((".pt", ".pth")))
        also = f" (the folder holds {', '.join(written)})" if written else ""
        return Feedback(exercise, FAILED, f"no file at `path` when your function returned"
                                          f"{also}: write the one file at the path you were "
                                          "given.")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        text = str(error)
        if "failed reading zip archive" in text or "invalid load key" in text:
            return Feedback(exercise, FAILED,
                            "the file at `path` is not a torch.save file: a .distcp file holds "
                            "one rank's pieces in DCP's own format. Use dcp_to_torch_save.")
        return Feedback(exercise, FAILED, "torch.load(path, weights_only=True) refused the file: "
                                          "save a dict of tensors (a state dict), not a model "
                                          "or other objects.")
    expected = fresh_model().state_dict()
    if isinstance(saved, dict) and set(saved) == {"model"}:
        return Feedback(exercise, FAILED,
                        "the file holds {'model': ...}, the checkpoint as it was saved (what "
                        "dcp_to_torch_save writes). model.load_state_dict needs its 'model' "
                        "entry: torch.save(full['model'], path).")
    if not isinstance(saved, dict) or set(saved) != set(expected):
        keys = sorted(saved)[:4] if isinstance(saved, dict) else type(saved).__name__
        return Feedback(exercise, FAILED, f"the file holds {keys}, not a plain state dict with "
                                          f"the model's keys {sorted(expected)[:4]}.")
    if not all(isinstance(v, torch.Tensor) and torch.equal(v, expected[k])
               for k, v in saved.items()):
        return Feedback(exercise, FAILED, "the file has the model's keys but not the saved "
                                          "weights: fill the tensors from the checkpoint "
                                          "(dcp.load or dcp_to_torch_save) before you save.")
    return Feedback(exercise, PASSED, "one ordinary file: torch.load and load_state_dict open "
                                      "it, with no DCP.")
