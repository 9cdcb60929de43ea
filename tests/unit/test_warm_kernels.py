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
