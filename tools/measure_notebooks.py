"""Measure each notebook: Run All wall time and the kernel's peak resident memory.

Each notebook runs in its own fresh kernel (as a learner's Run All would); the
kernel's peak RSS is read from getrusage at the end, including any child
processes the notebook started. Prints a Markdown table. Usage:

    python -m tools.measure_notebooks [notebook ...]   # default: every notebook and lab

Goals (README, "What runs where"): under 10 s and under 1 GB per notebook.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tools import lessons

PEAK_RSS_CELL = """\
import resource, sys
_scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
print(max(resource.getrusage(who).ru_maxrss for who in
          (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)) * _scale)
"""

#: Kernel option: log only errors (not the start-up warning that the local kernel talks
#: over TCP without encryption, printed once per notebook).
KERNEL_QUIET = "--IPKernelApp.log_level=ERROR"

TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 1024.0


def measure(path: Path) -> tuple[float, float]:
    """Return (Run All seconds, kernel peak RSS in MiB) for one fresh run of ``path``."""
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PEAK_RSS_CELL))
    os.environ.setdefault("LESSONS_DEVICE", "cpu")
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        # The kernel logs a warning about its local TCP transport at start-up, once per
        # notebook; keep the output to the table (its errors are still shown).
        extra_arguments=[KERNEL_QUIET],
    )
    with client.setup_kernel():
        started = time.perf_counter()
        for index, cell in enumerate(notebook.cells[:-1]):
            client.execute_cell(cell, index)
        seconds = time.perf_counter() - started
        client.execute_cell(notebook.cells[-1], len(notebook.cells) - 1)
    peak_bytes = int(notebook.cells[-1].outputs[0]["text"].strip())
    return seconds, peak_bytes / 2**20


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or lessons.all_notebooks()
    print("| notebook | Run All (s) | kernel peak RSS (MiB) | within 10 s and 1 GB |")
    print("|---|---:|---:|---|")
    all_ok = True
    for path in paths:
        seconds, peak_mib = measure(path)
        ok = seconds < TIME_LIMIT_S and peak_mib < MEMORY_LIMIT_MB
        all_ok &= ok
        name = path.relative_to(lessons.ROOT).as_posix()
        print(f"| {name} | {seconds:.2f} | {peak_mib:.0f} | {'yes' if ok else 'NO'} |", flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
