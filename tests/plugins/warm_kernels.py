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
forked; ``LESSONS_WARM_KERNELS_DEBUG=/tmp/warm.log`` appends the same lines, one per kernel or
launched process, to that file (what a whole `make test` forked, and what it started fresh).
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
              "PYDEVD_DISABLE_FILE_VALIDATION", "LESSONS_WARM_KERNELS_DEBUG"}
#: Set per process by torchrun for each worker (torch/distributed/elastic/agent/server/
#: local_elastic_agent.py), by utils.torchrun (PYTHONUNBUFFERED, OMP_NUM_THREADS: the fork
#: applies both), by ipykernel in a kernel that launches (TERM, FORCE_COLOR, ...) or by the
#: shell of PYTHON_EXEC (PWD): nothing the zygote imported reads them on import. A script's
#: other variables must equal the zygote's (and :data:`CACHE_VAR` is compared on its own).
PER_LAUNCH = {"LOCAL_RANK", "RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
              "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
              "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
              "TORCHELASTIC_SIGNALS_TO_HANDLE", "PWD",
              "TORCH_NCCL_ASYNC_ERROR_HANDLING", "PYTHONUNBUFFERED", "OMP_NUM_THREADS",
              "TERM", "CLICOLOR", "CLICOLOR_FORCE", "FORCE_COLOR", "PAGER", "GIT_PAGER",
              "MPLBACKEND", "PYDEVD_USE_FRAME_EVAL"}
#: Set by ``import torch._dynamo`` (the inductor's cache folder), which the zygote does: in a
#: kernel's or a script's environment it may be missing (not imported yet) or name the folder
#: the zygote's import kept (:data:`_DYNAMO_CACHE_DIR`); another folder starts it fresh.
CACHE_VAR = "TORCHINDUCTOR_CACHE_DIR"
_DYNAMO_CACHE_DIR: str | None = None
EXEC_VAR = "PYTHON_EXEC"  # torchrun's own name for the Python that runs its workers
FOLDER_PREFIX = "warm-kernels-"
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


def python_wrapper(folder: str) -> str:
    """Write ``folder/python``: an executable that runs this client before ``python ARGS``."""
    import shlex

    path = os.path.join(folder, "python")
    with open(path, "w") as handle:
        handle.write("#!/bin/sh\nexec " + shlex.join([sys.executable, os.path.abspath(__file__),
                                                     "--", sys.executable]) + ' "$@"\n')
    os.chmod(path, 0o755)
    return path


def python_command(argv: list[str]) -> tuple[bool, str, str, list[str]] | None:
    """``[python, -u, script, ARGS]`` or ``[python, -m, module, ARGS]`` as
    (unbuffered, "script" or "module", its name, ARGS); None for any other command line."""
    if not argv or argv[0] != sys.executable:
        return None
    unbuffered, rest = False, argv[1:]
    while rest and rest[0] == "-u":
        unbuffered, rest = True, rest[1:]
    if len(rest) >= 2 and rest[0] == "-m" and rest[1] != "ipykernel_launcher":
        return unbuffered, "module", rest[1], rest[2:]
    if rest and not rest[0].startswith("-"):
        return unbuffered, "script", rest[0], rest[1:]
    return None


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
_folder = ""  # this process's: the zygote's socket, the PYTHON_EXEC wrapper
_ready: bool | None = None  # whether the zygote said "ready" (None: not read yet)
_FRESH_FILTERS: list = []  # the warning filters a script sees (set in the zygote)
_fresh_kernel_dict = None  # nbval's own kernel command, kept for tests/unit/test_warm_kernels.py


def pytest_configure(config):
    """Make nbval's kernel command the client, and PYTHON_EXEC the launches' (the zygote starts
    with the first kernel; in an xdist worker, once the tests are collected)."""
    global _fresh_kernel_dict, _folder
    if _is_ours(os.environ.get(EXEC_VAR, "")):  # an outer pytest's (this may be another Python)
        del os.environ[EXEC_VAR]
    if os.environ.get(SWITCH_VAR, "1") == "0" or not hasattr(os, "pidfd_open"):
        return
    import tempfile

    import ipykernel.kernelspec

    original = _fresh_kernel_dict = ipykernel.kernelspec.get_kernel_dict

    def warm_kernel_dict(*args, **kwargs):
        spec = original(*args, **kwargs)
        if _start_zygote():
            spec["argv"] = kernel_argv(spec["argv"])
        return spec

    ipykernel.kernelspec.get_kernel_dict = warm_kernel_dict
    _folder = tempfile.mkdtemp(prefix=FOLDER_PREFIX)
    # Before the zygote starts: its environment is the kernels' and the launches'.
    os.environ[SOCKET_VAR] = os.path.join(_folder, "zygote")
    if EXEC_VAR not in os.environ:  # (one set by hand is kept: launches then start fresh)
        wrapper = python_wrapper(_folder)
        if _runs(wrapper):  # (not where the temporary folder may not hold programs: noexec)
            os.environ[EXEC_VAR] = wrapper


