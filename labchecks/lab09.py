"""Checks for lab 09_many_processes: fix a multi-process training script.

Exercises 1 and 2 run in this process, on simulated machines (:mod:`labchecks.processes`): a
GPU machine of a 2 x 4-GPU job seen as two of its processes, then a machine without a GPU.
Exercise 3 runs for real, under torchrun, on 2 CPU processes. No exercise needs another.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest import mock

import torch

from labchecks import processes
from labchecks.feedback import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    Feedback,
    not_a_function,
    not_attempted,
    not_ready,
    stop_on,
)
from labchecks.gpu_stand_in import OnMeta
from labchecks.grading import graded
from labchecks.processes import (
    ACCELERATOR_TOUCHES,
    CLUSTER_ENV,
    OTHER_CLUSTER_ENV,
    TOUCHES,
    Forbidden,
    as_device,
    device_index,
    fresh_model,
    not_a_device,
)

__all__ = ["FAILED", "NOT_ATTEMPTED", "PASSED", "Feedback", "check_rank_aware_load",
           "check_save_on_rank_zero", "check_setup_device", "fresh_model", "judge_saves"]


# --- exercise 1: the device and the backend ----------------------------------------------------

def _in_gpu_tensors(function: Callable, calls: list) -> Callable:
    """``function``, its GPU tensors made on meta and noted as ``("tensor", device)`` in
    ``calls`` (:class:`OnMeta`, a thread-local mode, entered in the thread that runs it)."""
    def run(*args):
        with OnMeta(lambda device, _: calls.append(("tensor", device))):
            return function(*args)
    return run


def _backend_for(backend: object, device_type: str) -> str | None:
    """The backend ``backend`` (as ``init_process_group`` reads it: any case, or one per
    device type, ``"cpu:gloo,cuda:nccl"``) uses for ``device_type``; None if it names none."""
    if not isinstance(backend, str):
        return None
    text = backend.strip().lower()
    if ":" not in text:
        return text
    pairs = dict(part.split(":", 1) for part in text.split(",") if ":" in part)
    return pairs.get(device_type)


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
                        "your function asked CUDA for something this check does not simulate. "
                        "It only needs to pick the device and call set_device.")
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


def _as_pair(result: object) -> tuple[object, object] | None:
    """``result`` as (backend, device) when it is a pair (a tuple or a list of two)."""
    if isinstance(result, (tuple, list)) and len(result) == 2:
        return result[0], result[1]
    return None


def _first_touch(calls: list[tuple[str, object]], local_rank: int) -> str:
    """What the first call, made before set_device, does wrong (calls[0])."""
    name, value = calls[0]
    if name == "tensor":
        landed = "GPU 0, the current GPU" if value.index is None else f"{value}"
        return (f"a tensor was made on the GPU ({landed}) before set_device: that initialises "
                "CUDA while GPU 0 is current, so a seed queued before it lands there, and a "
                "'cuda' tensor lands on GPU 0")
    table = ACCELERATOR_TOUCHES if name.startswith("accelerator.") else TOUCHES
    why = table.get(name.removeprefix("accelerator."), TOUCHES["get_rng_state"])
    module = "torch" if name.startswith("accelerator.") else "torch.cuda"
    return f"{module}.{name}() ran before set_device, and {why.format(rank=local_rank)}"


def _judge_on_gpus(exercise: str, setup_device: Callable, env: dict[str, str]) -> Feedback | None:
    """setup_device on a simulated GPU machine with torchrun's variables ``env``: None when
    right, else what is wrong."""
    local_rank, rank = int(env["LOCAL_RANK"]), int(env["RANK"])
    with processes.gpu_machine(env) as calls:
        result, problem, _ = processes.attempt(exercise, _in_gpu_tensors(setup_device, calls))
    on_gpus = "on a machine with 4 GPUs"
    stop_on(_setup_problem(exercise, calls, problem, "on a GPU machine"))
    pair = _as_pair(result)
    if pair is None:
        return Feedback(exercise, FAILED, f"setup_device() returned {result!r}; return a pair "
                                          "(backend, device), such as ('nccl', device).")
    backend, raw_device = pair
    device = as_device(raw_device)
    if device is None:
        return not_a_device(exercise, raw_device, f"{on_gpus} setup_device() returned")
    set_calls = [i for i, (name, _) in enumerate(calls) if name == "set_device"]
    if device.type != "cuda":
        return Feedback(exercise, FAILED, f"{on_gpus} your function chose {device}. Use "
                                          "'cuda:LOCAL_RANK' when torch.cuda.is_available().")
    if device.index == rank != local_rank:
        return Feedback(exercise, FAILED,
                        f"with RANK={rank} and LOCAL_RANK={local_rank} you chose cuda:{rank}. "
                        "RANK counts processes across all machines; the GPU index on this "
                        "machine is LOCAL_RANK.")
    if device.index not in (None, local_rank):
        return Feedback(exercise, FAILED,
                        f"the process with LOCAL_RANK={local_rank} chose {device}. Its GPU is "
                        "cuda:LOCAL_RANK: read it from the environment, every time.")
    if not set_calls:
        return Feedback(exercise, FAILED,
                        "torch.cuda.set_device(local_rank) was not called. Without it this "
                        "process's current GPU stays GPU 0: 'cuda' tensors, and every CUDA call "
                        "that names no device, go there, in every process. Call it first.")
    chosen = calls[set_calls[0]][1]
    if device_index(chosen) != local_rank:
        return Feedback(exercise, FAILED,
                        f"you called set_device({chosen!r}), but this process's GPU is "
                        f"cuda:{local_rank} (LOCAL_RANK): pass the same local rank as the "
                        "device you return.")
    if set_calls[0] > 0:
        return Feedback(exercise, FAILED, f"{_first_touch(calls, local_rank)}. Call "
                                          "set_device(local_rank) first, before anything else "
                                          "touches CUDA.")
    elsewhere = [value for name, value in calls
                 if name == "tensor" and value.index not in (None, local_rank)]
    if elsewhere:
        return Feedback(exercise, FAILED,
                        f"your function made a tensor on {elsewhere[0]}, another process's GPU: "
                        f"this process's is cuda:{local_rank}. Make it on the device you return.")
    if device.index is None:
        return Feedback(exercise, FAILED,
                        "you returned the bare device 'cuda'. Name the GPU: "
                        "torch.device('cuda', local_rank), so that DDP's device_ids and "
                        "map_location can use it.")
    if _backend_for(backend, "cuda") != "nccl":
        return Feedback(exercise, FAILED, f"{on_gpus} you chose the backend {backend!r}; the "
                                          "GPU backend is 'nccl' (gloo is for CPU tensors).")
    return None


@graded
def check_setup_device(setup_device: Callable) -> Feedback:
    """Exercise 09.1: ``setup_device()`` returns ``(backend, device)`` for this process.

    Run on a simulated GPU machine where torchrun set ``RANK=5, LOCAL_RANK=1`` (the second
    process on the second machine of a 2 x 4-GPU job), then as the process with
    ``LOCAL_RANK=2``: there it must call ``torch.cuda.set_device(local_rank)`` (or
    ``torch.accelerator.set_device_index``) before any other CUDA call or GPU tensor and
    return ``nccl`` (any case, or ``"cpu:gloo,cuda:nccl"``) with ``cuda:LOCAL_RANK``; then on
    a simulated machine without a GPU, where it must return gloo and the CPU without calling
    set_device. A pair may be a tuple or a list. Each run has a time limit;
    ``init_process_group`` is refused (the function only chooses). Introduced in lab
    09_many_processes.
    """
    exercise = "Exercise 1"
    stop_on(not_ready(exercise, setup_device))
    for env in (CLUSTER_ENV, OTHER_CLUSTER_ENV):
        stop_on(_judge_on_gpus(exercise, setup_device, env))
    with processes.gpu_machine(gpus=0) as calls:
        result, problem, stopped = processes.attempt(exercise, setup_device)
    if stopped and any(name == "set_device" for name, _ in calls):
        return Feedback(exercise, FAILED,
                        "on a machine without a GPU your function called set_device, which "
                        "fails there (there is no GPU to select): test "
                        "torch.cuda.is_available() first, and call set_device only when it is "
                        "true.")
    stop_on(_setup_problem(exercise, calls, problem, "without a GPU"))
    no_gpu = "on a machine without a GPU setup_device() returned"
    pair = _as_pair(result)
    if pair is None:
        return Feedback(exercise, FAILED, f"{no_gpu} {result!r}; it should be ('gloo', cpu).")
    device = as_device(pair[1])
    if device is None:
        return not_a_device(exercise, pair[1], no_gpu)
    if _backend_for(pair[0], "cpu") != "gloo" or "nccl" in str(pair[0]).lower() \
            or device.type != "cpu":
        return Feedback(exercise, FAILED, f"{no_gpu} {result!r}; it should be ('gloo', cpu): "
                                          "nccl needs GPUs, gloo works on the CPU.")
    return Feedback(exercise, PASSED, "set_device(LOCAL_RANK) first, then nccl and "
                                      "cuda:LOCAL_RANK; gloo and the CPU without a GPU.")


# --- exercise 2: a rank-aware load -------------------------------------------------------------

class _StandInStorage:
    """What torch.load hands a map_location callable, standing in: it notes where the callable
    sends it (``.cuda()``, ``.to(...)``, ``.cpu()``); it starts on the CPU, as storages do."""

    def __init__(self, device: str = "cpu"):
        self.device = device

    def cuda(self, device=None, non_blocking=False):
        target = _cuda_name(device)
        return _StandInStorage(target)

    def to(self, *, device=None, non_blocking=False):  # keywords only, as a real storage's
        target = as_device(device) if not isinstance(device, int) else torch.device("cuda", device)
        return _StandInStorage(str(target) if target is not None else f"invalid: {device!r}")

    def cpu(self):
        return _StandInStorage("cpu")


def _cuda_name(value: object) -> str:
    if value is None:
        return "cuda"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"cuda:{value}"
    device = as_device(value)
    return str(device) if device is not None else f"invalid: {value!r}"


def _callable_target(map_location: Callable, saved: str) -> str:
    """Where the callable ``map_location`` sends a storage saved on ``saved``, on the
    simulated GPU machine: a device string, or 'callable' when it cannot tell."""
    try:
        moved = map_location(_StandInStorage(), saved)
    except Exception:
        return "callable"
    if moved is None:
        return saved  # None means: where the file says
    return moved.device if isinstance(moved, _StandInStorage) else "callable"


def _resolve(map_location: object, saved: str = "cuda:0") -> str:
    """Where ``map_location`` sends a storage saved on ``saved``: a device string,
    'callable' (undecided), or 'invalid: <value>' for a value that is not a device."""
    if map_location is None:
        return saved
    if isinstance(map_location, dict):
        target = map_location.get(saved, saved)
        device = as_device(target) if not isinstance(target, torch.device) else target
        return str(device) if device is not None else f"invalid: {target!r}"
    if callable(map_location):
        with processes.gpu_machine():
            return _callable_target(map_location, saved)
    device = as_device(map_location)
    return str(device) if device is not None else f"invalid: {map_location!r}"


def _judge_gpu_load(exercise: str, load_for_this_rank: Callable, path: str,
                    env: dict[str, str]) -> Feedback | None:
    """The load on the simulated GPU machine of ``env``: None when it sends the file to
    this process's GPU or the CPU, else what is wrong."""
    local_rank, rank = int(env["LOCAL_RANK"]), int(env["RANK"])
    seen: list[dict] = []

    def recording_load(f, *args, **kwargs):
        seen.append({"map_location": kwargs.get("map_location", args[0] if args else None),
                     "weights_only": kwargs.get("weights_only", True)})
        raise Forbidden  # seen what it needs: the rest would move tensors to a GPU

    with processes.gpu_machine(env) as calls, mock.patch.object(torch, "load", recording_load), \
            mock.patch.object(torch.serialization, "load", recording_load):
        _, problem, _ = processes.attempt(exercise, _in_gpu_tensors(load_for_this_rank, calls),
                                          path, torch.device("cuda", local_rank))
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
    shown = f"map_location={call['map_location']!r}" if not callable(call["map_location"]) \
        else "your map_location function"
    if target.startswith("invalid: "):
        value = target.removeprefix("invalid: ")
        lower = value.lower()
        hint = (f" Device names are lower case: {lower}." if as_device(lower.strip("'\""))
                else " Use map_location=device, the device passed in.")
        return Feedback(exercise, FAILED, f"{shown} sends the tensors to {value}, which is not "
                                          f"a device.{hint}")
    if target == "cuda:0" != f"cuda:{local_rank}":
        which = "no map_location" if call["map_location"] is None else shown
        return Feedback(exercise, FAILED,
                        f"with {which}, the process whose GPU is cuda:{local_rank} loads the "
                        "file onto cuda:0, and so does every other process: GPU 0 gets one "
                        "copy per process and runs out of memory. Use map_location=device "
                        "(this process's own GPU) or 'cpu'.")
    if target == f"cuda:{rank}" != f"cuda:{local_rank}":
        return Feedback(exercise, FAILED, f"you mapped to cuda:RANK (cuda:{rank}), which is not "
                                          "this process's GPU: use the device passed in "
                                          "(cuda:LOCAL_RANK).")
    if target == "cuda":
        return Feedback(exercise, FAILED, "map_location='cuda' means the current GPU, which is "
                                          "this process's own only if set_device ran before; "
                                          "pass the device you were given: "
                                          "map_location=device.")
    if target not in (f"cuda:{local_rank}", "cpu", "callable"):
        return Feedback(exercise, FAILED, f"the file would load onto {target}; this process's "
                                          f"device is cuda:{local_rank}, the device passed in.")
    return None


