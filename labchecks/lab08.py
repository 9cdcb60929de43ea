"""Checks for lab 08_many_devices: fix a multi-process training script, reshard a checkpoint.

Exercises 1 and 2 run in this process: the GPU machine they are about is simulated (a
fake ``torch.cuda`` and ``torch.accelerator`` that record calls, environment variables as
torchrun sets them on the second machine of a cluster). Exercise 3 runs for real: the
learner's function is copied into a worker script that ``torchrun`` starts on 2 CPU
processes (gloo), and the check reads what they wrote; the learner's ``dist.barrier`` is
the check's own there, one that gives up and says which rank never came. Exercise 4 loads,
in this process, a sharded checkpoint that 2 processes wrote (the check starts them).
Every call of the learner's code and every launch has a time limit, and no exercise needs
another to have run.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import os
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    attempt_within,
    is_unattempted,
    not_a_function,
    not_attempted,
    state_dict_keys,
)
from labchecks.grading import graded

#: What torchrun sets on the second machine of a 2 x 4-GPU job, for its second process.
CLUSTER_ENV = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
               "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
#: The names the worker script gives the learner's exercise 3 function (listed in the lab).
WORKER_IMPORTS = """\
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

import utils
"""


def fresh_model() -> nn.Module:
    """The small model every exercise of lab 08 uses, with seed 0's initial weights.

    Introduced in lab 08_many_devices.
    """
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))


# --- a GPU machine, simulated ----------------------------------------------------------------

#: How long a check waits for a learner's function that runs in this process (exercises 1
#: and 2 take milliseconds; exercise 4, which reads a checkpoint, gets twice as long).
CALL_LIMIT_S = 4.0

#: Calls that, made before set_device, act for (or answer about) GPU 0, the current GPU
#: until set_device runs; each with what it then does wrong. From PyTorch's source:
#: torch/cuda/random.py queues manual_seed, seed and set_rng_state (``_lazy_call``) until
#: CUDA initialises, then runs them on ``current_device()``; ``torch.cuda.set_device``
#: initialises CUDA (``device_lazy_init`` in torch/csrc/cuda/Module.cpp) *before* it switches
#: GPU, so the queued call runs while GPU 0 is current. The others read or act on the
#: current device when given none.
_QUEUED = ("it is queued until CUDA initialises, and set_device initialises CUDA before it "
           "switches GPU, so it runs while GPU 0 is current: it seeds cuda:0's generator, "
           "not this process's cuda:1's")
_ANSWERS_FOR_0 = "with no device given it answers for the current GPU, still GPU 0, not cuda:1"
_ACTS_ON_0 = "with no device given it acts on the current GPU, still GPU 0, not cuda:1"
_TOUCHES = {
    "manual_seed": _QUEUED, "seed": _QUEUED, "set_rng_state": _QUEUED,
    "get_rng_state": _ANSWERS_FOR_0, "initial_seed": _ANSWERS_FOR_0,
    "current_device": "it answers 0: GPU 0 is the current GPU until set_device runs",
    "init": "it initialises CUDA while GPU 0 is current, so a seed queued before it lands there",
    "get_device_name": _ANSWERS_FOR_0, "get_device_properties": _ANSWERS_FOR_0,
    "mem_get_info": _ANSWERS_FOR_0, "memory_allocated": _ANSWERS_FOR_0,
    "synchronize": _ACTS_ON_0, "empty_cache": _ACTS_ON_0,
}
#: The same for torch.accelerator (PyTorch 2.6 and later), which a learner may use instead.
_ACCELERATOR_TOUCHES = {
    "current_device_index": _TOUCHES["current_device"],
    "current_device_idx": _TOUCHES["current_device"],
    "synchronize": _ACTS_ON_0, "empty_cache": _ACTS_ON_0,
    "memory_allocated": _ANSWERS_FOR_0, "get_memory_info": _ANSWERS_FOR_0,
}


class _Forbidden(BaseException):
    """Raised into the learner's code by a simulated call that must not go on (a
    BaseException, so that ``except Exception`` in their code does not swallow it)."""


def _attempt_within(exercise: str, function: Callable, *args,
                    limit_s: float | None = None) -> tuple[object, Feedback | None, bool]:
    """:func:`attempt_within` with lab 08's limit (:data:`CALL_LIMIT_S` unless given) and
    :class:`_Forbidden` as the check's stop: return (result, problem, stopped)."""
    return attempt_within(exercise, function, *args,
                          limit_s=CALL_LIMIT_S if limit_s is None else limit_s,
                          stop=(_Forbidden,),
                          hang=". Something in it waits for ever (a loop, a sleep, a process "
                               "group or a barrier): it only needs to compute and return")


def _recorder(calls: list[tuple[str, object]], name: str, result: object = 0) -> Callable:
    def record(*args, **kwargs):
        calls.append((name, args[0] if len(args) == 1 else args))
        return result
    return record


def _refuse_process_group(calls: list[tuple[str, object]]) -> Callable:
    def init_process_group(*args, **kwargs):
        calls.append(("init_process_group", kwargs.get("backend", args[0] if args else None)))
        raise _Forbidden
    return init_process_group


