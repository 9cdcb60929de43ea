"""Checks for lab 08_many_devices: fix a multi-process training script, reshard a checkpoint.

Exercises 1 and 2 run in this process: the GPU machine they are about is simulated (a
fake ``torch.cuda`` that records calls, environment variables as torchrun sets them on
the second machine of a cluster). Exercise 3 runs for real: the learner's function is
copied into a worker script that ``torchrun`` starts on 2 CPU processes (gloo), and the
check reads what they wrote. Exercise 4 loads, in this process, a sharded checkpoint
that 2 processes wrote.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from labchecks.feedback import FAILED, PASSED, Feedback, attempt, not_a_function, not_attempted

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


def lab_model() -> nn.Module:
    """The small model every exercise of lab 08 uses, with seed 0's initial weights.

    Introduced in lab 08_many_devices.
    """
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))


def is_unattempted(function: Callable) -> bool:
    """True when ``function``'s body is only the stub: ``raise NotImplementedError()``.

    Lets a check that would start processes say "not attempted" without starting them.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and hasattr(tree.body[0], "body") else []
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))


# --- a GPU machine, simulated ----------------------------------------------------------------

_TOUCHES = ("current_device", "init", "synchronize", "mem_get_info", "get_device_name",
            "get_device_properties", "empty_cache", "memory_allocated", "manual_seed",
            "get_rng_state", "set_rng_state")


@contextlib.contextmanager
def _fake_gpu_machine(gpus: int = 4) -> Iterator[list[tuple[str, object]]]:
    """torch.cuda as on a machine with ``gpus`` GPUs; yields the calls made, in order."""
    calls: list[tuple[str, object]] = []
    patches = [mock.patch.object(torch.cuda, "is_available", lambda: True),
               mock.patch.object(torch.cuda, "device_count", lambda: gpus),
               mock.patch.object(torch.cuda, "set_device",
                                 lambda d: calls.append(("set_device", d)))]
    def current_device() -> int:  # as on a real machine: the index set_device chose
        calls.append(("current_device", ()))
        chosen = [_index(d) for name, d in calls if name == "set_device"]
        return chosen[-1] if chosen and chosen[-1] is not None else 0

    patches.append(mock.patch.object(torch.cuda, "current_device", current_device))
    for name in _TOUCHES:
        if name != "current_device" and hasattr(torch.cuda, name):
            patches.append(mock.patch.object(
                torch.cuda, name,
                lambda *a, _name=name, **k: calls.append((_name, a)) or 0))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(mock.patch.dict(os.environ, CLUSTER_ENV))
        os.environ.pop("LESSONS_DEVICE", None)  # restored with the rest of the environment
        yield calls


def _index(value: object) -> int | None:
    """The device index a set_device argument names (an int, 'cuda:1', a torch.device)."""
    if isinstance(value, int):
        return value
    with contextlib.suppress(RuntimeError, TypeError):
        return torch.device(value).index
    return None


