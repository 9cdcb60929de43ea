"""utils.distributed: the worker preamble and the torchrun launcher (real launches, gloo).

Two real launches: one where a rank fails (its output order, and the failing rank's
traceback named first), one that hangs (the timeout stops every process). The
successful path runs in notebooks 09 and 10 under nbval, seven launches with asserts.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

import utils
from utils import distributed

TORCHRUN_ENV = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "MASTER_ADDR": "localhost",
                "MASTER_PORT": "29500"}


def test_process_group_outside_torchrun_says_how_to_launch(monkeypatch):
    for name in distributed.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="torchrun --standalone --nproc_per_node=2"):
        with distributed.process_group():
            pass


def test_backend_and_device_is_gloo_and_the_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.backend_and_device(1) == ("gloo", torch.device("cpu"))


class _FakeCuda:
    """Two GPUs that record set_device calls."""

    def __init__(self, monkeypatch, count=2):
        self.set_to = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.cuda, "set_device", self.set_to.append)


def test_backend_and_device_sets_the_local_rank_gpu_before_returning_it(monkeypatch):
    monkeypatch.delenv("LESSONS_DEVICE", raising=False)
    cuda = _FakeCuda(monkeypatch)
    assert distributed.backend_and_device(1) == ("nccl", torch.device("cuda", 1))
    assert cuda.set_to == [1]


def test_lessons_device_cpu_forces_gloo_even_with_gpus(monkeypatch):
    monkeypatch.setenv("LESSONS_DEVICE", "cpu")
    cuda = _FakeCuda(monkeypatch)
    assert distributed.backend_and_device(0) == ("gloo", torch.device("cpu"))
    assert cuda.set_to == []


def test_fewer_gpus_than_local_processes_fall_back_to_gloo_and_the_cpu(monkeypatch):
    monkeypatch.delenv("LESSONS_DEVICE", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    cuda = _FakeCuda(monkeypatch, count=1)  # Colab: one GPU, two processes
    assert distributed.backend_and_device(1) == ("gloo", torch.device("cpu"))
    assert cuda.set_to == []


def test_a_local_rank_beyond_the_visible_gpus_names_nproc_per_node(monkeypatch):
    monkeypatch.delenv("LESSONS_DEVICE", raising=False)
    _FakeCuda(monkeypatch, count=2)
    with pytest.raises(RuntimeError, match="LOCAL_RANK is 2.*--nproc_per_node=2"):
        distributed.backend_and_device(2)


def test_torchrun_refuses_a_missing_script(tmp_path):
    with pytest.raises(FileNotFoundError, match="write it first"):
        utils.torchrun(tmp_path / "nothing.py")


def test_child_stderr_collects_what_a_child_process_writes_to_stderr():
    import subprocess
    import sys

    with distributed.child_stderr() as said:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from the child')"])
    assert said.getvalue() == "from the child"


FAILING = """\
import os; import torch.distributed as dist
from utils.distributed import process_group
assert int(os.environ["MASTER_PORT"]) > 0  # torchrun sets a real port (notebook 09 says so)
with process_group(timeout_s=30) as me:
    print(f"hello from rank {me.rank} of {me.world_size} on {me.backend}", flush=True)
    dist.barrier()  # both have printed before rank 1 gives up (else rank 0 may be killed first)
    if me.rank == 1:
        raise ValueError("rank 1 gives up")
    dist.barrier()
"""


def test_a_failing_rank_is_named_first_with_its_traceback_and_output_stays_in_rank_order(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fails.py").write_text(FAILING)
    with pytest.raises(utils.WorkerFailed) as failure:
        utils.torchrun("fails.py", nproc=2, timeout_s=120)
    message = str(failure.value)
    assert message.startswith("fails.py: rank 1 failed:\nTraceback")
    assert "ValueError: rank 1 gives up" in message and 'File "fails.py", line 8' in message
    # Rank 0 either raises at its barrier once rank 1 is gone (named as a consequence) or, on a
    # busy machine, is stopped by torchrun before it does (then it has no traceback to name).
    rank_0 = [line for line in message.splitlines() if "rank 0" in line]
    assert all("rank 0 then failed too, because a partner had gone" in line for line in rank_0)
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["$ torchrun --standalone --nproc_per_node=2 fails.py",
                       "[rank 0] hello from rank 0 of 2 on gloo",
                       "[rank 1] hello from rank 1 of 2 on gloo"]


HANGING = """\
import time
import torch.distributed as dist
from utils.distributed import process_group

with process_group(timeout_s=600) as me:
    print("started", flush=True)
    if me.rank == 0:
        dist.barrier()  # rank 1 never comes
    time.sleep(600)
"""


def _running(script_name: str) -> list[int]:
    import psutil

    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(script_name in part for part in process.info["cmdline"] or []):
            found.append(process.pid)
    return found


def test_a_hanging_launch_is_stopped_at_the_timeout_with_every_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # utils' own clean-up, of processes started fresh (the tests' warm launches are cleaned up
    # by their zygote: tests/unit/test_warm_kernels.py).
    monkeypatch.delenv("PYTHON_EXEC", raising=False)
    script = f"hangs_{os.getpid()}.py"
    (tmp_path / script).write_text(HANGING)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="was still running after 5 s"):
        utils.torchrun(script, nproc=2, timeout_s=5, quiet=True)
    assert time.monotonic() - started < 5 + 10
    assert _running(script) == [], "torchrun or a worker survived the timeout"


SPAWNS_A_CHILD = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
time.sleep(600)
"""


def test_stopping_a_launch_returns_once_it_and_the_processes_it_started_are_gone():
    import subprocess
    import sys

    import psutil

    launcher = subprocess.Popen([sys.executable, "-c", SPAWNS_A_CHILD])
    deadline = time.monotonic() + 30
    while not distributed._descendants(launcher.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = distributed._descendants(launcher.pid)
    assert children, "the child never started"
    distributed._stop(launcher)
    assert launcher.returncode is not None
    for pid in children:  # in a session of its own, as torchrun's workers are: killed too
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