@contextlib.contextmanager
def _fake_gpu_machine(gpus: int = 4) -> Iterator[list[tuple[str, object]]]:
    """torch.cuda and torch.accelerator as on a machine with ``gpus`` GPUs, torchrun's
    variables as on its second machine; yields the calls made, in order.

    ``init_process_group`` is refused (recorded, then the function is stopped): on this
    simulated machine there is no cluster to join, and the exercise's function only chooses.
    """
    import torch.distributed as dist

    calls: list[tuple[str, object]] = []

    def set_device(device) -> None:
        if isinstance(device, str) and _index(device) is None:
            calls.append(("set_device", device))
            raise RuntimeError(f"Invalid device string: {device!r}")  # what PyTorch raises
        calls.append(("set_device", device))

    def current_device() -> int:  # as on a real machine: the index set_device chose
        calls.append(("current_device", ()))
        chosen = [_index(d) for name, d in calls if name == "set_device"]
        return chosen[-1] if chosen and chosen[-1] is not None else 0

    patches = [mock.patch.object(torch.cuda, "is_available", lambda: True),
               mock.patch.object(torch.cuda, "device_count", lambda: gpus),
               mock.patch.object(torch.cuda, "set_device", set_device),
               mock.patch.object(torch.cuda, "current_device", current_device),
               mock.patch.object(dist, "init_process_group", _refuse_process_group(calls))]
    for name in _TOUCHES:
        if name != "current_device" and hasattr(torch.cuda, name):
            patches.append(mock.patch.object(torch.cuda, name, _recorder(calls, name)))
    answers = {"is_available": lambda: True, "device_count": lambda: gpus,
               "current_accelerator": lambda *a, **k: torch.device("cuda"),
               "set_device_index": set_device, "set_device_idx": set_device,
               "current_device_index": current_device, "current_device_idx": current_device}
    answers.update({name: _recorder(calls, f"accelerator.{name}")
                    for name in _ACCELERATOR_TOUCHES if name not in answers})
    with _simulated(patches, answers):
        yield calls


@contextlib.contextmanager
def _simulated(patches: list, accelerator_answers: dict) -> Iterator[None]:
    """Apply ``patches``, and ``accelerator_answers`` to torch.accelerator (PyTorch 2.6 and
    later), with torchrun's variables set and LESSONS_DEVICE unset; undo it all after."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        patches = patches + [mock.patch.object(accelerator, name, value)
                             for name, value in accelerator_answers.items()
                             if hasattr(accelerator, name)]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(mock.patch.dict(os.environ, CLUSTER_ENV))
        os.environ.pop("LESSONS_DEVICE", None)  # restored with the rest of the environment
        yield


@contextlib.contextmanager
def _machine_without_gpu() -> Iterator[list[tuple[str, object]]]:
    """torch.cuda and torch.accelerator as on a machine with no GPU, torchrun's variables
    set; ``set_device`` fails as it does there. Yields the calls made."""
    import torch.distributed as dist

    calls: list[tuple[str, object]] = []

    def set_device(device) -> None:
        calls.append(("set_device", device))
        raise _Forbidden

    patches = [mock.patch.object(torch.cuda, "is_available", lambda: False),
               mock.patch.object(torch.cuda, "device_count", lambda: 0),
               mock.patch.object(torch.cuda, "set_device", set_device),
               mock.patch.object(dist, "init_process_group", _refuse_process_group(calls))]
    answers = {"is_available": lambda: False, "device_count": lambda: 0,
               "current_accelerator": lambda *a, **k: None,
               "set_device_index": set_device, "set_device_idx": set_device}
    with _simulated(patches, answers):
        yield calls


def _index(value: object) -> int | None:
    """The device index a set_device argument names (an int, 'cuda:1', a torch.device)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    with contextlib.suppress(RuntimeError, TypeError, ValueError):
        return torch.device(value).index
    return None


def _as_device(value: object) -> torch.device | None:
    """``value`` as a torch.device when it is one or a device string; None otherwise."""
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return torch.device(value)
    return None


def _not_a_device(exercise: str, value: object, what: str) -> Feedback:
    """The message for a value that should have been a device and is not."""
    if isinstance(value, str) and _as_device(value.lower()) is not None:
        return Feedback(exercise, FAILED, f"{what} {value!r}, which PyTorch does not know: "
                                          f"device names are lower case, {value.lower()!r}.")
    if isinstance(value, int) and not isinstance(value, bool):
        return Feedback(exercise, FAILED, f"{what} the number {value!r}; return a torch.device, "
                                          f"such as torch.device('cuda', {value}).")
    return Feedback(exercise, FAILED, f"{what} {value!r}, which is not a device: return a "
                                      "torch.device, such as torch.device('cpu').")