def check_setup_device(setup_device: Callable) -> Feedback:
    """Exercise 08.1: ``setup_device()`` returns ``(backend, device)`` for this process.

    Run twice: on this machine (no GPU: gloo and the CPU) and on a simulated GPU machine
    where torchrun set ``RANK=5, LOCAL_RANK=1`` (the second process on the second machine
    of a 2 x 4-GPU job): there it must call ``torch.cuda.set_device(1)`` before any other
    CUDA call and return ``("nccl", cuda:1)``. Introduced in lab 08_many_devices.
    """
    exercise = "Exercise 1"
    problem = not_a_function(exercise, setup_device)
    if problem is not None:
        return problem
    with _fake_gpu_machine() as calls:
        result, problem = attempt(exercise, setup_device)
    if problem is not None:
        if "not compiled with CUDA" in problem.message:
            return Feedback(exercise, FAILED,
                            "your function created a tensor on the GPU. It only needs to pick "
                            "the device and call set_device; make tensors after it returns.")
        return problem
    if not (isinstance(result, tuple) and len(result) == 2):
        return Feedback(exercise, FAILED, f"setup_device() returned {result!r}; return a pair "
                                          "(backend, device), such as ('nccl', device).")
    backend, device = result
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        return Feedback(exercise, FAILED, f"{device!r} is not a device.")
    set_calls = [i for i, (name, _) in enumerate(calls) if name == "set_device"]
    if device.type != "cuda":
        return Feedback(exercise, FAILED,
                        f"on a machine with 4 GPUs your function chose {device}. Use "
                        "'cuda:LOCAL_RANK' when torch.cuda.is_available().")
    if device.index == int(CLUSTER_ENV["RANK"]):
        return Feedback(exercise, FAILED,
                        "with RANK=5 and LOCAL_RANK=1 you chose cuda:5, which does not exist on "
                        "a 4-GPU machine. RANK counts processes across all machines; the GPU "
                        "index on this machine is LOCAL_RANK.")
    if device.index not in (None, int(CLUSTER_ENV["LOCAL_RANK"])):
        return Feedback(exercise, FAILED, f"the process with LOCAL_RANK=1 chose {device}. "
                                          "Its GPU is cuda:LOCAL_RANK, read from the environment.")
    if not set_calls or _index(calls[set_calls[0]][1]) != int(CLUSTER_ENV["LOCAL_RANK"]):
        return Feedback(exercise, FAILED,
                        "torch.cuda.set_device(local_rank) was not called. Without it this "
                        "process's current GPU stays GPU 0: 'cuda' tensors, NCCL and the CUDA "
                        "context of every process land there. Call it first.")
    if set_calls[0] > 0:
        first = calls[0][0]
        return Feedback(exercise, FAILED,
                        f"torch.cuda.{first}() ran before set_device: CUDA was already touched "
                        "on GPU 0, so this process keeps a context there. Call "
                        "torch.cuda.set_device(local_rank) before anything else touches CUDA.")
    if device.index is None:
        return Feedback(exercise, FAILED,
                        "you returned the bare device 'cuda'. Name the GPU: "
                        "torch.device('cuda', local_rank), so that DDP's device_ids and "
                        "map_location can use it.")
    if backend != "nccl":
        return Feedback(exercise, FAILED, f"on GPUs you chose the backend {backend!r}; the GPU "
                                          "backend is 'nccl' (gloo is for CPU tensors).")
    with mock.patch.object(torch.cuda, "is_available", lambda: False), \
            mock.patch.dict(os.environ, CLUSTER_ENV):
        result, problem = attempt(exercise, setup_device)
    if problem is not None:
        return problem
    if not isinstance(result, tuple) or len(result) != 2 or result[0] != "gloo" \
            or torch.device(result[1]).type != "cpu":
        return Feedback(exercise, FAILED, f"without a GPU setup_device() returned {result!r}; "
                                          "it should be ('gloo', cpu).")
    return Feedback(exercise, PASSED, "set_device(LOCAL_RANK) first, then nccl and "
                                      "cuda:LOCAL_RANK; gloo and the CPU without a GPU.")


# --- exercise 2: a rank-aware load -------------------------------------------------------------

def _resolve(map_location: object, saved: str = "cuda:0") -> str:
    """Where ``map_location`` sends a storage saved on ``saved`` (as a device string)."""
    if map_location is None:
        return saved
    if isinstance(map_location, dict):
        return str(torch.device(map_location.get(saved, saved)))
    if callable(map_location):
        return "callable"
    return str(torch.device(map_location))


