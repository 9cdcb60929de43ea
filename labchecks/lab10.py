"""Checks for lab 10_sharded_training: open a sharded checkpoint on a laptop.

The checkpoint is real: 2 processes started with torchrun shard the lab's model with FSDP2
and save it with ``torch.distributed.checkpoint`` (:func:`labchecks.processes.run_workers`);
the learner's function then loads it here, in one process, with no process group. The call
has a time limit, and any error is turned into one line naming the mistake.
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
    is_unattempted,
    not_a_function,
    not_attempted,
    state_dict_keys,
)
from labchecks.grading import graded
from labchecks.processes import fresh_model

__all__ = ["FAILED", "NOT_ATTEMPTED", "PASSED", "Feedback", "check_load_sharded", "check_one_file",
           "fresh_model"]


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


def _plain_errors(function: Callable, texts: list[str]) -> Callable:
    """``function``, with DCP's CheckpointException (a BaseException) turned into RuntimeError;
    the whole text of any error it raises is appended to ``texts``."""
    from torch.distributed.checkpoint.api import CheckpointException

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

    return call


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
    said = []
    if missing:
        said.append(f"missing keys {missing[:4]}")
    if unexpected:
        said.append(f"unexpected keys {unexpected[:4]}")
    if "size mismatch" in text:
        said.append("tensors of another shape")
    return Feedback(exercise, FAILED,
                    f"load_state_dict refused the weights: {' and '.join(said) or 'a mismatch'}."
                    " Load into {'model': model.state_dict()} with dcp.load, then "
                    "model.load_state_dict(state['model']).")


@graded
def check_load_sharded(load_sharded: Callable, folder: str = "scratch_lab10") -> Feedback:
    """Exercise 10.1: ``load_sharded(checkpoint_folder, model)`` fills ``model`` in one process.

    The folder is a DCP checkpoint written by 2 processes, each holding half of every
    parameter (FSDP2). Passes when the model's weights equal the saved ones, loaded
    here with no process group (a 2 -> 1 reshard). When ``folder`` holds no such checkpoint
    yet, the check writes it first (one 2-process launch; lab 09's worker script, with no
    function of the learner's). Introduced in lab 10_sharded_training.
    """
    import warnings

    exercise = "Exercise 1"
    problem = not_a_function(exercise, load_sharded)
    if problem is not None:
        return problem
    if is_unattempted(load_sharded):
        return not_attempted(exercise)
    sharded, problem = _sharded_checkpoint(exercise, folder)
    if problem is not None:
        return problem
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

    with warnings.catch_warnings(), mock.patch.object(dcp, "load", recording_load):
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", category=FutureWarning)
        texts: list[str] = []
        _, problem, _ = processes.attempt(exercise, _plain_errors(load_sharded, texts),
                                          str(sharded), model,
                                          limit_s=2 * processes.CALL_LIMIT_S)
    if problem is not None:
        message = problem.message
        full = "\n".join(texts) or message
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
    """Exercise 10.2: ``one_file(checkpoint_folder, path)`` writes the sharded checkpoint's
    model as one ordinary file at ``path``.

    Passes when ``torch.load(path, weights_only=True)`` gives a plain state dict (keys like
    ``0.weight``) with the saved weights, so that ``model.load_state_dict`` takes it as it is.
    The checkpoint is the one exercise 1 loads (written when missing). Introduced in lab
    10_sharded_training.
    """
    import os
    import warnings

    exercise = "Exercise 2"
    problem = not_a_function(exercise, one_file)
    if problem is not None:
        return problem
    if is_unattempted(one_file):
        return not_attempted(exercise)
    sharded, problem = _sharded_checkpoint(exercise, folder)
    if problem is not None:
        return problem
    path = Path(folder) / "plain.pt"
    path.unlink(missing_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        warnings.filterwarnings("ignore", category=FutureWarning)
        texts: list[str] = []
        _, problem, _ = processes.attempt(exercise, _plain_errors(one_file, texts),
                                          str(sharded), str(path),
                                          limit_s=2 * processes.CALL_LIMIT_S)
    if problem is not None:
        full = "\n".join(texts) or problem.message
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