def _setup_problem(exercise: str, calls: list[tuple[str, object]],
                   problem: Feedback | None, where: str) -> Feedback | None:
    """What stopped setup_device on the simulated machine ``where``, or None."""
    if any(name == "init_process_group" for name, _ in calls):
        backend = next(b for name, b in calls if name == "init_process_group")
        return Feedback(exercise, FAILED,
                        f"your function called init_process_group({backend!r}). setup_device "
                        "should only choose: it returns (backend, device), and the script "
                        "passes that backend to dist.init_process_group itself, once.")
    if problem is None:
        return None
    if "not compiled with CUDA" in problem.message:
        return Feedback(exercise, FAILED,
                        "your function created a tensor on the GPU. It only needs to pick "
                        "the device and call set_device; make tensors after it returns.")
    if "has not been initialized" in problem.message or "Default process group" in problem.message:
        return Feedback(exercise, FAILED,
                        "your function asked the process group (dist.get_rank() or similar), "
                        "which does not exist yet: setup_device runs before "
                        "init_process_group. Read int(os.environ['LOCAL_RANK']) instead.")
    if "Invalid device string" in problem.message:
        bad = next((d for name, d in calls if name == "set_device"), None)
        return Feedback(exercise, FAILED,
                        f"{where} torch.cuda.set_device({bad!r}) fails: {bad!r} is a string "
                        "from os.environ, not a device. Convert it: "
                        "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])).")
    return problem


@graded
def check_setup_device(setup_device: Callable) -> Feedback:
    """Exercise 08.1: ``setup_device()`` returns ``(backend, device)`` for this process.

    Run twice: on a simulated GPU machine where torchrun set ``RANK=5, LOCAL_RANK=1`` (the
    second process on the second machine of a 2 x 4-GPU job): there it must call
    ``torch.cuda.set_device(1)`` (or ``torch.accelerator.set_device_index(1)``) before any
    other CUDA call and return ``("nccl", cuda:1)``; then on a simulated machine without a
    GPU, where it must return ``("gloo", cpu)`` without calling set_device. Each run has a
    time limit; ``init_process_group`` is refused (the function only chooses).
    Introduced in lab 08_many_devices.
    """
    exercise = "Exercise 1"
    problem = not_a_function(exercise, setup_device)
    if problem is not None:
        return problem
    if is_unattempted(setup_device):
        return not_attempted(exercise)
    with _fake_gpu_machine() as calls:
        result, problem, _ = _attempt_within(exercise, setup_device)
    on_gpus = "on a machine with 4 GPUs"
    problem = _setup_problem(exercise, calls, problem, "on a GPU machine")
    if problem is not None:
        return problem
    if not (isinstance(result, tuple) and len(result) == 2):
        return Feedback(exercise, FAILED, f"setup_device() returned {result!r}; return a pair "
                                          "(backend, device), such as ('nccl', device).")
    backend, raw_device = result
    device = _as_device(raw_device)
    if device is None:
        return _not_a_device(exercise, raw_device, f"{on_gpus} setup_device() returned")
    set_calls = [i for i, (name, _) in enumerate(calls) if name == "set_device"]
    local_rank = int(CLUSTER_ENV["LOCAL_RANK"])
    if device.type != "cuda":
        return Feedback(exercise, FAILED,
                        f"{on_gpus} your function chose {device}. Use 'cuda:LOCAL_RANK' when "
                        "torch.cuda.is_available().")
    if device.index == int(CLUSTER_ENV["RANK"]):
        return Feedback(exercise, FAILED,
                        "with RANK=5 and LOCAL_RANK=1 you chose cuda:5, which does not exist on "
                        "a 4-GPU machine. RANK counts processes across all machines; the GPU "
                        "index on this machine is LOCAL_RANK.")
    if device.index not in (None, local_rank):
        return Feedback(exercise, FAILED, f"the process with LOCAL_RANK=1 chose {device}. "
                                          "Its GPU is cuda:LOCAL_RANK, read from the environment.")
    if not set_calls:
        return Feedback(exercise, FAILED,
                        "torch.cuda.set_device(local_rank) was not called. Without it this "
                        "process's current GPU stays GPU 0: 'cuda' tensors, and every CUDA call "
                        "that names no device, go there, in every process. Call it first.")
    chosen = calls[set_calls[0]][1]
    if _index(chosen) != local_rank:
        return Feedback(exercise, FAILED,
                        f"you called set_device({chosen!r}), but this process's GPU is "
                        "cuda:1 (LOCAL_RANK): pass the same local rank as the device you return.")
    if set_calls[0] > 0:
        first = calls[0][0]
        table = _ACCELERATOR_TOUCHES if first.startswith("accelerator.") else _TOUCHES
        why = table.get(first.removeprefix("accelerator."), _ANSWERS_FOR_0)
        module = "torch" if first.startswith("accelerator.") else "torch.cuda"
        return Feedback(exercise, FAILED,
                        f"{module}.{first}() ran before set_device, and {why}. Call "
                        "set_device(local_rank) first, before anything else touches CUDA.")
    if device.index is None:
        return Feedback(exercise, FAILED,
                        "you returned the bare device 'cuda'. Name the GPU: "
                        "torch.device('cuda', local_rank), so that DDP's device_ids and "
                        "map_location can use it.")
    if backend != "nccl":
        return Feedback(exercise, FAILED, f"{on_gpus} you chose the backend {backend!r}; the "
                                          "GPU backend is 'nccl' (gloo is for CPU tensors).")
    with _machine_without_gpu() as calls:
        result, problem, stopped = _attempt_within(exercise, setup_device)
    if stopped and any(name == "set_device" for name, _ in calls):
        return Feedback(exercise, FAILED,
                        "on a machine without a GPU your function called set_device, which "
                        "fails there (there is no GPU to select): test "
                        "torch.cuda.is_available() first, and call set_device only when it is "
                        "true.")
    problem = _setup_problem(exercise, calls, problem, "without a GPU")
    if problem is not None:
        return problem
    no_gpu = "on a machine without a GPU setup_device() returned"
    if not (isinstance(result, tuple) and len(result) == 2):
        return Feedback(exercise, FAILED, f"{no_gpu} {result!r}; it should be ('gloo', cpu).")
    device = _as_device(result[1])
    if device is None:
        return _not_a_device(exercise, result[1], no_gpu)
    if result[0] != "gloo" or device.type != "cpu":
        return Feedback(exercise, FAILED, f"{no_gpu} {result!r}; it should be ('gloo', cpu): "
                                          "nccl needs GPUs, gloo works on the CPU.")
    return Feedback(exercise, PASSED, "set_device(LOCAL_RANK) first, then nccl and "
                                      "cuda:LOCAL_RANK; gloo and the CPU without a GPU.")


