"""Many processes: a launcher for notebooks, and the preamble every worker script shares.

Introduced in 09_many_processes. A notebook starts workers with :func:`torchrun`; a worker
script starts with ``with utils.process_group() as me:`` (the plain-PyTorch lines it stands
for are in notebook 09's "In your own code").
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import torch


def torchrun(script: str | os.PathLike, nproc: int = 2, args: Sequence[str] = (),
             timeout_s: float = 120.0, show_stderr: bool = False,
             quiet: bool = False) -> dict[int, str]:
    """Run ``torchrun --standalone --nproc_per_node=nproc script args``; return each rank's output.

    It is ``python -m torch.distributed.run`` from this Python. Once all ranks finished,
    each rank's stdout is printed under ``[rank N]``, in rank order. A failed rank raises
    :class:`WorkerFailed` with its traceback; after ``timeout_s`` the launch is killed and
    raises TimeoutError. Returns ``{rank: stdout}``. Introduced in 09_many_processes.
    """
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"No worker script at {str(script)!r}: write it first "
                                "(%%writefile in a notebook).")
    command = ["torchrun", "--standalone", f"--nproc_per_node={nproc}", str(script), *args]
    if not quiet:
        print("$ " + shlex.join(command), flush=True)
    environment = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                   "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory(prefix="torchrun-logs-") as log_dir:
        # PYTHON_EXEC, if set, is the Python torchrun runs its workers with; torchrun itself
        # runs with it too (the tests point it at processes that imported torch already).
        python = os.environ.get("PYTHON_EXEC", sys.executable)
        launcher = [python, "-m", "torch.distributed.run", "--redirects", "3",
                    "--log-dir", log_dir, *command[1:]]
        process = subprocess.Popen(launcher, env=environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        try:
            launcher_output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(process)
            launcher_output = process.stdout.read() if process.stdout else ""
            logs = _rank_logs(Path(log_dir))
            _print_ranks(logs, show_stderr=True)
            raise TimeoutError(
                f"{script.name} was still running after {timeout_s:g} s, so it was stopped "
                f"(torchrun and its {nproc} workers killed; what each rank printed is above). "
                "A collective that some rank never reaches (a barrier or all_reduce inside "
                "`if rank == 0:`) waits forever: make every rank call the same collectives "
                "in the same order."
            ) from None
        logs = _rank_logs(Path(log_dir))
        if process.returncode != 0:
            _print_ranks(logs, show_stderr=False)
            raise WorkerFailed(_failure(script.name, logs, launcher_output, process.returncode))
        if not quiet:
            _print_ranks(logs, show_stderr=show_stderr)
    return {rank: out for rank, (out, _err) in sorted(logs.items())}


@contextlib.contextmanager
def process_group(timeout_s: float = 60.0) -> Iterator[Worker]:
    """Join the job torchrun started; yield a :class:`Worker`; always leave it cleanly.

    Backend and device from :func:`backend_and_device`; ``init_process_group`` with a
    timeout (a collective one rank never reaches fails instead of hanging); a barrier at
    the end of the block, then ``destroy_process_group``. Introduced in 09_many_processes.
    """
    import torch.distributed as dist

    _launched_by_torchrun()
    local_rank = int(os.environ["LOCAL_RANK"])
    backend, device = backend_and_device(local_rank)
    options = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s), **options)
    try:
        yield Worker(dist.get_rank(), local_rank, dist.get_world_size(), backend, device)
        dist.barrier()  # leave together: no rank tears down while another still communicates
    finally:
        dist.destroy_process_group()
    _exit_without_native_teardown()


# --- what torchrun and process_group are built on ---

#: The variables torchrun sets for every worker (and that process_group needs).
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class Worker(NamedTuple):
    """Who this process is: what :func:`process_group` yields. Introduced in 09_many_processes."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: torch.device


class WorkerFailed(RuntimeError):
    """A rank of a :func:`torchrun` launch raised or died; the message names it and says why."""


def _wants_cuda() -> bool:
    """CUDA when there is one GPU per local process, unless LESSONS_DEVICE says otherwise."""
    forced = os.environ.get("LESSONS_DEVICE", "").strip()
    if forced and not forced.startswith("cuda"):
        return False
    if not torch.cuda.is_available():
        return False
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return torch.cuda.device_count() >= local_processes


def backend_and_device(local_rank: int) -> tuple[str, torch.device]:
    """Return ``("nccl", cuda:local_rank)`` with one GPU per local process, else ``("gloo", cpu)``.

    On GPUs it calls ``torch.cuda.set_device(local_rank)`` first: the *local* rank, not the
    global one, is a GPU index. Introduced in 09_many_processes.
    """
    if not _wants_cuda():
        return "gloo", torch.device("cpu")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise RuntimeError(
            f"LOCAL_RANK is {local_rank}, but this process sees only {count} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'not set')!r}). "
            f"Start at most {count} process(es) per machine: torchrun --nproc_per_node={count}."
        )
    torch.cuda.set_device(local_rank)
    return "nccl", torch.device("cuda", local_rank)


def _launched_by_torchrun() -> dict[str, str]:
    missing = [name for name in TORCHRUN_VARIABLES if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"The environment has no {', '.join(missing)}: this script is meant to be started "
            "by a launcher, e.g. `torchrun --standalone --nproc_per_node=2 script.py` "
            "(or utils.torchrun('script.py') from a notebook), not run on its own."
        )
    return {name: os.environ[name] for name in TORCHRUN_VARIABLES}


_FAILED: list[bool] = []