def pytest_collection_finish(session):
    """In an xdist worker (each runs notebooks or launches), start the zygote now: after the
    test modules' imports, some of which set variables, before the first test needs it."""
    if _folder and os.environ.get("PYTEST_XDIST_WORKER"):
        _start_zygote(wait=False)


def pytest_runtest_setup(item):
    """Have the zygote ready before a test launches (a client that finds none starts fresh)."""
    if _zygote is not None:
        _start_zygote()


def pytest_unconfigure(config):
    if _zygote is not None:
        _zygote.terminate()
        _zygote.wait(timeout=30)
    if _folder:
        import shutil

        shutil.rmtree(_folder, ignore_errors=True)


def _runs(program: str) -> bool:
    """Whether ``program -c pass`` runs (the zygote is not up yet: it runs as a plain Python)."""
    import subprocess

    try:
        return subprocess.run([program, "-c", "pass"], timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _is_ours(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)).startswith(FOLDER_PREFIX)


def _start_zygote(wait: bool = True) -> bool:
    """Start this process's zygote once and, with ``wait``, until it says it is ready; False if
    it did not come up (kernels and launches then start fresh)."""
    global _zygote, _ready
    if _zygote is None:
        import subprocess

        _zygote = subprocess.Popen([sys.executable, os.path.abspath(__file__), "serve",
                                    os.environ[SOCKET_VAR], str(os.getpid())],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   env=dict(os.environ))
        # (env given: without it the zygote inherits the C-level environment, where readline,
        # once loaded, sets COLUMNS and LINES behind os.environ's back; kernels get os.environ's.)
    if wait and _ready is None:
        _ready = _zygote.stdout.readline().strip() == b"ready"
    return bool(_ready) and _zygote.poll() is None


# --- the client: nbval's kernel command ----------------------------------------------------