# --- exercise 2: a rank-aware load -------------------------------------------------------------

def _resolve(map_location: object, saved: str = "cuda:0") -> str:
    """Where ``map_location`` sends a storage saved on ``saved``: a device string,
    'callable', or 'invalid: <value>' for a value that is not a device."""
    if map_location is None:
        return saved
    if isinstance(map_location, dict):
        target = map_location.get(saved, saved)
        device = _as_device(target) if not isinstance(target, torch.device) else target
        return str(device) if device is not None else f"invalid: {target!r}"
    if callable(map_location):
        return "callable"
    device = _as_device(map_location)
    return str(device) if device is not None else f"invalid: {map_location!r}"


@graded
def check_rank_aware_load(load_for_this_rank: Callable, folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.2: ``load_for_this_rank(path, device)`` loads onto this process's device.

    The file is tagged ``cuda:0``, as a GPU run saves it. On the simulated GPU machine
    (``LOCAL_RANK=1``, ``device=cuda:1``) the check only records the ``map_location`` given
    to ``torch.load`` (then stops the function: there is no GPU here to move tensors to); it
    must send the file to ``cuda:1`` or the CPU, never GPU 0. On this machine
    (``device=cpu``) the function must really load it, safely. Introduced in lab
    08_many_devices.
    """
    from utils.checkpoints import save_as_if_on

    exercise = "Exercise 2"
    problem = not_a_function(exercise, load_for_this_rank)
    if problem is not None:
        return problem
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "start.pt")
    expected = fresh_model().state_dict()
    save_as_if_on({"model": expected, "epoch": 3}, path, "cuda:0")
    seen: list[dict] = []

    def recording_load(f, *args, **kwargs):
        seen.append({"map_location": kwargs.get("map_location", args[0] if args else None),
                     "weights_only": kwargs.get("weights_only", True)})
        raise _Forbidden  # seen what it needs: the rest would move tensors to a GPU

    with _fake_gpu_machine(), mock.patch.object(torch, "load", recording_load), \
            mock.patch.object(torch.serialization, "load", recording_load):
        _, problem, _ = _attempt_within(exercise, load_for_this_rank, path,
                                        torch.device("cuda", 1))
    if problem is not None and not seen:
        if "UnpicklingError" in problem.message:
            return Feedback(exercise, FAILED, "your function did not call torch.load, and "
                                              "pickle.load cannot read the file "
                                              f"({problem.message.split('`')[1]}): a checkpoint "
                                              "holds tensors in torch.save's format. Use "
                                              "torch.load(path, map_location=device).")
        return problem
    if not seen:
        return Feedback(exercise, FAILED, "your function did not call torch.load.")
    call = seen[0]
    if call["weights_only"] is False:
        return Feedback(exercise, FAILED, "weights_only=False runs any code in the file. A "
                                          "checkpoint of tensors loads with the default, "
                                          "weights_only=True.")
    target = _resolve(call["map_location"])
    if target.startswith("invalid: "):
        value = target.removeprefix("invalid: ")
        lower = value.lower()
        hint = (f" Device names are lower case: {lower}." if _as_device(lower.strip("'\""))
                else " Use map_location=device, the device passed in.")
        return Feedback(exercise, FAILED, f"map_location={call['map_location']!r} sends the "
                                          f"tensors to {value}, which is not a device.{hint}")
    if target == "cuda:0":
        which = "no map_location" if call["map_location"] is None else \
            f"map_location={call['map_location']!r}"
        return Feedback(exercise, FAILED,
                        f"with {which}, the process whose GPU is cuda:1 loads the file onto "
                        "cuda:0, and so does every other process: GPU 0 gets one copy per "
                        "process and runs out of memory. Use map_location=device (this "
                        "process's own GPU) or 'cpu'.")
    if target == f"cuda:{CLUSTER_ENV['RANK']}":
        return Feedback(exercise, FAILED, "you mapped to cuda:RANK (cuda:5), which does not "
                                          "exist on a 4-GPU machine: use the device passed in "
                                          "(cuda:LOCAL_RANK).")
    if target == "cuda":
        return Feedback(exercise, FAILED, "map_location='cuda' means the current GPU, which is "
                                          "this process's own only if set_device ran before; "
                                          "pass the device you were given: "
                                          "map_location=device.")
    if target not in ("cuda:1", "cpu", "callable"):
        return Feedback(exercise, FAILED, f"the file would load onto {target}; this process's "
                                          "device is cuda:1.")
    with mock.patch.dict(os.environ, CLUSTER_ENV):  # launched by torchrun, here too
        loaded, problem, _ = _attempt_within(exercise, load_for_this_rank, path,
                                             torch.device("cpu"))
    if problem is not None:
        return problem
    if loaded is None:
        return Feedback(exercise, FAILED, "your function returned None: return what torch.load "
                                          "gave you (`return torch.load(...)`).")
    model = loaded.get("model") if isinstance(loaded, dict) else None
    if not isinstance(model, dict) or set(model) != set(expected):
        return Feedback(exercise, FAILED, "return the whole loaded checkpoint (a dict with "
                                          "'model' and 'epoch').")
    if any(not isinstance(t, torch.Tensor) or t.device.type != "cpu"
           or not torch.equal(t, expected[k]) for k, t in model.items()):
        return Feedback(exercise, FAILED, "on this machine the tensors should arrive on the CPU "
                                          "with the saved values.")
    return Feedback(exercise, PASSED, "every process loads onto its own device or the CPU, "
                                      "never all onto GPU 0.")


# --- exercise 3: run for real under torchrun ------------------------------------------------------

#: How long a barrier in the learner's function waits for the other rank, beyond rank 0's slow
#: save, before the check says who never came (a real barrier would wait until its timeout).
BARRIER_GRACE_S = 2.0
#: The time limit of one launch of the worker script (torchrun and both processes).
LAUNCH_LIMIT_S = 60.0

_HARNESS = """\
{imports}
import json
import pathlib
import sys

from labchecks.lab08 import fresh_model
from utils.distributed import process_group

{sources}

folder = sys.argv[1]
slows = [float(s) for s in sys.argv[2].split(",") if s]
grace_s = float(sys.argv[3])
collective_s = float(sys.argv[5]) if len(sys.argv) > 5 else 12.0
real = {{"barrier": dist.barrier, "monitored_barrier": dist.monitored_barrier,
         "sleep": time.sleep, "exists": os.path.exists, "isfile": os.path.isfile,
         "path_exists": pathlib.Path.exists, "save": torch.save, "dcp_save": dcp.save}}


def first_line(error):
    text = str(error).strip()
    return type(error).__name__ + (": " + text.splitlines()[0][:200] if text else "")


with process_group(timeout_s=grace_s + max(slows, default=0) + collective_s) as me:
    store = dist.distributed_c10d._get_default_store()

    def meet(key, limit_s):  # a barrier through the store, that gives up after limit_s
        store.add(key, 1)
        deadline = time.monotonic() + limit_s
        while store.add(key, 0) < me.world_size:
            if time.monotonic() > deadline:
                return False
            real["sleep"](0.01)
        return True

    for index, function in enumerate([{names}]):
        here = os.path.join(folder, f"candidate_{{index}}")
        path = os.path.join(here, "trained.pt")
        seen = {{"candidate": index, "rank": me.rank, "barriers": 0, "gave_up": False,
                 "slept": 0.0, "polls": 0, "saves": [], "dcp": False, "error": None}}

        def barrier(*args, **kwargs):
            number = seen["barriers"]
            seen["barriers"] += 1
            # rank 0 is the slow one (its save); the other rank may wait for that save too
            limit_s = grace_s if me.rank == 0 else slows[index] + grace_s
            if not meet(f"c{{index}}/barrier{{number}}", limit_s):
                seen["gave_up"] = True
                raise RuntimeError("the barrier timed out: the other rank never reached it")

        def save(obj, f, *args, **kwargs):
            name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
            seen["saves"].append({{"file": os.path.basename(str(name)) if name else None,
                                   "module": isinstance(obj, nn.Module),
                                   "type": type(obj).__name__}})
            if me.rank == 0:
                real["sleep"](slows[index])  # a slow disk: a reader that does not wait sees no file
            return real["save"](obj, f, *args, **kwargs)

        def dcp_save(*args, **kwargs):
            seen["dcp"] = True
            return real["dcp_save"](*args, **kwargs)

        def sleep(seconds):
            seen["slept"] += float(seconds)
            real["sleep"](seconds)

        def polled(real_function):
            def look(target, *args, **kwargs):
                seen["polls"] += 1
                return real_function(target, *args, **kwargs)
            return look

        model = fresh_model().to(me.device)
        ddp = DDP(model, device_ids=[me.local_rank] if me.device.type == "cuda" else None)
        dist.barrier = dist.monitored_barrier = barrier
        torch.save, dcp.save, time.sleep = save, dcp_save, sleep
        os.path.exists, os.path.isfile = polled(real["exists"]), polled(real["isfile"])
        pathlib.Path.exists = polled(real["path_exists"])
        try:
            function(ddp, path)
        except Exception as error:
            seen["error"] = first_line(error)
        finally:
            dist.barrier, dist.monitored_barrier = real["barrier"], real["monitored_barrier"]
            torch.save, dcp.save, time.sleep = real["save"], real["dcp_save"], real["sleep"]
            os.path.exists, os.path.isfile = real["exists"], real["isfile"]
            pathlib.Path.exists = real["path_exists"]
        seen["found"] = os.path.isfile(path)  # the moment the function returned
        try:
            keys = list(torch.load(path, map_location="cpu", weights_only=True)) \\
                if seen["found"] else []
        except Exception as error:
            keys = [f"unreadable: {{type(error).__name__}}"]
        seen["keys"] = [str(k) for k in keys][:20]
        meet(f"c{{index}}/end", 2 * slows[index] + 2 * grace_s + 10)  # both done, then report
        seen["files"] = sorted(os.listdir(here))
        print("RESULT " + json.dumps(seen), flush=True)
    if sys.argv[4] == "shard":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(me.device.type, (me.world_size,))
        sharded = fresh_model().to(me.device)
        for module in (sharded[0], sharded[2], sharded):
            fully_shard(module, mesh=mesh)
        dcp.save({{"model": get_model_state_dict(sharded)}},
                 checkpoint_id=os.path.join(folder, "sharded"))
"""


def _renamed_source(function: Callable, name: str) -> str:
    """The source of ``function``, its ``def`` renamed to ``name`` (comments dropped)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    tree.body[0].name = name
    tree.body[0].decorator_list = []
    return ast.unparse(tree)


def _run_workers(folder: Path, functions: list[Callable], slow_s: float | Sequence[float] = 1.5,
                 timeout_s: float = LAUNCH_LIMIT_S, shard: bool = True,
                 collective_s: float = 12.0) -> dict[int, str]:
    """Run the worker script on 2 processes with each function in turn; return the outputs.

    With ``shard``, the processes then write the sharded checkpoint exercise 4 loads.
    """
    import shutil

    from utils.distributed import torchrun

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    names = [f"_candidate_{index}" for index in range(len(functions))]
    for index in range(len(functions)):
        (folder / f"candidate_{index}").mkdir()
    sources = "\n\n".join(_renamed_source(f, n) for f, n in zip(functions, names, strict=True))
    script = folder / "lab08_worker.py"
    script.write_text(_HARNESS.format(imports=WORKER_IMPORTS, sources=sources,
                                      names=", ".join(names)))
    slows = [slow_s] * len(functions) if isinstance(slow_s, (int, float)) else list(slow_s)
    if len(slows) != len(functions):
        raise ValueError(f"{len(slows)} values of slow_s for {len(functions)} functions")
    return torchrun(script, nproc=2, args=[str(folder), ",".join(map(str, slows)),
                                           str(BARRIER_GRACE_S), "shard" if shard else "no",
                                           str(collective_s)],
                    timeout_s=timeout_s, quiet=True)


def _ranks(ranks: list[int]) -> str:
    return " and ".join(f"rank {r}" for r in ranks)


def _judge_save(index: int, results: dict[int, dict]) -> Feedback:
    """Exercise 3's verdict for candidate ``index``, from what the two ranks reported."""
    exercise = "Exercise 3"
    if len(results) != 2:
        return Feedback(exercise, FAILED, "the worker script did not finish on both ranks.")
    errors = {rank: r["error"] for rank, r in results.items()
              if r["error"] and not r["gave_up"]}  # not the check's own barrier timing out
    if any(e == "NotImplementedError" for e in errors.values()):
        return not_attempted(exercise)
    if errors:
        rank, error = sorted(errors.items())[0]
        if error.startswith("NameError"):
            return Feedback(exercise, FAILED,
                            f"on rank {rank} your function raised `{error}`: it runs in a "
                            "worker script, which gives it only the names the lab lists (os, "
                            "time, torch, dist, dcp, nn, get_model_state_dict, DDP, utils). "
                            "Import or define anything else inside the function.")
        return Feedback(exercise, FAILED, f"on rank {rank} your function raised `{error}`. "
                                          "Fix that line, run its cell, then this check again.")
    barriers = {rank: r["barriers"] for rank, r in results.items()}
    if len(set(barriers.values())) > 1:
        called = [rank for rank, n in barriers.items() if n == max(barriers.values())]
        missing = [rank for rank, n in barriers.items() if n < max(barriers.values())]
        where = ("A barrier inside `if rank == 0:`" if called == [0] else
                 "A barrier only on the ranks that do not save (in the `else`)")
        return Feedback(exercise, FAILED,
                        f"{_ranks(called)} called dist.barrier() and {_ranks(missing)} did not, "
                        "so the barrier waited for a rank that never came (here the check gave "
                        "up after a few seconds; a real job hangs until the process group's "
                        f"timeout). {where} does this: call it on every rank, after the `if`.")
    savers = sorted(rank for rank, r in results.items() if r["saves"])
    if results[0]["dcp"] or results[1]["dcp"]:
        return Feedback(exercise, FAILED,
                        "you saved with dcp.save: that writes a folder of shards, one file per "
                        "rank, for dcp.load. This exercise wants one file at `path` that "
                        "torch.load and a plain model can read: torch.save on rank 0.")
    if not savers:
        return Feedback(exercise, FAILED, "no rank called torch.save (utils.save_atomic "
                                          "counts too): rank 0 should save.")
    files = [f for f in results[0]["files"] if not f.startswith(".")]
    if savers == [0, 1] and len(files) > 1:
        return Feedback(exercise, FAILED,
                        f"each rank saved a file of its own ({', '.join(files)}). Every rank "
                        "holds the same weights: one file, from rank 0, at `path`, is all a "
                        "reader needs.")
    if savers == [0, 1]:
        return Feedback(exercise, FAILED,
                        "ranks 0 and 1 both saved to the same path. Their writes overwrite "
                        "each other and a reader can meet a half-written file. Every rank holds "
                        "the same weights: save only on rank 0 (dist.get_rank() == 0).")
    if savers != [0]:
        return Feedback(exercise, FAILED, f"only {_ranks(savers)} saved. By convention rank 0 "
                                          "writes (dist.get_rank() == 0): it always exists, "
                                          "whatever the number of processes.")
    saved = results[0]["saves"][-1]
    if saved["module"]:
        return Feedback(exercise, FAILED,
                        f"rank 0 saved the module itself (a {saved['type']}): torch.save then "
                        "pickles its class, and the safe loader (weights_only=True) refuses the "
                        "file. Save its state dict: ddp.module.state_dict().")
    if "trained.pt" not in files:
        return Feedback(exercise, FAILED, f"rank 0 saved to {saved['file']!r}, not to `path`: "
                                          "write the file at the path you were given.")
    keys = results[0]["keys"]
    if any(str(k).startswith("module.") for k in keys):
        return Feedback(exercise, FAILED,
                        "the saved keys start with 'module.' (e.g. "
                        f"{keys[0]!r}): that is ddp.state_dict(), the wrapper's. A plain model "
                        "cannot load it. Save ddp.module.state_dict() or "
                        "get_model_state_dict(ddp).")
    reader = results[1]
    if barriers[1] == 0 and reader["polls"] > 0:
        return Feedback(exercise, FAILED,
                        "rank 1 polled for the file (os.path.exists or similar) instead of "
                        "waiting at a barrier: a file exists as soon as rank 0 starts writing "
                        "it, so rank 1 can read half of it, and the poll never ends if rank 0 "
                        "fails. Call dist.barrier() after the save, on every rank.")
    if barriers[1] == 0 and reader["slept"] > 0:
        return Feedback(exercise, FAILED,
                        f"rank 1 waited with time.sleep ({reader['slept']:g} s in all) instead "
                        "of a barrier: a guess, too short on a slower disk and wasted on a "
                        "fast one. dist.barrier() after the save, on every rank, waits exactly "
                        "as long as rank 0 needs.")
    if barriers[1] and (not reader["found"]
                        or any(str(k).startswith("unreadable") for k in reader["keys"])):
        return Feedback(exercise, FAILED,
                        "every rank reached the barrier, but rank 1 still found no finished "
                        "file when your function returned: the barrier came before rank 0's "
                        "save. Put dist.barrier() after the save (and after the `if`).")
    if not reader["found"] or any(str(k).startswith("unreadable") for k in reader["keys"]):
        return Feedback(exercise, FAILED,
                        "rank 1 returned from your function before rank 0 had finished writing, "
                        "so it found no file (or half of one). Make every rank wait at "
                        "dist.barrier() after the save, outside the `if`.")
    if sorted(keys) != sorted(fresh_model().state_dict()):
        return Feedback(exercise, FAILED, f"the file holds {keys}; save the model's state dict "
                                          "(keys like '0.weight').")
    waited = "a barrier that every rank reaches" if barriers[1] else "every rank waiting"
    return Feedback(exercise, PASSED, f"one writer (rank 0), plain keys, and {waited} before "
                                      "anyone reads.")


def _plain_failure(text: str) -> str:
    """The one line of a worker's failure a learner can use: the last ``SomeError: ...``
    line, without C++ file paths; '' when there is none."""
    import re

    lines = [line.strip() for line in text.splitlines()
             if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line.strip())]
    if not lines:
        return ""
    line = re.sub(r"\s*\(?\S+\.(cpp|cc|h):\d+\)?.*$", "", lines[-1])
    line = re.sub(r"\[\S+\.(cpp|cc|h):\d+\]", "", line).strip()
    return line if len(line) <= 200 else line[:197].rstrip() + "..."


