"""labchecks, lab 09: right answers pass however written, each known wrong answer gets its
own diagnosis, and an untouched stub is "not attempted" without starting any process.

Exercises 1 and 2 are judged on simulated machines (a GPU machine, looked at as two of its
processes, then one without a GPU); exercise 3 from a real 2-process launch, as two machines
of one process each. The whole table of exercise 3 answers runs in one launch
(lab09.judge_saves). Among the cases: what a grader without a GPU, or with one machine,
would not see (a branch only a GPU runs, LOCAL_RANK == 0 as the writer, a number written
where LOCAL_RANK belongs), and what it must not refuse (a backend in capitals, a list, a
warm-up tensor after set_device, a barrier awaited with async_op=True).
"""

from __future__ import annotations

import json
import os
import time
from unittest import mock

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch.distributed.checkpoint.state_dict import get_model_state_dict

import utils
from labchecks import lab09 as checks
from labchecks import processes
from labchecks.feedback import is_unattempted

# --- exercise 1: setup_device -----------------------------------------------------------------


def setup_plain():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_strings():
    if not torch.cuda.is_available():
        return "gloo", "cpu"
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}")
    torch.cuda.set_device(device)
    return "nccl", device


def setup_with_utils():
    return utils.distributed.backend_and_device(int(os.environ["LOCAL_RANK"]))


def setup_keyword_device():
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not torch.cuda.is_available():
        return "gloo", torch.device(type="cpu")
    device = torch.device(type="cuda", index=local_rank)
    torch.cuda.set_device(device)
    return "nccl", device


def setup_backend_first():
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo":
        return backend, torch.device("cpu")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return backend, torch.device("cuda", torch.cuda.current_device())


def setup_string_device():
    local_rank = os.environ["LOCAL_RANK"]
    if torch.cuda.is_available():
        torch.cuda.set_device(f"cuda:{local_rank}")
        return "nccl", f"cuda:{local_rank}"
    return "gloo", "cpu"