def _debug(command: list[str], said) -> None:
    """Under LESSONS_WARM_KERNELS_DEBUG, say whether ``command`` was forked and why not:
    on stderr (``=1``) or appended to the file it names."""
    where = os.environ.get("LESSONS_WARM_KERNELS_DEBUG", "")
    if where == "1":
        print(f"warm_kernels: {said}", file=sys.stderr, flush=True)
    elif where:
        with open(where, "a") as log:
            log.write(f"warm_kernels: {' '.join(command[:3])}: {said}\n")


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
                         "namespaces": _namespaces(), "ignored": ignored,
                         "parent": os.getppid()}, fds=[0, 1, 2])
            replies = _lines(conn)
            reply = next(replies)
            pid = reply.get("pid")
            _debug(original, reply)
        except (OSError, StopIteration, ValueError) as error:
            _debug(original, repr(error))
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
    """Import what every kernel and launch imports, then fork one per client until ``parent``
    ends."""
    import selectors
    import warnings

    global _FRESH_FILTERS
    # What every kernel imports, about 2.5 s of CPU, once; and torchrun and notebook 10's
    # workers (torch.distributed.checkpoint, 1 s more); then torch._dynamo (0.5 s more here,
    # 1.7 s in a process that imported torch alone: see _import_dynamo). Not ipykernel itself:
    # its app reads JPY_PARENT_PID, which differs per kernel, when it is imported.
    import torch  # noqa: F401

    if torch.distributed.is_available():
        import torch.distributed.checkpoint  # noqa: F401
        import torch.distributed.run  # noqa: F401

    _FRESH_FILTERS = list(warnings.filters)  # a script's, after import torch
    _import_dynamo()
    import IPython  # noqa: F401
    import jupyter_client  # noqa: F401
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
    # pid -> (client, pidfd, the pid of the client's parent: a launcher forked here, or not)
    kernels: dict[int, tuple[socket.socket, int, int]] = {}
    print("ready", flush=True)

    def end(pid: int, code: int | None = None) -> None:
        conn, pidfd, _ = kernels.pop(pid)
        selector.unregister(pidfd)
        selector.unregister(conn)
        os.close(pidfd)
        if code is not None:
            try:
                _send(conn, {"exit": code})
            except OSError:
                pass
        conn.close()

    def kill(pid: int) -> None:
        """Kill a child whose client went away, and what it launched: a launcher killed
        (utils.torchrun's time limit) leaves clients of its workers behind, orphaned."""
        _kill_group(pid)
        end(pid)
        for child in [other for other, (_, _, parent) in kernels.items() if parent == pid]:
            _kill_group(child)
            end(child, -signal.SIGKILL)  # its client exits as a killed process would

    try:
        while True:
            for key, _ in selector.select():
                what = key.data
                if what == "parent":
                    return
                if what == "listener":
                    conn, _ = listener.accept()
                    forked = _fork(conn, listener, environment, spaces)
                    if forked is None:
                        conn.close()
                        continue
                    pid, parent = forked
                    pidfd = os.pidfd_open(pid)
                    kernels[pid] = (conn, pidfd, parent)
                    selector.register(pidfd, selectors.EVENT_READ, ("exited", pid))
                    selector.register(conn, selectors.EVENT_READ, ("client", pid))
                elif what[0] == "exited":
                    pid = what[1]
                    if pid not in kernels:  # killed with its launcher, in this same round
                        continue
                    _, status = os.waitpid(pid, 0)
                    end(pid, -os.WTERMSIG(status) if os.WIFSIGNALED(status)
                        else os.WEXITSTATUS(status))
                elif what[0] == "client" and what[1] in kernels:  # the client went away
                    kill(what[1])
    finally:
        for pid in list(kernels):
            _kill_group(pid)
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _import_dynamo() -> None:
    """Import ``torch._dynamo`` here, once: a kernel or script imports it at its first
    ``nn.Linear`` or optimizer step (``torch._disable_dynamo``), and that import was about 40%
    of the CPU the forked kernels spent (py-spy over every notebook and lab, docs/runs.md).

    The import sets ``TORCHINDUCTOR_CACHE_DIR`` to torch's default cache folder, which it
    also keeps (``torch._dynamo.package.DynamoCache``): that value is kept in
    :data:`_DYNAMO_CACHE_DIR` and taken out of this process's environment, so that a kernel
    starts with the variables a fresh one has; :func:`_fork` starts fresh a request that
    names another folder. (A fresh kernel sets the variable at its own first import; nothing
    in the lessons reads it.)"""
    global _DYNAMO_CACHE_DIR
    before = os.environ.get(CACHE_VAR)
    import torch._dynamo  # noqa: F401

    _DYNAMO_CACHE_DIR = os.environ.get(CACHE_VAR)
    if before is None:
        os.environ.pop(CACHE_VAR, None)


