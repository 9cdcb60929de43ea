"""labchecks, lab 08: right answers pass however written, each known wrong answer gets its
own diagnosis, and an untouched stub is "not attempted" without starting any process.

Exercise 3 is judged from a real 2-process launch; the whole table of exercise 3 answers
runs in one launch (lab08.judge_saves), which also writes the sharded checkpoint that
exercise 4's table loads.
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from lab_checks import assert_feedback as _status
from lab_checks import stub
from torch.distributed.checkpoint.state_dict import get_model_state_dict

import labchecks as checks
import utils
from labchecks import lab08

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


@pytest.mark.parametrize("answer", [setup_plain, setup_strings, setup_with_utils,
                                    setup_keyword_device, setup_backend_first,
                                    setup_string_device])
def test_setup_device_passes_however_written(answer):
    _status(checks.check_setup_device(answer), checks.PASSED)


@pytest.mark.parametrize(("answer", "phrase"), [
    (setup_global_rank, "the GPU index on this machine is LOCAL_RANK"),
    (setup_without_set_device, "set_device(local_rank) was not called"),
    (setup_touches_cuda_first, "torch.cuda.manual_seed() ran before set_device"),
    (setup_asks_current_device_first, "torch.cuda.current_device() ran before set_device"),
    (setup_gloo_on_gpus, "the GPU backend is 'nccl'"),
    (setup_always_cpu, "Use 'cuda:LOCAL_RANK'"),
])
def test_setup_device_names_each_mistake(answer, phrase):
    _status(checks.check_setup_device(answer), checks.FAILED, phrase)


def test_setup_device_stub_is_not_attempted():
    _status(checks.check_setup_device(stub), checks.NOT_ATTEMPTED)


# --- exercise 2: load_for_this_rank ---------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    lambda path, device: torch.load(path, map_location=device),
    lambda path, device: torch.load(path, map_location=str(device), weights_only=True),
    lambda path, device: torch.load(path, map_location="cpu"),
    lambda path, device: torch.load(path, map_location={"cuda:0": str(device)}),
    lambda path, device: torch.load(path, weights_only=True, map_location=torch.device(device)),
    lambda path, device: torch.load(open(path, "rb"), map_location=device),  # noqa: SIM115
    lambda path, device: torch.load(path, map_location=lambda s, tag: s.to(device=device)),
], ids=["device", "string", "cpu", "dict", "keywords-first", "file-object", "callable"])
def test_rank_aware_load_passes_however_written(answer, tmp_path):
    _status(checks.check_rank_aware_load(answer, folder=tmp_path), checks.PASSED)


@pytest.mark.parametrize(("answer", "phrase"), [
    (lambda path, device: torch.load(path), "with no map_location"),
    (lambda path, device: torch.load(path, map_location="cuda:0"), "map_location='cuda:0'"),
    (lambda path, device: torch.load(path, map_location=f"cuda:{os.environ['RANK']}"),
     "cuda:RANK (cuda:5)"),
    (lambda path, device: torch.load(path, map_location=device, weights_only=False),
     "weights_only=False runs any code"),
    (lambda path, device: torch.load(path, map_location=device)["model"],
     "return the whole loaded checkpoint"),
], ids=["no-map-location", "gpu-0", "global-rank", "unsafe", "only-model"])
def test_rank_aware_load_names_each_mistake(answer, phrase, tmp_path):
    _status(checks.check_rank_aware_load(answer, folder=tmp_path), checks.FAILED, phrase)


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


RIGHT_SAVES = [save_module_state_dict, save_with_get_model_state_dict, save_if_not_rank,
               save_prefix_consumed, save_prefix_removed, save_with_barrier_in_finally]


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One real launch for the whole table; also leaves the sharded checkpoint.

    Rank 0's save sleeps 1 s for the wrong answers (a reader that does not wait at a barrier
    then finds no file) and 0.1 s for the right ones, whose verdict cannot depend on it: their
    rank 1 waits at the barrier however long the save takes.
    """
    folder = tmp_path_factory.mktemp("lab08")
    answers = [*RIGHT_SAVES, save_on_every_rank, save_wrapper_keys, save_without_barrier]
    slow_s = [0.1 if answer in RIGHT_SAVES else 1.0 for answer in answers]
    started = time.monotonic()
    verdicts = lab08.judge_saves(answers, folder=str(folder), slow_s=slow_s)
    print(f"one launch, {len(answers)} answers: {time.monotonic() - started:.1f} s")
    return folder, dict(zip([a.__name__ for a in answers], verdicts, strict=True))


@pytest.mark.parametrize("name", [answer.__name__ for answer in RIGHT_SAVES])
def test_save_on_rank_zero_passes_however_written(judged, name):
    _status(judged[1][name], checks.PASSED)


@pytest.mark.parametrize(("name", "phrase"), [
    ("save_on_every_rank", "ranks [0, 1] all saved to the same path"),
    ("save_wrapper_keys", "start with 'module.'"),
    ("save_without_barrier", "before rank 0 had finished writing"),
])
def test_save_on_rank_zero_names_each_mistake(judged, name, phrase):
    _status(judged[1][name], checks.FAILED, phrase)


def test_save_on_rank_zero_stub_is_not_attempted_without_starting_processes(tmp_path):
    def save_on_rank_zero(ddp, path):
        # YOUR CODE HERE
        raise NotImplementedError()

    started = time.monotonic()
    _status(checks.check_save_on_rank_zero(save_on_rank_zero, folder=str(tmp_path)),
            checks.NOT_ATTEMPTED)
    assert time.monotonic() - started < 1.0 and not (tmp_path / "lab08_worker.py").exists()


# --- exercise 4: load_sharded ---------------------------------------------------------------------


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


def load_forgets_to_copy(folder, model):
    state = {"model": {k: v.clone() for k, v in model.state_dict().items()}}
    dcp.load(state, checkpoint_id=folder)


@pytest.mark.parametrize("answer", [load_in_place, load_via_conversion, load_into_live_tensors,
                                    load_with_reader, load_with_state_dict_helpers,
                                    load_via_temporary_file])
def test_load_sharded_passes_however_written(judged, answer):
    _status(checks.check_load_sharded(answer, folder=str(judged[0])), checks.PASSED)


@pytest.mark.parametrize(("answer", "phrase"), [
    (lambda folder, model: model.load_state_dict(torch.load(folder)),
     "a DCP checkpoint is a folder"),
    (lambda folder, model: dcp.load(model.state_dict(), checkpoint_id=folder),
     "start with 'model.'"),
    (load_forgets_to_copy, "dcp.load fills the tensors of the state dict you pass"),
], ids=["torch-load", "no-model-key", "no-copy"])
def test_load_sharded_names_each_mistake(judged, answer, phrase):
    _status(checks.check_load_sharded(answer, folder=str(judged[0])), checks.FAILED, phrase)


def test_load_sharded_stub_is_not_attempted(tmp_path):
    _status(checks.check_load_sharded(stub, folder=str(tmp_path)), checks.NOT_ATTEMPTED)
    assert not (tmp_path / "sharded").exists()


def test_is_unattempted_sees_only_the_bare_stub():
    def started(ddp, path):
        print("saving")
        raise NotImplementedError()

    assert lab08.is_unattempted(stub) and not lab08.is_unattempted(started)