def judge_saves(functions: list[Callable], folder: str = "scratch_lab08",
                slow_s: float | Sequence[float] = 1.5,
                timeout_s: float = LAUNCH_LIMIT_S, shard: bool = False,
                collective_s: float = 12.0) -> list[Feedback]:
    """Exercise 3's verdict for each of ``functions``, all run in one 2-process launch.

    What :func:`check_save_on_rank_zero` does for one function; the tests use it to try a
    table of answers for the price of one launch. The learner's ``dist.barrier`` is the
    check's own (through the process group's store, with a time limit), so a barrier only
    one rank reaches is reported, not waited on; a launch that fails or hangs anyway gives
    every function the same verdict. ``slow_s`` is how long rank 0's ``torch.save`` sleeps
    first (what makes a missing barrier show): one number, or one per function. With
    ``shard``, the processes then also write the sharded checkpoint exercise 4 loads (the
    tests use it to share one launch). ``collective_s`` is how long a collective waits for a
    rank that never comes before the process group gives up (the tests shorten it).
    Introduced in lab 08_many_devices.
    """
    from utils.distributed import WorkerFailed, child_stderr

    exercise = "Exercise 3"
    folder_path = Path(folder)
    try:
        with contextlib.redirect_stdout(io.StringIO()), child_stderr():
            outputs = _run_workers(folder_path, functions, slow_s, timeout_s, shard, collective_s)
    except TimeoutError:
        return [Feedback(exercise, FAILED,
                         f"the processes were still running after {timeout_s:g} s, so the "
                         "check stopped them. Something in your function waits for ever on "
                         "some rank: a collective (all_reduce, broadcast...) that not every "
                         "rank calls, or a loop that waits for a file.")] * len(functions)
    except WorkerFailed as error:
        said = _plain_failure(str(error))
        if "timeout" in said.lower() or "timed out" in said.lower():
            return [Feedback(exercise, FAILED,
                             "a collective in your function (all_reduce, broadcast...) was "
                             "called on some ranks and not the others, so it waited for them "
                             f"until the time limit (gloo said `{said}`). Every rank must call "
                             "the same collectives, in the same order.")] * len(functions)
        return [Feedback(exercise, FAILED,
                         "a process failed while running your function"
                         + (f": `{said}`." if said else ".") + " A collective (all_reduce, "
                         "broadcast...) that not every rank calls also ends this way.")
                ] * len(functions)
    results: dict[int, dict[int, dict]] = {}
    for text in outputs.values():
        for line in text.splitlines():
            if line.startswith("RESULT "):
                found = json.loads(line[len("RESULT "):])
                results.setdefault(found["candidate"], {})[found["rank"]] = found
    return [_judge_save(index, results.get(index, {})) for index in range(len(functions))]


