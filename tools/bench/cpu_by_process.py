"""Where `make test`'s CPU goes, by kind of process: kernels, torchrun, test workers, the browser.

    .venv/bin/python -m tools.bench.cpu_by_process [-- make test arguments]

Runs `make test` while it reads /proc four times a second: every process started under this
repository (or in a temporary folder) is kept with its last CPU time (user + system), its command
line and the test that started it (``PYTEST_CURRENT_TEST`` in its environment). Prints the CPU
by kind of process and by test file. A process that lives less than a quarter of a second may be
missed, so the total is a little under what ``time make test`` reports (user + sys). A kernel
forked from a zygote (tests/plugins/warm_kernels.py) keeps the zygote's command line and, in
/proc, its environment: its CPU counts under the test that started the zygote. Linux only;
it measures, it asserts nothing, and no test runs it.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")


def kind(command: str) -> str:
    """The kind of process a command line belongs to."""
    if "chrom" in command:
        return "Chromium"
    if "warm_kernels.py serve" in command:  # tests/plugins/warm_kernels.py: same command line
        return "Jupyter kernel (warm: a zygote or a kernel forked from it)"
    if "warm_kernels.py --" in command:
        return "Jupyter kernel (warm: its client)"
    if "ipykernel" in command:
        return "Jupyter kernel"
    if "torch.distributed.run" in command:
        return "torchrun (launcher)"
    if "exec(eval(sys.stdin" in command:
        return "test worker (xdist)"
    if " -u " in command and ".py" in command:
        return "torchrun (worker)"
    if "pytest" in command:
        return "pytest (main, nested, widgets on 7)"
    if "jupyter" in command:
        return "JupyterLab server"
    if "node" in command.split(" ")[0] or "playwright" in command:
        return "Playwright driver"
    return "other"


def _read(pid: str, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as handle:
        return handle.read()


def watch(stop: threading.Event, seen: dict) -> None:
    """Fill ``seen`` with {(pid, start): [cpu_seconds, command, test]} until ``stop`` is set."""
    me = str(os.getpid())
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                stat = _read(pid, "stat").decode()
                fields = stat[stat.rfind(")") + 2:].split()
                cpu = (int(fields[11]) + int(fields[12])) / TICKS
                key = (pid, fields[19])
                if key in seen:
                    seen[key][0] = cpu
                    continue
                cwd = os.readlink(f"/proc/{pid}/cwd")
                if not (cwd.startswith(str(ROOT)) or cwd.startswith("/tmp")):
                    seen[key] = None  # not ours
                    continue
                command = _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")
                test = ""
                for pair in _read(pid, "environ").split(b"\0"):
                    if pair.startswith(b"PYTEST_CURRENT_TEST="):
                        test = pair.split(b"=", 1)[1].decode(errors="replace")
                seen[key] = [cpu, command, test]
            except (OSError, IndexError, ValueError, TypeError):
                continue
        stop.wait(0.25)


def main() -> None:
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop, seen), daemon=True)
    watcher.start()
    started = time.perf_counter()
    done = subprocess.run(["make", "--no-print-directory", "test", *sys.argv[1:]], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    stop.set()
    watcher.join()
    rows = [row for row in seen.values() if row]
    by_kind, by_file = collections.Counter(), collections.Counter()
    count = collections.Counter()
    for cpu, command, test in rows:
        by_kind[kind(command)] += cpu
        count[kind(command)] += 1
        by_file[test.split("::")[0] or "(started outside a test)"] += cpu
    if done.returncode:  # say what failed: a failed run's figures are not a measurement
        print("\n".join((done.stdout + done.stderr).splitlines()[-30:]) + "\n")
    print(f"make test: exit {done.returncode}, {wall:.0f} s wall, "
          f"{sum(by_kind.values()):.0f} s of CPU seen in {len(rows)} processes\n")
    print("CPU seconds by kind of process:")
    for name, cpu in by_kind.most_common():
        print(f"  {cpu:7.1f}  {count[name]:4d}  {name}")
    print("\nCPU seconds of the processes each test file started (its kernels, launches, ...):")
    for name, cpu in by_file.most_common(15):
        print(f"  {cpu:7.1f}  {name}")


if __name__ == "__main__":
    main()
