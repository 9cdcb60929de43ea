"""Warm kernels for nbval: each notebook's kernel is forked from a process that imported torch.

Every notebook and lab starts a fresh kernel, and each fresh kernel spent about 3 s of CPU on
``import torch`` and ipykernel before its first cell: a quarter of `make test`'s CPU on two
cores (docs/runs.md, "Time and memory"). Here each pytest process starts one *zygote* (this
file, run as ``serve``) that imports them once; nbval's kernel command becomes this file as a
small client, which asks the zygote to fork, and the forked child runs
``python -m ipykernel_launcher`` exactly as the fresh kernel would: same arguments, working
folder, environment, ``sys.path[0]``, stdio and ignored signals, in a session of its own. The
kernel is as real as before; only its imports were done earlier.

A kernel is forked only where that changes nothing it could see: the client's environment equals
the zygote's (apart from the variables in :data:`PER_KERNEL`), it runs the same Python, and it is
in the same namespaces (the offline test cuts the network in a namespace of its own: its
nested pytest gets a zygote of its own there). Otherwise, or when the zygote cannot be reached,
the client execs the ordinary kernel command instead. The client forwards signals (nbval's
interrupt reaches the kernel and what it started, as with killpg) and exits with the kernel's
status; the zygote kills a kernel whose client died, and everything when pytest ends.

``LESSONS_WARM_KERNELS=0`` turns it off (every kernel starts fresh, as before);
``LESSONS_WARM_KERNELS_DEBUG=1`` makes each client say on stderr why its kernel was or was not
forked.
tests/unit/test_warm_kernels.py shows what a warm kernel sees.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

SOCKET_VAR = "LESSONS_KERNEL_ZYGOTE"
SWITCH_VAR = "LESSONS_WARM_KERNELS"
#: Set by jupyter_client (or pytest) for each kernel; nothing imported earlier reads them.
PER_KERNEL = {"JPY_PARENT_PID", "JPY_SESSION_NAME", "PYTEST_CURRENT_TEST",
              "PYDEVD_DISABLE_FILE_VALIDATION"}
NAMESPACES = ("net", "mnt", "user", "pid")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
             signal.SIGUSR1, signal.SIGUSR2)
#: Signals whose disposition a kernel inherits: ignored ones stay ignored across exec (`nohup`
#: ignores SIGHUP for everything it starts), the others start at their default.
INHERITED = (*FORWARDED, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGALRM,
             signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)


def kernel_argv(original: list[str]) -> list[str]:
    """The kernel command to run instead: this file as a client, then the original command."""
    return [sys.executable, os.path.abspath(__file__), "--", *original]


def _namespaces() -> dict[str, str]:
    found = {}
    for name in NAMESPACES:
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            found[name] = ""
    return found


def _send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        socket.send_fds(conn, [data], fds)
    else:
        conn.sendall(data)


def _lines(conn: socket.socket):
    """Yield the JSON messages that arrive on ``conn``, one per line, until it closes."""
    buffered = b""
    while True:
        chunk = conn.recv(65536)  # retried by Python when a forwarded signal interrupts it
        if not chunk:
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            yield json.loads(line)


# --- in pytest: start the zygote, point nbval at the client -------------------------------

_zygote = None
_fresh_kernel_dict = None  # nbval's own kernel command, kept for tests/unit/test_warm_kernels.py


def pytest_configure(config):
    """Make nbval's kernel command the client (the zygote starts with the first kernel)."""
    if os.environ.get(SWITCH_VAR, "1") == "0" or not hasattr(os, "pidfd_open"):
        return
    import ipykernel.kernelspec

    global _fresh_kernel_dict
    original = _fresh_kernel_dict = ipykernel.kernelspec.get_kernel_dict

    def warm_kernel_dict(*args, **kwargs):
        spec = original(*args, **kwargs)
        if _start_zygote():
            spec["argv"] = kernel_argv(spec["argv"])
        return spec

    ipykernel.kernelspec.get_kernel_dict = warm_kernel_dict


def pytest_unconfigure(config):
    if _zygote is not None:
        _zygote.terminate()
        _zygote.wait(timeout=30)


def _start_zygote() -> bool:
    """Start this process's zygote once; False if it did not come up (kernels start fresh)."""
    global _zygote
    if _zygote is not None:
        return _zygote.poll() is None
    import subprocess
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="warm-kernels-"), "zygote")
    os.environ[SOCKET_VAR] = path  # before the zygote starts: its environment is the kernels'
    _zygote = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve", path,
                                str(os.getpid())], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, env=dict(os.environ))
    # (env given: without it the zygote inherits the C-level environment, where readline, once
    # loaded, sets COLUMNS and LINES behind os.environ's back; kernels get os.environ's copy.)
    if _zygote.stdout.readline().strip() == b"ready":
        return True
    del os.environ[SOCKET_VAR]
    return False


# --- the client: nbval's kernel command ----------------------------------------------------

