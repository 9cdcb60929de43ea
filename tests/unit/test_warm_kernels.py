"""A warm kernel (tests/plugins/warm_kernels.py) sees what a freshly started one sees.

nbval's kernels are forked from a zygote that imported torch already. These tests start one
kernel each way through nbval's own kernel start and compare what a notebook could observe:
its working folder, ``sys.path``, ``sys.argv``, environment, parent process handling, signal
handlers, thread count; and that an interrupt reaches it, that its random draws are its own,
and that a kernel whose environment differs is started fresh instead.
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from tests.plugins import warm_kernels

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="Linux only")
ROOT = Path(__file__).resolve().parents[2]

LOOK = """
import os, signal, sys, threading
import numpy
from ipykernel.kernelapp import IPKernelApp
seen = {
    "cwd": os.getcwd(), "path": sys.path, "argv": sys.argv,
    "env": sorted(os.environ.items()),
    "parent_handle": IPKernelApp.instance().parent_handle,
    "own_group": os.getpgid(0) == os.getpid(),
    "signals": {n: repr(signal.getsignal(getattr(signal, n)))
                for n in ("SIGINT", "SIGTERM", "SIGCHLD", "SIGHUP", "SIGPIPE", "SIGUSR1")},
    "threads": sorted(t.name for t in threading.enumerate()  # ipykernel's, by name; not
                      if not t.name.startswith(("Thread-", "asyncio_",  # helper threads
                                                "ThreadPoolExecutor-"))),  # that come and go
    "draw": int(numpy.random.randint(0, 2**31)),
    "main": sys.modules["__main__"].__class__.__name__,
}
"""


def _start(warm: bool):
    import ipykernel.kernelspec
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME, start_new_kernel

    patched = ipykernel.kernelspec.get_kernel_dict
    original = warm_kernels._fresh_kernel_dict or patched  # nbval's own command
    ipykernel.kernelspec.get_kernel_dict = original
    if warm:
        assert warm_kernels._start_zygote()
        ipykernel.kernelspec.get_kernel_dict = lambda *a, **k: {
            **original(*a, **k), "argv": warm_kernels.kernel_argv(original(*a, **k)["argv"])}
    try:
        return start_new_kernel(kernel_name=CURRENT_ENV_KERNEL_NAME, cwd=str(ROOT / "notebooks"))
    finally:
        ipykernel.kernelspec.get_kernel_dict = patched


def _look(client) -> dict:
    reply = client.execute_interactive(LOOK, user_expressions={"seen": "seen"}, timeout=60,
                                       output_hook=lambda message: None)
    return ast.literal_eval(reply["content"]["user_expressions"]["seen"]["data"]["text/plain"])


def _pid(client) -> int:
    reply = client.execute_interactive("", user_expressions={"pid": "__import__('os').getpid()"},
                                       timeout=60)
    return int(reply["content"]["user_expressions"]["pid"]["data"]["text/plain"])


@pytest.fixture(scope="module")
def kernels():
    assert warm_kernels._start_zygote()  # first: the fresh kernel's environment is the same
    started = {}
    for name, warm in (("fresh", False), ("warm", True), ("warm again", True)):
        started[name] = _start(warm)
    yield started
    for manager, client in started.values():
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_warm_kernel_is_forked_from_the_zygote(kernels):
    zygote = warm_kernels._zygote.pid
    for name in ("warm", "warm again"):
        pid = _pid(kernels[name][1])
        assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) == zygote
    fresh = _pid(kernels["fresh"][1])
    assert fresh == kernels["fresh"][0].provisioner.process.pid  # the command nbval started


def test_a_warm_kernel_sees_what_a_fresh_one_sees(kernels):
    fresh, warm = _look(kernels["fresh"][1]), _look(kernels["warm"][1])
    for seen in (fresh, warm):
        seen.pop("draw")
        seen["argv"][-1] = "CONNECTION_FILE"  # each kernel has its own
    differs = {key: {"warm": value, "fresh": fresh[key]} for key, value in warm.items()
               if fresh[key] != value}
    if "env" in differs:  # only the variables that differ
        warm_env, fresh_env = dict(warm["env"]), dict(fresh["env"])
        differs["env"] = {name: (warm_env.get(name), fresh_env.get(name))
                          for name in set(warm_env) | set(fresh_env)
                          if warm_env.get(name) != fresh_env.get(name)}
    assert differs == {}


def test_each_warm_kernel_draws_its_own_random_numbers(kernels):
    draws = {_look(kernels[name][1])["draw"] for name in ("warm", "warm again")}
    assert len(draws) == 2


def test_an_interrupt_reaches_a_warm_kernel(kernels):
    manager, client = kernels["warm"]
    message = client.execute("import time; time.sleep(60)")
    time.sleep(1)
    started = time.perf_counter()
    manager.interrupt_kernel()
    while True:
        reply = client.get_shell_msg(timeout=30)
        if reply["parent_header"].get("msg_id") == message:
            break
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    assert time.perf_counter() - started < 10


def test_a_kernel_with_another_environment_starts_fresh(kernels, monkeypatch):
    monkeypatch.setenv("LESSONS_SOMETHING_NEW", "1")  # the zygote did not see it
    manager, client = _start(warm=True)
    try:
        pid = _pid(client)
        assert pid == manager.provisioner.process.pid  # the client exec'd the fresh kernel
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_killed_client_takes_its_kernel_with_it(kernels):
    manager, client = _start(warm=True)
    pid = _pid(client)
    client.stop_channels()
    manager.shutdown_kernel(now=True)  # SIGKILL to the client's group, as jupyter_client does
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()


def test_a_signal_ignored_by_the_starter_is_ignored_by_a_warm_kernel_too(kernels):
    import signal

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under `nohup make test`
    started = []
    try:
        started = [_start(warm) for warm in (False, True)]
        fresh, warm = (_look(client)["signals"] for _, client in started)
    finally:
        signal.signal(signal.SIGHUP, before)
        for manager, client in started:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    assert fresh["SIGHUP"] == "<Handlers.SIG_IGN: 1>"
    assert warm == fresh


# --- launches: torchrun and its workers, forked the same way -----------------------------

PROBE = """
import json, os, signal, sys, warnings
import torch
print(json.dumps({
    "name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0],
    "cwd": os.getcwd(), "rank": os.environ.get("RANK"), "threads": torch.get_num_threads(),
    "own_group": os.getpgid(0) == os.getpid(),
    "stdout": [sys.stdout.write_through, sys.stdout.line_buffering, sys.stdout.encoding],
    "stderr": [sys.stderr.write_through, sys.stderr.line_buffering, sys.stderr.errors],
    "signals": {n: repr(signal.getsignal(getattr(signal, n))) for n in ("SIGINT", "SIGTERM")},
    "warnings": [repr(f) for f in warnings.filters if "sympy" not in f[2].__module__],
    "main": type(sys.modules["__main__"]).__name__,
}))
"""
# (The zygote imported torch.distributed.checkpoint and with it sympy, which adds a filter for
# sympy's own warning class: that one filter is left out of the comparison.)


def _python(tmp_path, source: str, *args: str, warm: bool, env: dict | None = None):
    """Run ``python -u probe.py ARGS`` (in tmp_path) fresh, or through PYTHON_EXEC; return
    (completed process, the zygote's reply: {"pid": its child's} or {"pid": None, "why": ...})."""
    import subprocess
    import sys

    (tmp_path / "probe.py").write_text(source)
    python = os.environ["PYTHON_EXEC"] if warm else sys.executable
    environment = {**os.environ, "LESSONS_WARM_KERNELS_DEBUG": "1", **(env or {})}
    done = subprocess.run([python, "-u", "probe.py", *args], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=60, start_new_session=True)
    said = [line for line in done.stderr.splitlines() if line.startswith("warm_kernels: ")]
    done.stderr = "\n".join(line for line in done.stderr.splitlines() if line not in said)
    return done, ast.literal_eval(said[0].split(": ", 1)[1]) if said else {}


@pytest.fixture()
def zygote():
    assert warm_kernels._start_zygote()
    return warm_kernels._zygote.pid


def test_a_warm_script_sees_what_a_fresh_python_sees(zygote, tmp_path):
    import json

    env = {"OMP_NUM_THREADS": "1", "RANK": "3"}  # as torchrun sets them for a worker
    fresh, _ = _python(tmp_path, PROBE, "a", "b c", warm=False, env=env)
    warm, reply = _python(tmp_path, PROBE, "a", "b c", warm=True, env=env)
    assert reply.get("pid"), reply  # forked, not started fresh
    assert json.loads(warm.stdout) == json.loads(fresh.stdout)
    assert json.loads(warm.stdout)["threads"] == 1


@pytest.mark.parametrize("ending, status", [
    ("raise ValueError('no')", 1), ("import sys; sys.exit(3)", 3),
    ("import sys; sys.exit('a message')", 1), ("import os; os.kill(os.getpid(), 15)", -15),
])
def test_a_warm_script_ends_as_a_fresh_one_does(zygote, tmp_path, ending, status):
    source = f"print('before', flush=True)\n{ending}\n"
    fresh, _ = _python(tmp_path, source, warm=False)
    warm, reply = _python(tmp_path, source, warm=True)
    assert reply.get("pid"), reply
    assert (warm.returncode, warm.stdout, warm.stderr) == (status, fresh.stdout, fresh.stderr)
    assert fresh.returncode == status


def test_a_script_with_another_environment_starts_fresh(zygote, tmp_path):
    source = "import os\nprint(os.environ['LESSONS_SOMETHING_NEW'])\n"
    warm, reply = _python(tmp_path, source, warm=True, env={"LESSONS_SOMETHING_NEW": "1"})
    assert reply["pid"] is None
    assert reply["why"].startswith("different environment: LESSONS_SOMETHING_NEW")
    assert (warm.returncode, warm.stdout) == (0, "1\n")  # run all the same, by a fresh Python


def test_a_script_with_another_inductor_cache_starts_fresh(zygote, tmp_path):
    """The zygote imported torch._dynamo, which keeps its cache folder: a script that names
    another one gets a fresh Python; one that names the same folder is forked."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    source = "import torch._dynamo.package as p\nprint(p.DynamoCache._path_prefix)\n"
    other = str(tmp_path / "inductor")
    warm, reply = _python(tmp_path, source, warm=True, env={"TORCHINDUCTOR_CACHE_DIR": other})
    assert reply["pid"] is None and reply["why"].startswith("TORCHINDUCTOR_CACHE_DIR")
    assert warm.stdout.startswith(other)
    same = {"TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            or default_cache_dir()}  # the folder the zygote's import kept
    _, reply = _python(tmp_path, source, warm=True, env=same)
    assert reply.get("pid"), reply


def test_a_killed_launch_takes_the_workers_it_started_with_it(zygote, tmp_path):
    """utils.torchrun's time limit kills torchrun (here, its client): the workers go too."""
    import psutil

    import utils

    (tmp_path / "hangs.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    before = {child.pid for child in psutil.Process(zygote).children()}
    with pytest.raises(TimeoutError):
        utils.torchrun(tmp_path / "hangs.py", nproc=2, timeout_s=5, quiet=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = {child.pid for child in psutil.Process(zygote).children()} - before
        clients = [process.pid for process in psutil.process_iter(["cmdline"])
                   if "hangs.py" in " ".join(process.info["cmdline"] or [])]
        if not left and not clients:
            break
        time.sleep(0.1)
    assert (left, clients) == (set(), [])