@graded
def check_save_on_rank_zero(save_on_rank_zero: Callable,
                            folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.3: ``save_on_rank_zero(ddp, path)`` run for real on 2 processes (gloo).

    The check copies the function into a worker script, starts it with torchrun, and
    calls it on both ranks with a DDP model; rank 0's ``torch.save`` is made slow (1.5 s).
    Right after the call returns, each rank looks for the file. Passes when only rank 0
    saved, the keys have no ``module.`` prefix, and rank 1 found the finished file (a
    barrier). The same launch then writes the sharded checkpoint exercise 4 loads, so that
    check needs no launch of its own. Introduced in lab 08_many_devices.
    """

    exercise = "Exercise 3"
    problem = not_a_function(exercise, save_on_rank_zero)
    if problem is not None:
        return problem
    if is_unattempted(save_on_rank_zero):
        return not_attempted(exercise)
    try:
        _renamed_source(save_on_rank_zero, "_candidate_0")
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        return Feedback(exercise, FAILED, "the check could not read your function's source: "
                                          "write it with `def save_on_rank_zero(ddp, path):` in "
                                          "a cell (not a lambda), and run that cell.")
    return judge_saves([save_on_rank_zero], folder, shard=True)[0]


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
def check_load_sharded(load_sharded: Callable, folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.4: ``load_sharded(checkpoint_folder, model)`` fills ``model`` in one process.

    The folder is a DCP checkpoint written by 2 processes, each holding half of every
    parameter (FSDP2). Passes when the model's weights equal the saved ones, loaded
    here with no process group (a 2 -> 1 reshard). Exercise 3's check leaves that
    checkpoint in ``folder``; when it is not there, this check writes it (a 2-process
    launch), so it needs no other exercise. Introduced in lab 08_many_devices.
    """
    import warnings

    from utils.distributed import WorkerFailed, child_stderr

    exercise = "Exercise 4"
    problem = not_a_function(exercise, load_sharded)
    if problem is not None:
        return problem
    if is_unattempted(load_sharded):
        return not_attempted(exercise)
    sharded = Path(folder) / "sharded"
    if not (sharded / ".metadata").exists():
        try:
            with contextlib.redirect_stdout(io.StringIO()), child_stderr():
                _run_workers(Path(folder), [])
        except (TimeoutError, WorkerFailed) as error:
            said = _plain_failure(str(error)) or "the 2 processes did not finish"
            return Feedback(exercise, FAILED, f"the check could not write the sharded "
                                              f"checkpoint ({said}); run this cell again.")
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
        _, problem, _ = _attempt_within(exercise, _plain_errors(load_sharded, texts),
                                        str(sharded), model, limit_s=2 * CALL_LIMIT_S)
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
