"""Machines the grader does not have, for labs 09 and 10: a GPU cluster, simulated
(:func:`gpu_machine`, where a learner's branch that only a GPU machine runs is judged), and
real worker processes started with torchrun (:func:`run_workers`, as on two machines of one
process each). Every call of the learner's code and every launch has a time limit.
Introduced in lab 09_many_processes.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import re
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from labchecks.feedback import FAILED, Feedback, attempt_within

#: What torchrun sets on the second machine of a 2 x 4-GPU job, for its second process.
CLUSTER_ENV = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
               "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
#: The same job's third process on its first machine: a second look, so that an answer that
#: writes the number 1 where it should read LOCAL_RANK is caught.
OTHER_CLUSTER_ENV = {**CLUSTER_ENV, "RANK": "2", "LOCAL_RANK": "2"}
#: How long a check waits for a learner's function that runs in this process.
CALL_LIMIT_S = 4.0


def fresh_model() -> nn.Module:
    """The small model every exercise of labs 09 and 10 uses, with seed 0's initial weights.

    Introduced in lab 09_many_processes.
    """
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))


class Forbidden(BaseException):
    """Raised into the learner's code by a simulated call that must not go on (a
    BaseException, so that ``except Exception`` in their code does not swallow it)."""


def attempt(exercise: str, function: Callable, *args,
            limit_s: float | None = None) -> tuple[object, Feedback | None, bool]:
    """:func:`attempt_within` with these labs' limit (:data:`CALL_LIMIT_S` unless given) and
    :class:`Forbidden` as the check's stop: return (result, problem, stopped)."""
    return attempt_within(exercise, function, *args,
                          limit_s=CALL_LIMIT_S if limit_s is None else limit_s,
                          stop=(Forbidden,),
                          hang=". Something in it waits for ever (a loop, a sleep, a process "
                               "group or a barrier): it only needs to compute and return")


# --- devices --------------------------------------------------------------------------------

