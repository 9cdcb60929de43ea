"""Measure each notebook as one learner's Run All: time, CPU, and memory of all its processes.

Each notebook runs in its own fresh kernel (as a learner's Run All would). While it runs,
the kernel and every process it starts (09's and 10's torchrun launchers and workers) are sampled
every 0.1 s: the peak of their summed PSS (proportional set size: shared libraries counted
once across the processes, as a hub's memory limit sees them; RSS where the system has no
PSS) and of their summed RSS, the most processes at once, and the CPU seconds they used.
Prints a Markdown table. Usage:

    python -m tools.measure_notebooks [notebook ...]   # default: every notebook and lab

Goals (README, "What runs where"): under 10 s and under 1 GB per notebook, except the
known longer runs in :data:`TIME_LIMITS_S` (09 and 10 launch real processes).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

from tools import lessons

#: Kernel option: log only errors (not the start-up warning that the local kernel talks
#: over TCP without encryption, printed once per notebook).
KERNEL_QUIET = "--IPKernelApp.log_level=ERROR"

TIME_LIMIT_S = 10.0
#: Notebooks known to take longer: 09, 10 and their labs start torchrun jobs (a few seconds each).
TIME_LIMITS_S = {"09_many_processes.ipynb": 120.0, "10_sharded_training.ipynb": 120.0}
MEMORY_LIMIT_MB = 1024.0
#: 09 and 10 run up to six processes at once (the launcher, the workers, each importing torch).
MEMORY_LIMITS_MB = {"09_many_processes.ipynb": 2048.0, "10_sharded_training.ipynb": 2048.0}
#: A cell may run this long before the run is called stuck.
CELL_TIMEOUT_S = 600
SAMPLE_S = 0.1


@dataclass
class Measurement:
    """One Run All: wall seconds, CPU seconds (all processes), peak summed PSS and RSS (MiB),
    most processes at once."""

    seconds: float
    cpu_seconds: float
    peak_pss_mib: float
    peak_rss_mib: float
    processes: int


class Sampler(threading.Thread):
    """Samples a process and its descendants until stopped."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.stop = threading.Event()
        self.peak_pss = self.peak_rss = 0
        self.processes = 0
        self.cpu: dict[int, float] = {}
        self.start_cpu: dict[int, float] = {}

    def sample(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return
        pss = rss = 0
        for process in tree:
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    try:
                        info = process.memory_full_info()
                        pss += getattr(info, "pss", info.rss)
                    except psutil.AccessDenied:
                        info = process.memory_info()
                        pss += info.rss
                    rss += info.rss
            except psutil.Error:
                continue
            used = times.user + times.system
            self.start_cpu.setdefault(process.pid, used if process is self.root else 0.0)
            self.cpu[process.pid] = used
        self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)
        self.processes = max(self.processes, len(tree))

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_S)

    def cpu_seconds(self) -> float:
        return sum(used - self.start_cpu.get(pid, 0.0) for pid, used in self.cpu.items())


def _kernel_pid(client: NotebookClient) -> int:
    provisioner = getattr(client.km, "provisioner", None)
    process = getattr(provisioner, "process", None) or getattr(client.km, "kernel", None)
    return process.pid


def measure(path: Path) -> Measurement:
    """Run ``path`` top to bottom in a fresh kernel and measure it."""
    notebook = nbformat.read(path, as_version=4)
    os.environ.setdefault("LESSONS_DEVICE", "cpu")
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # The kernel logs a warning about its local TCP transport at start-up, once per
        # notebook; keep the output to the table (its errors are still shown).
        extra_arguments=[KERNEL_QUIET],
    )
    with client.setup_kernel():
        sampler = Sampler(_kernel_pid(client))
        sampler.sample()  # the kernel at rest: its CPU so far is start-up, not Run All
        sampler.start()
        started = time.perf_counter()
        try:
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
        finally:
            seconds = time.perf_counter() - started
            sampler.sample()
            sampler.stop.set()
            sampler.join()
    return Measurement(seconds, sampler.cpu_seconds(), sampler.peak_pss / 2**20,
                       sampler.peak_rss / 2**20, sampler.processes)


def time_limit(path: Path) -> float:
    return TIME_LIMITS_S.get(path.name, TIME_LIMIT_S)


def memory_limit(path: Path) -> float:
    return MEMORY_LIMITS_MB.get(path.name, MEMORY_LIMIT_MB)


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or lessons.all_notebooks()
    print("| notebook | Run All (s) | CPU (s) | peak PSS, all processes (MiB) | "
          "peak RSS, all processes (MiB) | processes | within 10 s and 1 GiB |")
    print("|---|---:|---:|---:|---:|---:|---|")
    all_ok = True
    for path in paths:
        m = measure(path)
        ok = m.seconds < time_limit(path) and m.peak_pss_mib < memory_limit(path)
        all_ok &= ok
        try:
            name = path.relative_to(lessons.ROOT).as_posix()
        except ValueError:
            name = path.name
        limit = "" if time_limit(path) == TIME_LIMIT_S else (
            f" (limits {time_limit(path):.0f} s, {memory_limit(path) / 1024:.0f} GiB)")
        print(f"| {name} | {m.seconds:.2f} | {m.cpu_seconds:.1f} | {m.peak_pss_mib:.0f} | "
              f"{m.peak_rss_mib:.0f} | {m.processes} | {'yes' if ok else 'NO'}{limit} |",
              flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