def client(original: list[str]) -> None:
    """Ask the zygote for a kernel; exec ``original`` where it cannot give one. Never returns."""
    path = os.environ.get(SOCKET_VAR, "")
    pid = None
    if path:
        try:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(path)
            ignored = [int(signum) for signum in INHERITED
                       if signal.getsignal(signum) == signal.SIG_IGN]
            _send(conn, {"argv": original, "cwd": os.getcwd(), "env": dict(os.environ),
                         "namespaces": _namespaces(), "ignored": ignored}, fds=[0, 1, 2])
            replies = _lines(conn)
            reply = next(replies)
            pid = reply.get("pid")
            if os.environ.get("LESSONS_WARM_KERNELS_DEBUG"):
                print(f"warm_kernels: {reply}", file=sys.stderr, flush=True)
        except (OSError, StopIteration, ValueError) as error:
            if os.environ.get("LESSONS_WARM_KERNELS_DEBUG"):
                print(f"warm_kernels: {error!r}", file=sys.stderr, flush=True)
            pid = None
    if pid is None:
        os.execv(original[0], original)  # the ordinary kernel, as if we had never been here

    def forward(signum, _frame):
        try:
            os.killpg(pid, signum)  # the kernel leads its own group, as this process did
        except OSError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    status = 1
    for message in replies:
        if "exit" in message:
            status = message["exit"]
            break
    if status < 0:  # killed by a signal: die of the same one
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


# --- the zygote ----------------------------------------------------------------------------

def serve(path: str, parent: int) -> None:
    """Import what every kernel imports, then fork a kernel per client until ``parent`` ends."""
    import selectors

    # What every kernel imports, about 2.5 s of CPU, once. Not ipykernel itself: its app reads
    # JPY_PARENT_PID, which differs per kernel, when it is imported.
    import IPython  # noqa: F401
    import jupyter_client  # noqa: F401
    import torch  # noqa: F401
    import tornado  # noqa: F401
    import zmq  # noqa: F401

    early = {"matplotlib", "ipykernel", "debugpy"} & set(sys.modules)
    assert not early, f"{early} read per-kernel variables (MPLBACKEND, ...) on import: not here"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so that the kernels go with it
    environment, spaces = dict(os.environ), _namespaces()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(os.pidfd_open(parent), selectors.EVENT_READ, "parent")
    kernels: dict[int, tuple[socket.socket, int]] = {}  # pid -> (client, pidfd)
    print("ready", flush=True)

    def end(pid: int) -> None:
        conn, pidfd = kernels.pop(pid)
        selector.unregister(pidfd)
        selector.unregister(conn)
        os.close(pidfd)
        conn.close()

    try:
        while True:
            for key, _ in selector.select():
                what = key.data
                if what == "parent":
                    return
                if what == "listener":
                    conn, _ = listener.accept()
                    pid = _fork_kernel(conn, listener, environment, spaces)
                    if pid is None:
                        conn.close()
                        continue
                    pidfd = os.pidfd_open(pid)
                    kernels[pid] = (conn, pidfd)
                    selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
                    selector.register(conn, selectors.EVENT_READ, ("client", pid))
                elif what[0] == "exited":
                    pid = what[1]
                    _, status = os.waitpid(pid, 0)
                    code = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                            else os.WEXITSTATUS(status))
                    try:
                        _send(kernels[pid][0], {"exit": code})
                    except OSError:
                        pass
                    end(pid)
                elif what[0] == "client":  # the client went away (killed): so does its kernel
                    pid = what[1]
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                    os.waitpid(pid, 0)
                    end(pid)
    finally:
        for pid in list(kernels):
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _fork_kernel(conn, listener, environment, spaces) -> int | None:
    """Fork a kernel for the request on ``conn``; return its pid, or None (told to the client)."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    request = json.loads(data)
    env = request["env"]
    differs = sorted(name for name in set(env) | set(environment)
                     if name not in PER_KERNEL and env.get(name) != environment.get(name))
    argv = request["argv"]
    why = ("different environment: " + ", ".join(differs) if differs
           else "different namespaces" if request["namespaces"] != spaces
           else "not this Python's ipykernel" if argv[:3] != [sys.executable, "-m",
                                                                "ipykernel_launcher"]
           else "")
    if why or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        if differs and os.environ.get("LESSONS_WARM_KERNELS_DEBUG"):
            why += str({name: (env.get(name), environment.get(name)) for name in differs})
        _send(conn, {"pid": None, "why": why})
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the kernel
        try:
            _become_kernel(conn, listener, fds, request)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid


def _become_kernel(conn, listener, fds, request) -> None:
    """In the forked child: turn into ``python -m ipykernel_launcher ARGS`` run by the client."""
    import atexit
    import runpy

    atexit._clear()  # the zygote's exit handlers are not the kernel's
    signal.set_wakeup_fd(-1)
    for signum in INHERITED:  # as the client's exec left them (Python's own choices included)
        if signum in request["ignored"]:
            signal.signal(signum, signal.SIG_IGN)
        elif signum == signal.SIGINT:
            signal.signal(signum, signal.default_int_handler)
        else:
            signal.signal(signum, signal.SIG_DFL)
    listener.close()
    conn.close()
    os.setsid()  # the kernel and what it starts: one group, signalled as a whole
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # as `python -m` puts it
    if "numpy.random" in sys.modules:  # (torch does not import it today)
        sys.modules["numpy.random"].seed()  # a fresh process draws its own seed
    sys.argv = [request["argv"][0], *request["argv"][3:]]
    code = 0
    try:
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001  (report it as a crashed kernel would)
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[sys.argv.index("--") + 1:])