def _exit_without_native_teardown() -> None:
    """End this process with ``os._exit`` after Python's exit steps (1 after an uncaught error).

    With gloo, a worker that used a device mesh and DCP sometimes aborts in C++ teardown
    after its work is done, which the launcher reports as a failed rank.
    """
    if _FAILED:  # already installed in this process
        return
    _FAILED.append(False)
    original_hook = sys.excepthook

    def note_failure(kind, value, traceback) -> None:
        _FAILED[0] = True
        original_hook(kind, value, traceback)

    def leave() -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(1 if _FAILED[0] else 0)

    sys.excepthook = note_failure
    atexit.register(leave)


@contextlib.contextmanager
def child_stderr() -> Iterator[io.StringIO]:
    """Collect what child processes write to file descriptor 2 in the block; yield a StringIO.

    A notebook does not show a child's stderr in the cell. Introduced in 09_many_processes.
    """
    collected = io.StringIO()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as landing:
        os.dup2(landing.fileno(), 2)
        try:
            yield collected
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            landing.seek(0)
            collected.write(landing.read().decode(errors="replace"))


# --- the launcher ---

_TRACEBACK = "Traceback (most recent call last):"


def _descendants(pid: int) -> list[int]:
    """Process ids of ``pid``'s children, grandchildren...; [] where this cannot be read."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with ipykernel
        return []
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _stop(process: subprocess.Popen) -> None:
    """Kill torchrun and every worker it started (workers run in sessions of their own), and
    return once they are gone. torchrun is paused first, so that a launch stopped while it
    still starts its workers cannot start one more after the list of them is read."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(process.pid, signal.SIGSTOP)
    workers = _descendants(process.pid)
    for pid in [*workers, process.pid]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    process.wait()
    _wait_until_gone(workers, limit_s=10.0)


def _wait_until_gone(pids: list[int], limit_s: float) -> None:
    """Wait (at most ``limit_s``) until no process in ``pids`` runs; a zombie counts as gone."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with ipykernel
        return
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:  # gone
            return False

    deadline = time.monotonic() + limit_s
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)


def _rank_logs(log_dir: Path) -> dict[int, tuple[str, str]]:
    """{local rank: (stdout, stderr)} from torchrun's --log-dir layout (.../attempt_N/R/)."""
    found: dict[int, tuple[str, str]] = {}
    for folder in sorted(log_dir.glob("*/attempt_*/*")):
        if folder.is_dir() and folder.name.isdigit():
            read = [(folder / name).read_text(errors="replace") if (folder / name).exists()
                    else "" for name in ("stdout.log", "stderr.log")]
            found[int(folder.name)] = (read[0], read[1])
    return found


_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?", re.M)  # torch prefixes a worker's traceback
_PATH = re.compile(r'File "([^"]+)"')
#: How gloo reports that the *other* process went away: a consequence, not a cause.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "remote worker")


def _short_path(found: re.Match) -> str:
    path = found.group(1).replace("\\", "/")
    if "site-packages/" in path:
        return f'File "{path.split("site-packages/")[-1]}"'
    return f'File "{path.rsplit("/", 1)[-1]}"'


def _last_traceback(stderr: str, lines: int = 12) -> str:
    """The last traceback in ``stderr`` (its last ``lines`` lines, paths shortened), or ''."""
    stderr = _RANK_PREFIX.sub("", stderr)
    if _TRACEBACK not in stderr:
        return ""
    block = _PATH.sub(_short_path, stderr[stderr.rindex(_TRACEBACK):]).rstrip().splitlines()
    return "\n".join(block if len(block) <= lines + 1 else [block[0], "  ...", *block[-lines:]])


def _prefixed(rank: int, text: str) -> str:
    return "\n".join(f"[rank {rank}] {line}" for line in text.rstrip("\n").splitlines())


def _print_ranks(logs: dict[int, tuple[str, str]], show_stderr: bool) -> None:
    for rank, (out, err) in sorted(logs.items()):
        if out.strip():
            print(_prefixed(rank, out))
        if show_stderr and err.strip():
            print(_prefixed(rank, err))


def _failure(name: str, logs: dict[int, tuple[str, str]], launcher_output: str,
             returncode: int) -> str:
    """WorkerFailed's message: the rank(s) that failed first with their tracebacks, then,
    in one line each, those that failed only because a partner had gone."""
    failed = [(rank, _last_traceback(err)) for rank, (_out, err) in sorted(logs.items())
              if _last_traceback(err)]
    causes = [(r, t) for r, t in failed if not any(p in t.splitlines()[-1] for p in _PEER_GONE)]
    consequences = [(r, t) for r, t in failed if (r, t) not in causes]
    if causes:
        parts = [f"{name}: rank {rank} failed:\n{trace}" for rank, trace in causes]
        parts += [f"(rank {rank} then failed too, because a partner had gone: "
                  f"{trace.splitlines()[-1][:160]})" for rank, trace in consequences]
        return "\n\n".join(parts)
    if consequences:
        return "\n\n".join(f"{name}: rank {rank} failed:\n{trace}" for rank, trace in failed)
    summary = re.findall(r"^\s*(?:rank|exitcode|error_file)\s*:.*$", launcher_output, re.M)
    said = "\n".join(line.strip() for line in summary) or launcher_output.strip()[-2000:]
    tails = [f"rank {rank}'s last error output:\n" + "\n".join(
                 _RANK_PREFIX.sub("", err).strip().splitlines()[-6:])
             for rank, (_out, err) in sorted(logs.items()) if err.strip()]
    return (f"{name}: torchrun exited with status {returncode} and no rank printed a "
            f"traceback (a rank killed by a signal, or the launcher itself failed):\n{said}"
            + "".join(f"\n\n{tail}" for tail in tails))