def check_rank_aware_load(load_for_this_rank: Callable, folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.2: ``load_for_this_rank(path, device)`` loads onto this process's device.

    The file is tagged ``cuda:0``, as a GPU run saves it. On the simulated GPU machine
    (``LOCAL_RANK=1``, ``device=cuda:1``) the ``map_location`` given to ``torch.load`` must
    send it to ``cuda:1`` or the CPU, never GPU 0; on this machine (``device=cpu``) the
    function must really load it, safely. Introduced in lab 08_many_devices.
    """
    from utils.checkpoints import save_as_if_on

    exercise = "Exercise 2"
    problem = not_a_function(exercise, load_for_this_rank)
    if problem is not None:
        return problem
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "start.pt")
    expected = lab_model().state_dict()
    save_as_if_on({"model": expected, "epoch": 3}, path, "cuda:0")
    seen: list[dict] = []
    real_load = torch.load

    def recording_load(f, *args, **kwargs):
        seen.append({"map_location": kwargs.get("map_location", args[0] if args else None),
                     "weights_only": kwargs.get("weights_only", True)})
        kwargs["map_location"] = "cpu"  # no GPU here: load where the data can go
        return real_load(f, **{k: v for k, v in kwargs.items() if k != "pickle_module"})

    with _fake_gpu_machine(), mock.patch.object(torch, "load", recording_load):
        _, problem = attempt(exercise, load_for_this_rank, path, torch.device("cuda", 1))
    if problem is not None:
        return problem
    if not seen:
        return Feedback(exercise, FAILED, "your function did not call torch.load.")
    call = seen[0]
    if call["weights_only"] is False:
        return Feedback(exercise, FAILED, "weights_only=False runs any code in the file. A "
                                          "checkpoint of tensors loads with the default, "
                                          "weights_only=True.")
    target = _resolve(call["map_location"])
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
    if target not in ("cuda:1", "cpu", "callable"):
        return Feedback(exercise, FAILED, f"the file would load onto {target}; this process's "
                                          "device is cuda:1.")
    loaded, problem = attempt(exercise, load_for_this_rank, path, torch.device("cpu"))
    if problem is not None:
        return problem
    model = loaded.get("model") if isinstance(loaded, dict) else None
    if not isinstance(model, dict) or set(model) != set(expected):
        return Feedback(exercise, FAILED, "return the whole loaded checkpoint (a dict with "
                                          "'model' and 'epoch').")
    if any(t.device.type != "cpu" or not torch.equal(t, expected[k]) for k, t in model.items()):
        return Feedback(exercise, FAILED, "on this machine the tensors should arrive on the CPU "
                                          "with the saved values.")
    return Feedback(exercise, PASSED, "every process loads onto its own device or the CPU, "
                                      "never all onto GPU 0.")


# --- exercise 3: run for real under torchrun ------------------------------------------------------

_HARNESS = """\
{imports}
import json
import sys

from labchecks.lab08 import lab_model
from utils.distributed import process_group

{sources}

folder, slows = sys.argv[1], [float(s) for s in sys.argv[2].split(",")]
with process_group(timeout_s=30) as me:
    for index, function in enumerate([{names}]):
        here = os.path.join(folder, f"candidate_{{index}}")
        slow_s = slows[index]
        path = os.path.join(here, "trained.pt")
        real_save = torch.save

        def recording_save(obj, f, *args, **kwargs):
            open(os.path.join(here, f"saved_by_rank_{{me.rank}}"), "w").close()
            if me.rank == 0:
                time.sleep(slow_s)  # a slow disk: a reader that does not wait finds no file
            return real_save(obj, f, *args, **kwargs)

        torch.save = recording_save
        model = lab_model().to(me.device)
        ddp = DDP(model, device_ids=[me.local_rank] if me.device.type == "cuda" else None)
        function(ddp, path)
        torch.save = real_save
        seen = os.path.exists(path)
        try:
            keys = list(torch.load(path, map_location="cpu", weights_only=True)) if seen else []
        except Exception as error:
            keys = [f"unreadable: {{type(error).__name__}}"]
        result = {{"candidate": index, "rank": me.rank, "seen": seen, "keys": keys}}
        print("RESULT " + json.dumps(result), flush=True)
        dist.barrier()
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(me.device.type, (me.world_size,))
    sharded = lab_model().to(me.device)
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


def _run_workers(folder: Path, functions: list[Callable], slow_s: float | Sequence[float] = 2.0,
                 timeout_s: float = 120.0) -> dict[int, str]:
    """Run the worker script on 2 processes with each function in turn; return the outputs."""
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
    return torchrun(script, nproc=2, args=[str(folder), ",".join(map(str, slows))],
                    timeout_s=timeout_s, quiet=True)


def _judge_save(folder: Path, index: int, results: dict[int, dict]) -> Feedback:
    """Exercise 3's verdict for candidate ``index``, from what the two ranks reported."""
    exercise = "Exercise 3"
    here = folder / f"candidate_{index}"
    savers = sorted(int(p.name.rsplit("_", 1)[1]) for p in here.glob("saved_by_rank_*"))
    if savers != [0]:
        if not savers:
            return Feedback(exercise, FAILED, "no rank called torch.save (utils.save_atomic "
                                              "counts too): rank 0 should save.")
        return Feedback(exercise, FAILED,
                        f"ranks {savers} all saved to the same path. Their writes overwrite "
                        "each other and a reader can meet a half-written file. Every rank holds "
                        "the same weights: save only on rank 0 (dist.get_rank() == 0).")
    if len(results) != 2:
        return Feedback(exercise, FAILED, "the worker script did not finish on both ranks.")
    keys = results[0]["keys"]
    if any(str(k).startswith("module.") for k in keys):
        return Feedback(exercise, FAILED,
                        "the saved keys start with 'module.' (e.g. "
                        f"{keys[0]!r}): that is ddp.state_dict(), the wrapper's. A plain model "
                        "cannot load it. Save ddp.module.state_dict() or "
                        "get_model_state_dict(ddp).")
    if not results[1]["seen"] or any(str(k).startswith("unreadable") for k in results[1]["keys"]):
        return Feedback(exercise, FAILED,
                        "rank 1 returned from your function before rank 0 had finished writing, "
                        "so it found no file (or half of one). Make every rank wait at "
                        "dist.barrier() after the save, outside the `if`.")
    if sorted(keys) != sorted(lab_model().state_dict()):
        return Feedback(exercise, FAILED, f"the file holds {keys}; save the model's state dict "
                                          "(keys like '0.weight').")
    return Feedback(exercise, PASSED, "one writer (rank 0), plain keys, and a barrier that every "
                                      "rank reaches before anyone reads.")


def judge_saves(functions: list[Callable], folder: str = "scratch_lab08",
                slow_s: float | Sequence[float] = 2.0,
                timeout_s: float = 120.0) -> list[Feedback]:
    """Exercise 3's verdict for each of ``functions``, all run in one 2-process launch.

    What :func:`check_save_on_rank_zero` does for one function; the tests use it to try a
    table of answers for the price of one launch. A launch that fails or hangs gives every
    function the same verdict. ``slow_s`` is how long rank 0's ``torch.save`` sleeps first
    (what makes a missing barrier show): one number, or one per function. Introduced in lab
    08_many_devices.
    """
    from utils.distributed import WorkerFailed

    exercise = "Exercise 3"
    folder_path = Path(folder)
    try:
        outputs = _run_workers(folder_path, functions, slow_s, timeout_s)
    except TimeoutError:
        return [Feedback(exercise, FAILED,
                         "the processes hung until the timeout. A barrier that only some ranks "
                         "reach (dist.barrier() inside `if rank == 0:`) waits forever: call it "
                         "on every rank, outside the if.")] * len(functions)
    except WorkerFailed as error:
        text = str(error)
        if "NotImplementedError" in text:
            return [not_attempted(exercise)] * len(functions)
        last = [line for line in text.splitlines() if line.strip()]
        return [Feedback(exercise, FAILED,
                         "a process failed while running your function (a barrier or other "
                         "collective that not every rank reaches also ends this way): "
                         f"{last[-1] if last else text}")] * len(functions)
    results: dict[int, dict[int, dict]] = {}
    for text in outputs.values():
        for line in text.splitlines():
            if line.startswith("RESULT "):
                found = json.loads(line[len("RESULT "):])
                results.setdefault(found["candidate"], {})[found["rank"]] = found
    return [_judge_save(folder_path, index, results.get(index, {}))
            for index in range(len(functions))]


def check_save_on_rank_zero(save_on_rank_zero: Callable,
                            folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.3: ``save_on_rank_zero(ddp, path)`` run for real on 2 processes (gloo).

    The check copies the function into a worker script, starts it with torchrun, and
    calls it on both ranks with a DDP model; rank 0's ``torch.save`` is made slow (2 s).
    Right after the call returns, each rank looks for the file. Passes when only rank 0
    saved, the keys have no ``module.`` prefix, and rank 1 found the finished file (a
    barrier). The worker also writes the sharded checkpoint exercise 4 loads.
    Introduced in lab 08_many_devices.
    """

    exercise = "Exercise 3"
    problem = not_a_function(exercise, save_on_rank_zero)
    if problem is not None:
        return problem
    if is_unattempted(save_on_rank_zero):
        return not_attempted(exercise)
    return judge_saves([save_on_rank_zero], folder)[0]


def _plain_errors(function: Callable) -> Callable:
    """``function``, with DCP's CheckpointException (a BaseException) turned into RuntimeError."""
    from torch.distributed.checkpoint.api import CheckpointException

    def call(*args):
        try:
            return function(*args)
        except CheckpointException as error:
            last = [line for line in str(error).splitlines() if line.strip()]
            raise RuntimeError(last[-1] if last else str(error)) from None

    return call


def check_load_sharded(load_sharded: Callable, folder: str = "scratch_lab08") -> Feedback:
    """Exercise 08.4: ``load_sharded(checkpoint_folder, model)`` fills ``model`` in one process.

    The folder is a DCP checkpoint written by 2 processes, each holding half of every
    parameter (FSDP2). Passes when the model's weights equal the saved ones, loaded
    here with no process group (a 2 -> 1 reshard). Starts the 2 processes only when
    exercise 3's check has not already written the folder. Introduced in lab 08_many_devices.
    """
    from utils.distributed import WorkerFailed

    exercise = "Exercise 4"
    problem = not_a_function(exercise, load_sharded)
    if problem is not None:
        return problem
    if is_unattempted(load_sharded):
        return not_attempted(exercise)
    sharded = Path(folder) / "sharded"
    if not (sharded / ".metadata").exists():
        try:
            _run_workers(Path(folder), [])
        except (TimeoutError, WorkerFailed) as error:
            return Feedback(exercise, FAILED, f"could not write the sharded checkpoint: {error}")
    expected = lab_model().state_dict()
    torch.manual_seed(123)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3))  # other weights
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        _, problem = attempt(exercise, _plain_errors(load_sharded), str(sharded), model)
    if problem is not None:
        message = problem.message
        if "IsADirectoryError" in message or "is a directory" in message.lower():
            return Feedback(exercise, FAILED,
                            "torch.load opens one file; a DCP checkpoint is a folder (one file "
                            "per rank plus .metadata). Load it with dcp.load(state, "
                            "checkpoint_id=folder).")
        if "Missing key" in message or "model." in message:
            return Feedback(exercise, FAILED,
                            "the keys did not match: the processes saved {'model': state_dict}, "
                            "so the checkpoint's keys start with 'model.'. Pass "
                            "{'model': model.state_dict()} to dcp.load.")
        return problem
    if all(torch.equal(t, expected[k]) for k, t in model.state_dict().items()):
        return Feedback(exercise, PASSED, "two processes' shards, loaded into one model with no "
                                          "process group: a 2 -> 1 reshard.")
    return Feedback(exercise, FAILED,
                    "the model's weights are not the saved ones. dcp.load fills the tensors of "
                    "the state dict you pass, in place: pass {'model': model.state_dict()}, "
                    "and if you built new tensors, copy them in with model.load_state_dict().")