@graded
def check_rank_aware_load(load_for_this_rank: Callable, folder: str = "scratch_lab09") -> Feedback:
    """Exercise 09.2: ``load_for_this_rank(path, device)`` loads onto this process's device.

    The file is tagged ``cuda:0``, as a GPU run saves it. On the simulated GPU machine, as
    the process with ``LOCAL_RANK=1`` (``device=cuda:1``) and then 2, the check only
    records the ``map_location`` given to ``torch.load`` (a callable one is asked where it
    sends a storage) and stops the function: it must send the file to this process's GPU
    or the CPU, never GPU 0. On this machine (``device=cpu``) the function must really load
    it, safely. Introduced in lab 09_many_processes.
    """
    from utils.checkpoints import save_as_if_on

    exercise = "Exercise 2"
    stop_on(not_a_function(exercise, load_for_this_rank))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "start.pt")
    expected = fresh_model().state_dict()
    save_as_if_on({"model": expected, "epoch": 3}, path, "cuda:0")
    for env in (CLUSTER_ENV, OTHER_CLUSTER_ENV):
        stop_on(_judge_gpu_load(exercise, load_for_this_rank, path, env))
    with mock.patch.dict(os.environ, CLUSTER_ENV):  # launched by torchrun, here too
        loaded, problem, _ = processes.attempt(exercise, load_for_this_rank, path,
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

def judge_saves(functions: list[Callable], folder: str = "scratch_lab09",
                slow_s: float | Sequence[float] = 1.5,
                timeout_s: float = processes.LAUNCH_LIMIT_S, shard: bool = False,
                collective_s: float = 12.0) -> list[Feedback]:
    """Exercise 3's verdict for each of ``functions``, all run in one 2-process launch.

    What :func:`check_save_on_rank_zero` does for one function; the tests use it to try a
    table of answers for the price of one launch (:func:`labchecks.processes.run_workers`
    says what the processes do). A launch that fails or hangs gives every function the same
    verdict. Introduced in lab 09_many_processes.
    """
    from utils.distributed import WorkerFailed, child_stderr

    exercise = "Exercise 3"
    try:
        with contextlib.redirect_stdout(io.StringIO()), child_stderr():
            outputs = processes.run_workers(Path(folder), functions, slow_s, timeout_s, shard,
                                            collective_s)
    except TimeoutError:
        return [Feedback(exercise, FAILED,
                         f"the processes were still running after {timeout_s:g} s, so the "
                         "check stopped them. Something in your function waits for ever on "
                         "some rank: a collective (all_reduce, broadcast...) that not every "
                         "rank calls, or a loop that waits for a file.")] * len(functions)
    except WorkerFailed as error:
        said = processes.plain_failure(str(error))
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
                            folder: str = "scratch_lab09") -> Feedback:
    """Exercise 09.3: ``save_on_rank_zero(ddp, path)`` run for real on 2 processes (gloo).

    The check copies the function into a worker script, starts it with torchrun as two
    machines of one process each, and calls it on both ranks with a DDP model; rank 0's
    ``torch.save`` is made slow (1.5 s). Right after the call returns, each rank looks for
    the file. Passes when one rank in all (rank 0) saved the model's own weights, the keys
    have no ``module.`` prefix, and rank 1 found the finished file (a barrier, awaited).
    Introduced in lab 09_many_processes.
    """
    exercise = "Exercise 3"
    stop_on(not_ready(exercise, save_on_rank_zero))
    try:
        processes.renamed_source(save_on_rank_zero, "_candidate_0")
    except (OSError, TypeError, SyntaxError, IndexError, AttributeError):
        return Feedback(exercise, FAILED, "the check could not read your function's source: "
                                          "write it with `def save_on_rank_zero(ddp, path):` in "
                                          "a cell (not a lambda), and run that cell.")
    return judge_saves([save_on_rank_zero], folder)[0]


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
    read_local_rank = any("LOCAL_RANK" in r["read"] for r in results.values())
    if savers == [0, 1] and read_local_rank:
        return Feedback(exercise, FAILED,
                        "both ranks saved: you chose the writer with LOCAL_RANK == 0, which is "
                        "true on the first process of every machine. Here the 2 processes ran "
                        "as 2 machines, so 2 writers wrote one file. One writer in all: the "
                        "global rank, dist.get_rank() == 0.")
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
    unfinished = not reader["found"] or any(str(k).startswith("unreadable") for k in reader["keys"])
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
    if unfinished and reader["unwaited"]:
        return Feedback(exercise, FAILED,
                        "dist.barrier(async_op=True) returns at once, before the others "
                        "arrive: rank 1 went on and found no finished file. Call .wait() on "
                        "what it returns (or use a plain dist.barrier()).")
    if barriers[1] and unfinished:
        return Feedback(exercise, FAILED,
                        "every rank reached the barrier, but rank 1 still found no finished "
                        "file when your function returned: the barrier came before rank 0's "
                        "save. Put dist.barrier() after the save (and after the `if`).")
    if unfinished:
        return Feedback(exercise, FAILED,
                        "rank 1 returned from your function before rank 0 had finished writing, "
                        "so it found no file (or half of one). Make every rank wait at "
                        "dist.barrier() after the save, outside the `if`.")
    if sorted(keys) != sorted(fresh_model().state_dict()):
        return Feedback(exercise, FAILED, f"the file holds {keys}; save the model's state dict "
                                          "(keys like '0.weight').")
    if not results[0].get("same_values", True):
        return Feedback(exercise, FAILED, "the file has the model's keys but not its weights: "
                                          "save ddp.module.state_dict() itself, the trained "
                                          "values, not new tensors.")
    waited = "a barrier that every rank reaches" if barriers[1] else "every rank waiting"
    return Feedback(exercise, PASSED, f"one writer in all (rank 0), plain keys, and {waited} "
                                      "before anyone reads.")