def device_index(value: object) -> int | None:
    """The device index a set_device argument names (an int, 'cuda:1', a torch.device)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    with contextlib.suppress(RuntimeError, TypeError, ValueError):
        return torch.device(value).index
    return None


def as_device(value: object) -> torch.device | None:
    """``value`` as a torch.device when it is one or a device string; None otherwise."""
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        with contextlib.suppress(RuntimeError, TypeError, ValueError):
            return torch.device(value)
    return None


def not_a_device(exercise: str, value: object, what: str) -> Feedback:
    """The message for a value that should have been a device and is not."""
    if isinstance(value, str) and as_device(value.lower()) is not None:
        return Feedback(exercise, FAILED, f"{what} {value!r}, which PyTorch does not know: "
                                          f"device names are lower case, {value.lower()!r}.")
    if isinstance(value, int) and not isinstance(value, bool):
        return Feedback(exercise, FAILED, f"{what} the number {value!r}; return a torch.device, "
                                          f"such as torch.device('cuda', {value}).")
    return Feedback(exercise, FAILED, f"{what} {value!r}, which is not a device: return a "
                                      "torch.device, such as torch.device('cpu').")


# --- a GPU machine, simulated ----------------------------------------------------------------

#: Calls that, made before set_device, act for (or answer about) GPU 0, the current GPU
#: until set_device runs; each with what it then does wrong. From PyTorch's source:
#: torch/cuda/random.py queues manual_seed, seed and set_rng_state (``_lazy_call``) until
#: CUDA initialises, then runs them on ``current_device()``; ``torch.cuda.set_device``
#: initialises CUDA (``device_lazy_init`` in torch/csrc/cuda/Module.cpp) *before* it switches
#: GPU, so the queued call runs while GPU 0 is current. The others read or act on the
#: current device when given none.
_QUEUED = ("it is queued until CUDA initialises, and set_device initialises CUDA before it "
           "switches GPU, so it runs while GPU 0 is current: it seeds cuda:0's generator, "
           "not this process's cuda:{rank}'s")
_ANSWERS_FOR_0 = "with no device given it answers for the current GPU, still GPU 0, not cuda:{rank}"
_ACTS_ON_0 = "with no device given it acts on the current GPU, still GPU 0, not cuda:{rank}"
_INITIALISES = "it initialises CUDA while GPU 0 is current, so a seed queued before it lands there"
TOUCHES = {
    "manual_seed": _QUEUED, "seed": _QUEUED, "set_rng_state": _QUEUED,
    "get_rng_state": _ANSWERS_FOR_0, "initial_seed": _ANSWERS_FOR_0,
    "current_device": "it answers 0: GPU 0 is the current GPU until set_device runs",
    "init": _INITIALISES,
    "get_device_name": _ANSWERS_FOR_0, "get_device_properties": _ANSWERS_FOR_0,
    "mem_get_info": _ANSWERS_FOR_0, "memory_allocated": _ANSWERS_FOR_0,
    "synchronize": _ACTS_ON_0, "empty_cache": _ACTS_ON_0,
}
#: The same for torch.accelerator (PyTorch 2.6 and later), which a learner may use instead.
ACCELERATOR_TOUCHES = {
    "current_device_index": TOUCHES["current_device"],
    "current_device_idx": TOUCHES["current_device"],
    "synchronize": _ACTS_ON_0, "empty_cache": _ACTS_ON_0,
    "memory_allocated": _ANSWERS_FOR_0, "get_memory_info": _ANSWERS_FOR_0,
}


def _recorder(calls: list[tuple[str, object]], name: str, result: object = 0) -> Callable:
    def record(*args, **kwargs):
        calls.append((name, args[0] if len(args) == 1 else args))
        return result
    return record


def _refuse_process_group(calls: list[tuple[str, object]]) -> Callable:
    def init_process_group(*args, **kwargs):
        calls.append(("init_process_group", kwargs.get("backend", args[0] if args else None)))
        raise Forbidden
    return init_process_group


@contextlib.contextmanager
def gpu_machine(env: dict[str, str] = CLUSTER_ENV,
                gpus: int = 4) -> Iterator[list[tuple[str, object]]]:
    """torch.cuda and torch.accelerator as on a machine with ``gpus`` GPUs (0: a machine
    without one, where ``set_device`` fails), torchrun's variables ``env``; yields the calls
    made, in order.

    ``init_process_group`` is refused (recorded, then the function is stopped): on this
    simulated machine there is no cluster to join. Tensors made on a GPU need
    :class:`~labchecks.gpu_stand_in.OnMeta`, entered in the thread that runs the learner's code.
    """
    import torch.distributed as dist

    calls: list[tuple[str, object]] = []

    def set_device(device) -> None:
        calls.append(("set_device", device))
        if not gpus:
            raise Forbidden
        if isinstance(device, str) and device_index(device) is None:
            raise RuntimeError(f"Invalid device string: {device!r}")  # what PyTorch raises

    def current_device() -> int:  # as on a real machine: the index set_device chose
        calls.append(("current_device", ()))
        chosen = [device_index(d) for name, d in calls if name == "set_device"]
        return chosen[-1] if chosen and chosen[-1] is not None else 0

    patches = [mock.patch.object(torch.cuda, "is_available", lambda: gpus > 0),
               mock.patch.object(torch.cuda, "device_count", lambda: gpus),
               mock.patch.object(torch.cuda, "set_device", set_device),
               mock.patch.object(dist, "init_process_group", _refuse_process_group(calls))]
    answers = {"is_available": lambda: gpus > 0, "device_count": lambda: gpus,
               "current_accelerator": lambda *a, **k: torch.device("cuda") if gpus else None,
               "set_device_index": set_device, "set_device_idx": set_device}
    if gpus:
        patches.append(mock.patch.object(torch.cuda, "current_device", current_device))
        patches += [mock.patch.object(torch.cuda, name, _recorder(calls, name)) for name in TOUCHES
                    if name != "current_device" and hasattr(torch.cuda, name)]
        answers.update(current_device_index=current_device, current_device_idx=current_device)
        answers.update({name: _recorder(calls, f"accelerator.{name}")
                        for name in ACCELERATOR_TOUCHES if name not in answers})
    with _simulated(patches, answers, env):
        yield calls


@contextlib.contextmanager
def _simulated(patches: list, accelerator_answers: dict, env: dict[str, str]) -> Iterator[None]:
    """Apply ``patches``, and ``accelerator_answers`` to torch.accelerator (PyTorch 2.6 and
    later), with torchrun's variables ``env`` set and LESSONS_DEVICE unset; undo it all after."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        patches = patches + [mock.patch.object(accelerator, name, value)
                             for name, value in accelerator_answers.items()
                             if hasattr(accelerator, name)]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(mock.patch.dict(os.environ, env))
        os.environ.pop("LESSONS_DEVICE", None)  # restored with the rest of the environment
        yield


