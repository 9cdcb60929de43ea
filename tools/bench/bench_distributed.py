"""Benchmark the targets of notebooks 09 and 10 (many processes, sharded). Not a test.

    python -m tools.bench.bench_distributed            # everything
    python -m tools.bench.bench_distributed inspect    # only: inspect vs load, 256 MiB DCP folder
    python -m tools.bench.bench_distributed notebook   # only: Run All breakdown and peak memory

Targets: each notebook runs in under 30 s on a 2-core CPU-only machine, with the peak memory
of all its processes together (kernel, torchrun, workers) under 1.5 GB; inspecting a
DCP folder is at least 20x faster than loading it, on a 256 MiB checkpoint.

CPU time is the kernel's own plus its children's (torchrun, which waits for its workers,
and the mp.spawn child), from getrusage: what the notebook costs on an idle machine,
whatever the load while measuring. Memory is sampled every 20 ms over the kernel and all
its descendants: the sum of RSS (counts shared library pages once per process, so it
overstates) and the sum of PSS (shares them out: the honest "together" figure, Linux only).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [ROOT / "notebooks" / "09_many_processes.ipynb",
             ROOT / "notebooks" / "10_sharded_training.ipynb"]


CPU_SECONDS_CELL = """\
import resource
print(sum(getattr(resource.getrusage(who), field) for who in
          (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for field in ("ru_utime", "ru_stime")))
"""


def _tree_memory(pid: int) -> tuple[int, int, int]:
    """(sum of RSS, sum of PSS, number of processes) for ``pid`` and its descendants."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0
    rss = pss = 0
    for process in processes:
        try:
            info = process.memory_full_info()
        except psutil.Error:
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return rss, pss, len(processes)


def bench_notebook() -> None:
    for path in NOTEBOOKS:
        _bench_one(path)


def _bench_one(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    os.environ.update(LESSONS_DEVICE="cpu", LESSONS_WIDGETS="text")
    client = NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    peak = {"rss": 0, "pss": 0, "processes": 0}
    stop = threading.Event()
    rows: list[tuple[float, str]] = []
    with client.setup_kernel():
        kernel_pid = client.km.provisioner.process.pid

        def sample() -> None:
            while not stop.is_set():
                rss, pss, count = _tree_memory(kernel_pid)
                peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)
                peak["processes"] = max(peak["processes"], count)
                time.sleep(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.perf_counter()
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "code":
                continue
            before = time.perf_counter()
            client.execute_cell(cell, index)
            first = cell.source.strip().splitlines()[0] if cell.source.strip() else ""
            rows.append((time.perf_counter() - before, first))
        total = time.perf_counter() - started
        stop.set()
        sampler.join()
        cpu_cell = nbformat.v4.new_code_cell(CPU_SECONDS_CELL)
        notebook.cells.append(cpu_cell)
        client.execute_cell(cpu_cell, len(notebook.cells) - 1)
        cpu_seconds = float(cpu_cell.outputs[0]["text"])
    launches = [(s, line) for s, line in rows if "utils.torchrun(" in line]
    setup = rows[0][0]
    spawn = sum(s for s, line in rows if "torch.multiprocessing" in line)
    other = total - setup - spawn - sum(s for s, _ in launches)
    print(f"notebook {path.name[:2]} Run All: {total:.1f} s (target < 30 s), load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  setup cell (import torch, utils): {setup:.1f} s")
    print(f"  mp.spawn error demo (a child imports torch): {spawn:.1f} s")
    for seconds, line in launches:
        print(f"  {line.split('(')[1].split(',')[0]}: {seconds:.1f} s")
    print(f"  everything else ({len(rows) - len(launches) - 2} cells): {other:.1f} s")
    print(f"CPU time of all its processes together: {cpu_seconds:.1f} s, so at least "
          f"{cpu_seconds / 2:.1f} s of wall time on 2 idle cores")
    print(f"peak memory of kernel + torchrun + workers together: PSS {peak['pss'] / 2**20:.0f} "
          f"MiB, RSS {peak['rss'] / 2**20:.0f} MiB (target < 1.5 GB), up to "
          f"{peak['processes']} processes")
    startup = _bare_launch_seconds()
    print(f"  for scale: a launch whose workers only join and leave takes {startup:.1f} s")


def _bare_launch_seconds() -> float:
    from utils.distributed import torchrun

    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "bare.py"
        script.write_text("from utils.distributed import process_group\n"
                          "with process_group():\n    pass\n")
        started = time.perf_counter()
        torchrun(script, nproc=2, quiet=True)
        return time.perf_counter() - started


def bench_inspect(size_mib: int = 256) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    from utils.dcp import inspect_dcp

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    pieces = 16
    elements = size_mib * 2**20 // 4 // pieces
    with tempfile.TemporaryDirectory() as folder:
        state = {"model": {f"layer{i}.weight": torch.randn(elements) for i in range(pieces)}}
        dcp.save(state, checkpoint_id=folder, no_dist=True)
        inspect_times, load_times = [], []
        for _ in range(5):
            started = time.perf_counter()
            info = inspect_dcp(folder)
            inspect_times.append(time.perf_counter() - started)
        target = {"model": {k: torch.empty_like(v) for k, v in state["model"].items()}}
        for _ in range(3):
            started = time.perf_counter()
            dcp.load(target, checkpoint_id=folder, no_dist=True)
            load_times.append(time.perf_counter() - started)
        assert all(torch.equal(target["model"][k], v) for k, v in state["model"].items())
    inspect_s, load_s = statistics.median(inspect_times), statistics.median(load_times)
    print(f"{size_mib} MiB DCP checkpoint ({len(info.tensors)} tensors): inspect "
          f"{inspect_s * 1000:.1f} ms, dcp.load {load_s * 1000:.0f} ms (files in the page "
          f"cache), ratio {load_s / inspect_s:.0f}x (target >= 20x)")


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "all"
    if which in ("all", "inspect"):
        bench_inspect()
    if which in ("all", "notebook"):
        bench_notebook()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