def _kill_group(pid: int) -> None:
    """SIGKILL a child's process group (it leads one) and reap the child."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _fork(conn, listener, environment, spaces) -> tuple[int, int] | None:
    """Fork a kernel or a Python command for the request on ``conn``; return (its pid, the pid
    of the client's parent), or None (the client is told why and starts it fresh)."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    while not data.endswith(b"\n"):
        more = conn.recv(1 << 20)
        if not more:
            break
        data += more
    request = json.loads(data)
    env, argv = request["env"], request["argv"]
    kernel = argv[:3] == [sys.executable, "-m", "ipykernel_launcher"]
    command = None if kernel else python_command(argv)
    allowed = (PER_KERNEL if kernel else PER_KERNEL | PER_LAUNCH) | {CACHE_VAR}
    differs = sorted(name for name in set(env) | set(environment)
                     if name not in allowed and env.get(name) != environment.get(name))
    threads = env.get("OMP_NUM_THREADS", "")
    threads_set = threads != environment.get("OMP_NUM_THREADS", "")  # (utils.torchrun sets it)
    why = ("neither this Python's ipykernel nor `python [-u] script|-m module`"
           if not kernel and command is None
           else "different environment: " + ", ".join(differs) if differs
           else f"{CACHE_VAR} is not the folder torch._dynamo was imported with"
           if env.get(CACHE_VAR, _DYNAMO_CACHE_DIR) != _DYNAMO_CACHE_DIR
           else "different namespaces" if request["namespaces"] != spaces
           else "OMP_NUM_THREADS is not a number of threads"
           if threads_set and not threads.isdigit()
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
    if pid == 0:  # the kernel, or the script
        try:
            _become_child(conn, listener, fds, request)
            if kernel:
                _run_kernel(argv)
            else:
                _run_python(*command, threads_set)
        finally:
            os._exit(1)
    for fd in fds:
        os.close(fd)
    _send(conn, {"pid": pid})
    return pid, request.get("parent", 0)


def _become_child(conn, listener, fds, request) -> None:
    """In the forked child: take the client's stdio, folder, environment and signal
    dispositions, in a session of its own."""
    import atexit

    atexit._clear()  # the zygote's exit handlers are not the child's
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
    os.setsid()  # the child and what it starts: one group, signalled as a whole
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "numpy.random" in sys.modules:  # (torch does not import it today)
        sys.modules["numpy.random"].seed()  # a fresh process draws its own seed


def _run_kernel(argv: list[str]) -> None:
    """Run ``python -m ipykernel_launcher ARGS``; exit with its status."""
    import runpy

    sys.path[0] = os.getcwd()  # as `python -m` puts it
    sys.argv = [argv[0], *argv[3:]]
    code = 0
    try:
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = _status(stop)
    except BaseException:  # noqa: BLE001  (report it as a crashed kernel would)
        import traceback

        traceback.print_exc()
        code = 1
    _exit(code)


def _run_python(unbuffered: bool, kind: str, name: str, args: list[str],
                threads_set: bool) -> None:
    """Run ``python [-u] script ARGS`` or ``python [-u] -m module ARGS`` as a fresh Python
    would; exit as it would."""
    import builtins
    import importlib.machinery
    import runpy
    import threading
    import types
    import warnings

    if threads_set:  # read by OpenMP when torch was imported here, before this environment
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    warnings.filters[:] = _FRESH_FILTERS  # not those IPython & co. added in the zygote
    warnings._filters_mutated()
    _python_stdio(unbuffered or bool(os.environ.get("PYTHONUNBUFFERED")))
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    code, interrupted = 0, False
    try:
        if kind == "module":
            sys.argv, sys.path[0] = ["-m", *args], os.getcwd()
            runpy._run_module_as_main(name, alter_argv=True)  # what `python -m` calls
        else:
            path = os.path.abspath(name)
            sys.argv, sys.path[0] = [name, *args], os.path.dirname(os.path.realpath(name))
            main.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                                 __loader__=importlib.machinery.SourceFileLoader("__main__",
                                                                                 path))
            with open(path, "rb") as handle:
                source = handle.read()
            exec(compile(source, path, "exec", dont_inherit=True), main.__dict__)
    except SystemExit as stop:
        code = _status(stop)
    except BaseException as error:  # noqa: BLE001  (reported as Python reports it)
        trace = error.__traceback__
        while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
            trace = trace.tb_next  # this file's frames: not the script's
        sys.excepthook(type(error), error, error.with_traceback(trace).__traceback__)
        code, interrupted = 1, isinstance(error, KeyboardInterrupt)
    threading._shutdown()  # as Python does at exit: wait for the threads that are not daemons
    _exit(code, signal.SIGINT if interrupted else None)


def _status(stop: SystemExit) -> int:
    """The exit status Python gives ``sys.exit(code)``, printing a code that is not a number."""
    if stop.code is None or isinstance(stop.code, int):
        return (stop.code or 0) & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


def _python_stdio(unbuffered: bool) -> None:
    """sys.stdin, stdout and stderr on fds 0-2 as Python makes them (``-u``: unbuffered)."""
    import io

    for name, fd, like in (("stdin", 0, sys.__stdin__), ("stdout", 1, sys.__stdout__),
                           ("stderr", 2, sys.__stderr__)):
        write = fd > 0
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        buffer = (raw if write and unbuffered
                  else io.BufferedWriter(raw) if write else io.BufferedReader(raw))
        stream = io.TextIOWrapper(buffer, encoding=like.encoding, errors=like.errors,
                                  newline="\n", write_through=write and unbuffered,
                                  line_buffering=write and not unbuffered
                                  and (fd == 2 or raw.isatty()))
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _exit(code: int, signum: int | None = None) -> None:
    """Run the exit handlers, flush, and end the process with ``code`` (or die of ``signum``)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
    if signum is not None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os._exit(code)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        client(sys.argv[sys.argv.index("--") + 1:])