# --- real processes, started with torchrun ------------------------------------------------------

#: How long a barrier in the learner's function waits for the other rank, beyond rank 0's slow
#: save, before the check says who never came (a real barrier would wait until its timeout).
BARRIER_GRACE_S = 2.0
#: The time limit of one launch of the worker script (torchrun and both processes).
LAUNCH_LIMIT_S = 60.0
#: The names the worker script gives the learner's function (listed in lab 09).
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

def run_workers(folder: Path, functions: list[Callable], slow_s: float | Sequence[float] = 1.5,
                timeout_s: float = LAUNCH_LIMIT_S, shard: bool = True,
                collective_s: float = 12.0) -> dict[int, str]:
    """Run the worker script on 2 processes with each function in turn; return the outputs.

    Each function is called as ``function(ddp, path)`` on both ranks, with rank 0's
    ``torch.save`` slowed by ``slow_s`` (one number, or one per function); each rank then
    prints one ``RESULT {json}`` line per function. With ``shard``, the processes then write
    the sharded checkpoint lab 10 loads, into ``folder/sharded``. ``collective_s``: how long
    a collective waits for a rank that never comes. Raises TimeoutError or
    utils.distributed.WorkerFailed. Introduced in lab 09_many_processes.
    """
    import shutil

    from utils.distributed import torchrun

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    names = [f"_candidate_{index}" for index in range(len(functions))]
    for index in range(len(functions)):
        (folder / f"candidate_{index}").mkdir()
    sources = "\n\n".join(renamed_source(f, n) for f, n in zip(functions, names, strict=True))
    script = folder / "lab_worker.py"
    script.write_text(f"{WORKER_IMPORTS}\nfrom labchecks.save_worker import main\n\n\n{sources}"
                      f"\n\n\nmain([{', '.join(names)}])\n", encoding="utf-8")
    slows = [slow_s] * len(functions) if isinstance(slow_s, (int, float)) else list(slow_s)
    if len(slows) != len(functions):
        raise ValueError(f"{len(slows)} values of slow_s for {len(functions)} functions")
    return torchrun(script, nproc=2, args=[str(folder), ",".join(map(str, slows)),
                                           str(BARRIER_GRACE_S), "shard" if shard else "no",
                                           str(collective_s)],
                    timeout_s=timeout_s, quiet=True)


def renamed_source(function: Callable, name: str) -> str:
    """The source of ``function``, its ``def`` renamed to ``name`` (comments dropped)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    tree.body[0].name = name
    tree.body[0].decorator_list = []
    return ast.unparse(tree)


def plain_failure(text: str) -> str:
    """The one line of a worker's failure a learner can use: the last ``SomeError: ...``
    line, without C++ file paths; '' when there is none."""
    lines = [line.strip() for line in text.splitlines()
             if re.match(r"^[\w.]*(Error|Exception|Interrupt)\b", line.strip())]
    if not lines:
        return ""
    line = re.sub(r"\s*\(?\S+\.(cpp|cc|h):\d+\)?.*$", "", lines[-1])
    line = re.sub(r"\[\S+\.(cpp|cc|h):\d+\]", "", line).strip()
    return line if len(line) <= 200 else line[:197].rstrip() + "..."