def setup_global_rank():
    rank = int(os.environ["RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
        return "nccl", torch.device("cuda", rank)
    return "gloo", torch.device("cpu")


def setup_without_set_device():
    if torch.cuda.is_available():
        return "nccl", torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return "gloo", torch.device("cpu")


def setup_touches_cuda_first():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.manual_seed(0)
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_asks_current_device_first():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        print("starting on", torch.cuda.current_device())  # initialises CUDA on GPU 0
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_gloo_on_gpus():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return "gloo", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_always_cpu():
    return "gloo", torch.device("cpu")


def setup_with_accelerator():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_with_current_accelerator():
    local_rank = int(os.environ["LOCAL_RANK"])
    accelerator = torch.accelerator.current_accelerator()
    if accelerator is None:
        return "gloo", torch.device("cpu")
    torch.accelerator.set_device_index(local_rank)
    device = torch.device(accelerator.type, local_rank)
    return dist.get_default_backend_for_device(device), device


def setup_device_count_guard():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available() and torch.cuda.device_count() > local_rank:
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device(f"cuda:{local_rank}")
    return "gloo", torch.device("cpu")


def setup_seed_after():
    local_rank = int(os.environ["LOCAL_RANK"])
    if not torch.cuda.is_available():
        return ("gloo", torch.device("cpu"))
    torch.cuda.set_device(local_rank)
    torch.cuda.manual_seed(0)  # after set_device: this process's own GPU
    return ("nccl", torch.device("cuda", local_rank))


def setup_starts_process_group():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        return "nccl", torch.device("cuda", local_rank)
    dist.init_process_group("gloo")
    return "gloo", torch.device("cpu")


def setup_no_device():
    return "gloo", None


def setup_capital_cpu():
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return "nccl", torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return "gloo", "CPU"


def setup_string_to_set_device():
    if torch.cuda.is_available():
        torch.cuda.set_device(os.environ["LOCAL_RANK"])  # the string '1'
        return "nccl", torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return "gloo", torch.device("cpu")


def setup_set_device_before_the_test():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    if torch.cuda.is_available():
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_returns_device_only():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def setup_asks_the_process_group():
    local_rank = dist.get_rank() % torch.cuda.device_count()
    torch.cuda.set_device(local_rank)
    return "nccl", torch.device("cuda", local_rank)


def setup_waits_for_ever():
    while True:
        time.sleep(0.05)


def setup_bare_cuda():
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return "nccl", torch.device("cuda")
    return "gloo", torch.device("cpu")


def setup_capital_backends():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return "NCCL", torch.device("cuda", local_rank)  # init_process_group accepts it
    return "GLOO", torch.device("cpu")


def setup_returns_a_list():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return ["nccl", torch.device("cuda", local_rank)]
    return ["gloo", torch.device("cpu")]


def setup_warm_up_tensor():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        torch.zeros(1, device=f"cuda:{local_rank}")  # wake the GPU up: this process's own
        torch.ones(1).cuda()  # after set_device, a bare 'cuda' is this process's GPU too
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_backend_per_device_type():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return "cpu:gloo,cuda:nccl", torch.device("cuda", local_rank)
    return dist.Backend.GLOO, torch.device("cpu")


RIGHT_SETUPS = [setup_plain, setup_strings, setup_with_utils, setup_keyword_device,
                setup_backend_first, setup_string_device, setup_with_accelerator,
                setup_with_current_accelerator, setup_device_count_guard, setup_seed_after,
                setup_capital_backends, setup_returns_a_list, setup_warm_up_tensor,
                setup_backend_per_device_type]


@pytest.mark.parametrize("answer", RIGHT_SETUPS)
def test_setup_device_passes_however_written(answer):
    _status(checks.check_setup_device(answer), checks.PASSED)


def setup_warm_up_before_set_device():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")  # GPU 0: set_device has not run yet
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_warm_up_on_gpu_0():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        torch.zeros(1, device="cuda:0")
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def setup_number_one_written_in():
    if torch.cuda.is_available():
        torch.cuda.set_device(1)  # right for LOCAL_RANK=1 only
        return "nccl", torch.device("cuda", 1)
    return "gloo", torch.device("cpu")


WRONG_SETUPS = [
    (setup_warm_up_before_set_device, "a tensor was made on the GPU (GPU 0, the current GPU)"),
    (setup_warm_up_on_gpu_0, "made a tensor on cuda:0, another process's GPU"),
    (setup_number_one_written_in, "the process with LOCAL_RANK=2 chose cuda:1"),
    (setup_global_rank, "the GPU index on this machine is LOCAL_RANK"),
    (setup_without_set_device, "set_device(local_rank) was not called"),
    (setup_touches_cuda_first, "seeds cuda:0's generator, not this process's cuda:1's"),
    (setup_asks_current_device_first, "torch.cuda.current_device() ran before set_device"),
    (setup_gloo_on_gpus, "the GPU backend is 'nccl'"),
    (setup_always_cpu, "Use 'cuda:LOCAL_RANK'"),
    (setup_starts_process_group, "setup_device should only choose"),
    (setup_no_device, "returned None, which is not a device"),
    (setup_capital_cpu, "device names are lower case, 'cpu'"),
    (setup_string_to_set_device, "a string from os.environ"),
    (setup_set_device_before_the_test, "test torch.cuda.is_available() first"),
    (setup_returns_device_only, "return a pair (backend, device)"),
    (setup_asks_the_process_group, "setup_device runs before init_process_group"),
    (setup_waits_for_ever, "had not returned after"),
    (setup_bare_cuda, "you returned the bare device 'cuda'"),
]


@pytest.mark.parametrize(("answer", "phrase"), WRONG_SETUPS,
                         ids=[answer.__name__ for answer, _ in WRONG_SETUPS])
def test_setup_device_names_each_mistake(answer, phrase, monkeypatch):
    monkeypatch.setattr(processes, "CALL_LIMIT_S", 1.0)  # the one that waits for ever
    feedback = assert_one_line(_status(checks.check_setup_device(answer), checks.FAILED, phrase))
    assert all(feedback.message != checks.check_setup_device(other).message
               for other, _ in WRONG_SETUPS if other not in (answer, setup_waits_for_ever))


def test_setup_device_stub_is_not_attempted():
    _status(checks.check_setup_device(stub), checks.NOT_ATTEMPTED)


# --- exercise 2: load_for_this_rank ---------------------------------------------------------------


def load_then_move(path, device):
    checkpoint = torch.load(path, map_location="cpu")
    checkpoint["model"] = {key: tensor.to(device) for key, tensor in checkpoint["model"].items()}
    return checkpoint


def load_local_rank_from_env(path, device):
    local_rank = int(os.environ["LOCAL_RANK"])
    where = torch.device("cuda", local_rank) if device.type == "cuda" else device
    return torch.load(path, map_location=where)


RIGHT_LOADS = {
    "device": lambda path, device: torch.load(path, map_location=device),
    "string": lambda path, device: torch.load(path, map_location=str(device), weights_only=True),
    "cpu": lambda path, device: torch.load(path, map_location="cpu"),
    "dict": lambda path, device: torch.load(path, map_location={"cuda:0": str(device)}),
    "keywords-first": lambda path, device: torch.load(path, weights_only=True,
                                                      map_location=torch.device(device)),
    "file-object": lambda path, device: torch.load(open(path, "rb"), map_location=device),  # noqa: SIM115
    "callable": lambda path, device: torch.load(path,
                                                map_location=lambda s, tag: s.to(device=device)),
    "cpu-then-move": load_then_move,
    "storage-lambda": lambda path, device: torch.load(path, map_location=lambda s, loc: s),
    "mmap": lambda path, device: torch.load(path, map_location="cpu", mmap=True),
    "local-rank": load_local_rank_from_env,
    "storage-to-device": lambda path, device: torch.load(
        path, map_location=lambda storage, tag: storage.to(device=device)),
    "storage-cuda-index": lambda path, device: torch.load(
        path, map_location=lambda storage, tag: storage.cuda(device.index)
        if device.type == "cuda" else storage),
}


@pytest.mark.parametrize("answer", RIGHT_LOADS.values(), ids=RIGHT_LOADS.keys())
def test_rank_aware_load_passes_however_written(answer, tmp_path):
    _status(checks.check_rank_aware_load(answer, folder=tmp_path), checks.PASSED)


def load_then_cuda(path, device):
    checkpoint = torch.load(path, map_location=device)
    checkpoint["model"] = {key: tensor.cuda() for key, tensor in checkpoint["model"].items()}
    return checkpoint


def load_with_pickle(path, device):
    import pickle

    with open(path, "rb") as handle:
        return pickle.load(handle)


def load_forgets_to_return(path, device):
    torch.load(path, map_location=device)


def load_onto_gpu_0_when_there_is_one(path, device):
    def where(storage, location):  # a branch only a machine with a GPU runs
        return storage.cuda(0) if torch.cuda.is_available() else storage
    return torch.load(path, map_location=where)


def load_onto_gpu_1_written_in(path, device):
    return torch.load(path, map_location="cuda:1" if device.type == "cuda" else "cpu")


WRONG_LOADS = {
    "gpu-0-only-on-gpus": (load_onto_gpu_0_when_there_is_one,
                           "with your map_location function, the process whose GPU is cuda:1"),
    "cuda-1-written-in": (load_onto_gpu_1_written_in,
                          "the file would load onto cuda:1; this process's device is cuda:2"),
    "no-map-location": (lambda path, device: torch.load(path), "with no map_location"),
    "gpu-0": (lambda path, device: torch.load(path, map_location="cuda:0"),
              "map_location='cuda:0'"),
    "global-rank": (lambda path, device: torch.load(path,
                                                    map_location=f"cuda:{os.environ['RANK']}"),
                    "cuda:RANK (cuda:5)"),
    "unsafe": (lambda path, device: torch.load(path, map_location=device, weights_only=False),
               "weights_only=False runs any code"),
    "only-model": (lambda path, device: torch.load(path, map_location=device)["model"],
                   "return the whole loaded checkpoint"),
    "capital-cpu": (lambda path, device: torch.load(path, map_location="CPU"),
                    "Device names are lower case: 'cpu'"),
    "bare-cuda": (lambda path, device: torch.load(path, map_location="cuda"),
                  "map_location='cuda' means the current GPU"),
    "dict-to-gpu-0": (lambda path, device: torch.load(path, map_location={"cuda:0": "cuda:0"}),
                      "map_location={'cuda:0': 'cuda:0'}"),
    "dict-wrong-key": (lambda path, device: torch.load(path, map_location={"cpu": str(device)}),
                       "map_location={'cpu': 'cuda:1'}"),
    "then-cuda": (load_then_cuda, "it asks for CUDA"),
    "pickle": (load_with_pickle, "did not call torch.load"),
    "no-return": (load_forgets_to_return, "returned None"),
    "not-a-device": (lambda path, device: torch.load(path, map_location=2), "is not a device"),
}


@pytest.mark.parametrize(("answer", "phrase"), WRONG_LOADS.values(), ids=WRONG_LOADS.keys())
def test_rank_aware_load_names_each_mistake(answer, phrase, tmp_path):
    feedback = _status(checks.check_rank_aware_load(answer, folder=tmp_path), checks.FAILED,
                       phrase)
    assert_one_line(feedback)
    others = [checks.check_rank_aware_load(a, folder=tmp_path).message
              for a, _ in WRONG_LOADS.values() if a is not answer]
    assert feedback.message not in others


def test_rank_aware_load_stub_is_not_attempted(tmp_path):
    _status(checks.check_rank_aware_load(stub, folder=tmp_path), checks.NOT_ATTEMPTED)


# --- exercise 3: save_on_rank_zero, for real on 2 processes ---------------------------------


def save_module_state_dict(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_with_get_model_state_dict(ddp, path):
    state = get_model_state_dict(ddp)  # every rank may call it; only rank 0 writes
    if int(os.environ["RANK"]) == 0:
        utils.save_atomic(state, path)
    dist.barrier()


def save_if_not_rank(ddp, path):
    if not dist.get_rank():
        with open(path, "wb") as handle:
            torch.save(ddp.module.state_dict(), handle)
    dist.barrier()


def save_prefix_consumed(ddp, path):
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

    state = ddp.state_dict()
    consume_prefix_in_state_dict_if_present(state, "module.")  # in place
    if dist.get_rank() == 0:
        torch.save(state, path)
    dist.barrier()


def save_prefix_removed(ddp, path):
    state = {key.removeprefix("module."): value for key, value in ddp.state_dict().items()}
    if dist.get_rank() == 0:
        torch.save(state, path)
    dist.barrier()


def save_with_barrier_in_finally(ddp, path):
    try:
        if dist.get_rank() == 0:
            torch.save(ddp.module.state_dict(), path)
    finally:
        dist.barrier()


def save_rank_from_environment(ddp, path):
    if int(os.environ["RANK"]) == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_with_monitored_barrier(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.monitored_barrier()


def save_cpu_copies(ddp, path):
    state = {key: value.detach().cpu() for key, value in ddp.module.state_dict().items()}
    if dist.get_rank() == 0:
        torch.save(state, path)
    dist.barrier()


def save_then_rename(ddp, path):
    if dist.get_rank() == 0:
        temporary = path + ".tmp"
        torch.save(ddp.module.state_dict(), temporary)
        os.replace(temporary, path)
    dist.barrier()


def save_with_two_barriers(ddp, path):
    dist.barrier()  # everyone has finished training
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_on_every_rank(ddp, path):
    torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_wrapper_keys(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.state_dict(), path)
    dist.barrier()


def save_without_barrier(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)


def save_barrier_inside_if(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
        dist.barrier()


def save_barrier_only_on_readers(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    else:
        dist.barrier()


def save_the_module_itself(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module, path)
    dist.barrier()


def save_only_on_rank_one(ddp, path):
    if dist.get_rank() == 1:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_one_file_per_rank(ddp, path):
    torch.save(ddp.module.state_dict(), f"{path}.{dist.get_rank()}")
    dist.barrier()


def save_with_dcp(ddp, path):
    dcp.save({"model": get_model_state_dict(ddp)}, checkpoint_id=path)
    dist.barrier()


def save_then_sleep(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    else:
        time.sleep(3)  # long enough, surely


def save_then_poll(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    else:
        while not os.path.exists(path):
            time.sleep(0.05)


def save_barrier_first(ddp, path):
    dist.barrier()
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)


def save_to_another_name(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), os.path.join(os.path.dirname(path), "model.pt"))
    dist.barrier()


def save_nested(ddp, path):
    if dist.get_rank() == 0:
        torch.save({"model": ddp.module.state_dict()}, path)
    dist.barrier()


def save_with_a_notebook_name(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), checkpoint_path)  # noqa: F821 - a notebook variable
    dist.barrier()


def save_that_raises(ddp, path):
    if dist.get_rank() == 0:
        raise ValueError("disk full")
    dist.barrier()


def save_with_async_barrier(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier(async_op=True).wait()


def save_on_local_rank_zero(ddp, path):
    if int(os.environ["LOCAL_RANK"]) == 0:  # the first process of each machine
        torch.save(ddp.module.state_dict(), path)
    dist.barrier()


def save_async_barrier_never_awaited(ddp, path):
    if dist.get_rank() == 0:
        torch.save(ddp.module.state_dict(), path)
    dist.barrier(async_op=True)


def save_zeros(ddp, path):
    if dist.get_rank() == 0:
        torch.save({k: torch.zeros_like(v) for k, v in ddp.module.state_dict().items()}, path)
    dist.barrier()


RIGHT_SAVES = [save_with_async_barrier, save_module_state_dict, save_with_get_model_state_dict,
               save_if_not_rank, save_prefix_consumed, save_prefix_removed,
               save_with_barrier_in_finally, save_rank_from_environment,
               save_with_monitored_barrier, save_cpu_copies, save_then_rename,
               save_with_two_barriers]
WRONG_SAVES = {
    save_on_local_rank_zero: "you chose the writer with LOCAL_RANK == 0",
    save_async_barrier_never_awaited: "dist.barrier(async_op=True) returns at once",
    save_zeros: "the file has the model's keys but not its weights",
    save_on_every_rank: "ranks 0 and 1 both saved to the same path",
    save_wrapper_keys: "start with 'module.'",
    save_without_barrier: "before rank 0 had finished writing",
    save_barrier_inside_if: "rank 0 called dist.barrier() and rank 1 did not",
    save_barrier_only_on_readers: "rank 1 called dist.barrier() and rank 0 did not",
    save_the_module_itself: "saved the module itself (a Sequential)",
    save_only_on_rank_one: "only rank 1 saved",
    save_one_file_per_rank: "each rank saved a file of its own (trained.pt.0, trained.pt.1)",
    save_with_dcp: "you saved with dcp.save",
    save_then_sleep: "rank 1 waited with time.sleep (3 s in all)",
    save_then_poll: "rank 1 polled for the file",
    save_barrier_first: "the barrier came before rank 0's save",
    save_to_another_name: "rank 0 saved to 'model.pt', not to `path`",
    save_nested: "the file holds ['model']",
    save_that_raises: "on rank 0 your function raised `ValueError: disk full`",
    save_with_a_notebook_name: "gives it only the names the lab lists",
}


#: The wrong answers judged by whether rank 1 found the finished file: only these need a slow save.
FOUND_NO_FILE = (save_without_barrier, save_barrier_first, save_async_barrier_never_awaited)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One real launch for the whole table.

    Rank 0's save sleeps 1 s for the answers whose verdict is "rank 1 found no finished
    file" (a reader that does not wait at a barrier then finds none) and 0.1 s for the others,
    whose verdicts cannot depend on it: the right ones' rank 1 waits at the barrier however
    long the save takes, and the other wrong ones are judged on what the ranks called (saves,
    barriers, sleeps, polls), before the check looks for the file.
    The barrier's grace is 1 s, not 2: the two one-sided barriers wait it out, and a right
    answer's rank 0 reaches its barrier a fraction of a second after its 0.1 s save. Also
    yields what the ranks printed, for the test of one answer alone.
    """
    folder = tmp_path_factory.mktemp("lab09")
    answers = [*RIGHT_SAVES, *WRONG_SAVES]
    slow_s = [1.0 if answer in FOUND_NO_FILE else 0.1 for answer in answers]
    printed = {}

    def run_workers(*args, **kwargs):
        printed.update(real_run_workers(*args, **kwargs))
        return printed

    real_run_workers, started = processes.run_workers, time.monotonic()
    with mock.patch.object(processes, "run_workers", run_workers), \
            mock.patch.object(processes, "BARRIER_GRACE_S", 1.0):
        verdicts = checks.judge_saves(answers, folder=str(folder), slow_s=slow_s, timeout_s=240)
    print(f"one launch, {len(answers)} answers: {time.monotonic() - started:.1f} s")
    return folder, dict(zip([a.__name__ for a in answers], verdicts, strict=True)), printed, answers


@pytest.mark.parametrize("name", [answer.__name__ for answer in RIGHT_SAVES])
def test_save_on_rank_zero_passes_however_written(judged, name):
    _status(judged[1][name], checks.PASSED)


@pytest.mark.parametrize(("name", "phrase"), [(a.__name__, p) for a, p in WRONG_SAVES.items()])
def test_save_on_rank_zero_names_each_mistake(judged, name, phrase):
    feedback = assert_one_line(_status(judged[1][name], checks.FAILED, phrase))
    assert [v.message for v in judged[1].values()].count(feedback.message) == 1


def test_save_on_rank_zero_passes_alone_and_praises_a_barrier_only_when_there_is_one(judged,
                                                                                     tmp_path):
    # the launch of this one answer is the table's, which ran it for real: replayed here
    _, _, printed, answers = judged
    index = answers.index(save_module_state_dict)

    def replay(folder, functions, *args, **kwargs):
        assert folder == tmp_path and functions == [save_module_state_dict]
        found = [json.loads(line.removeprefix("RESULT ")) for out in printed.values()
                 for line in out.splitlines() if line.startswith("RESULT ")]
        return {r["rank"]: "RESULT " + json.dumps({**r, "candidate": 0})
                for r in found if r["candidate"] == index}

    with mock.patch.object(processes, "run_workers", replay):
        _status(checks.check_save_on_rank_zero(save_module_state_dict, folder=str(tmp_path)),
                checks.PASSED, "one writer in all (rank 0)", "a barrier that every rank reaches")


def test_a_launch_that_never_ends_is_stopped_with_a_message(tmp_path):
    def save_waits_for_ever(ddp, path):
        while True:
            time.sleep(0.1)

    feedback = checks.judge_saves([save_waits_for_ever], folder=str(tmp_path), slow_s=0.1,
                                 timeout_s=5)[0]
    assert_one_line(_status(feedback, checks.FAILED, "still running after 5 s"))


def test_save_on_rank_zero_stub_is_not_attempted_without_starting_processes(tmp_path):
    def save_on_rank_zero(ddp, path):
        # YOUR CODE HERE
        raise NotImplementedError()

    started = time.monotonic()
    _status(checks.check_save_on_rank_zero(save_on_rank_zero, folder=str(tmp_path)),
            checks.NOT_ATTEMPTED)
    assert time.monotonic() - started < 1.0 and not (tmp_path / "lab_worker.py").exists()


def test_is_unattempted_sees_only_the_bare_stub():
    def started(ddp, path):
        print("saving")
        raise NotImplementedError()

    assert is_unattempted(stub) and not is_unattempted(started)


def test_a_collective_on_one_rank_only_is_named_after_the_time_limit(tmp_path):
    def save_all_reduce_on_rank_zero(ddp, path):
        if dist.get_rank() == 0:
            torch.save(ddp.module.state_dict(), path)
            dist.all_reduce(torch.zeros(1))  # rank 1 never joins

    feedback = checks.judge_saves([save_all_reduce_on_rank_zero], folder=str(tmp_path),
                                 slow_s=0.1, collective_s=2)[0]
    assert_one_line(_status(feedback, checks.FAILED, "called on some ranks and not the others"))
