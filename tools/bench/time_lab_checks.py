"""Time every check of labs 07, 09 and 10 on the lab's own solution and on its slowest known
wrong answer. Not a test: a measurement, to run by hand.

    .venv/bin/python -m tools.bench.time_lab_checks          # median of 3 runs each
    .venv/bin/python -m tools.bench.time_lab_checks --runs 1

Target: each check under 10 s on a 2-core machine. The solutions are the lab's
own, read from labs/solutions/ (the setup cell and every cell with ``### BEGIN SOLUTION``,
run in one namespace, as in the notebook). Lab 10's exercise is timed twice: in an empty folder
(it then starts the 2 processes that write its checkpoint), and run again (the checkpoint
is there). Wall time depends on the machine's load, so the table gives the
load average and the CPU time too (this process's and its children's: torchrun and its
workers).
"""

from __future__ import annotations

import argparse
import linecache
import os
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat

from tools import build_nav

ROOT = Path(__file__).resolve().parents[2]


def solution_namespace(lab: str) -> dict:
    """Run the setup cell and the solution cells of ``labs/solutions/<lab>.ipynb``; return
    the namespace (the learner's functions, ``checks``, ``torch``...)."""
    notebook = nbformat.read(ROOT / "labs" / "solutions" / f"{lab}.ipynb", as_version=4)
    namespace: dict = {"__name__": f"lab_{lab}"}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        setup = {build_nav.SETUP_TAG, build_nav.HELPERS_TAG} & set(cell.metadata.get("tags", []))
        if not setup and "### BEGIN SOLUTION" not in cell.source:
            continue
        code = "\n".join(line for line in cell.source.splitlines()
                         if not line.lstrip().startswith(("%", "!", "print(utils.environment")))
        filename = f"<{lab} cell {notebook.cells.index(cell)}>"
        # as IPython does: the source stays readable (the exercise 3 check copies it)
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - our own notebook
    return namespace


def _cpu_seconds() -> float:
    own, children = (resource.getrusage(who) for who in
                     (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(run: Callable[[], object], runs: int,
            before: Callable[[], None] | None = None) -> tuple[float, float, str]:
    """(median wall s, median CPU s, the verdict's first 60 characters) over ``runs`` runs."""
    walls, cpus, verdict = [], [], ""
    for _ in range(runs):
        if before is not None:
            before()
        cpu, started = _cpu_seconds(), time.perf_counter()
        verdict = str(run())
        walls.append(time.perf_counter() - started)
        cpus.append(_cpu_seconds() - cpu)
    return statistics.median(walls), statistics.median(cpus), verdict[:60]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist

    from labchecks import lab09

    lab07 = solution_namespace("07_moving_data_fast")
    lab09_answers = solution_namespace("09_many_processes")
    lab10_answers = solution_namespace("10_sharded_training")
    checks07, checks09 = lab07["checks"], lab09_answers["checks"]  # labchecks.lab07, .lab09
    checks10 = lab10_answers["checks"]
    scratch = Path(tempfile.mkdtemp(prefix="time-lab-checks-"))
    alone = scratch / "alone"
    after = scratch / "after"

    def barrier_inside_if(ddp, path):
        if dist.get_rank() == 0:
            torch.save(ddp.module.state_dict(), path)
            dist.barrier()

    def waits_for_ever():
        while True:
            time.sleep(0.1)

    def fresh() -> None:
        shutil.rmtree(alone, ignore_errors=True)

    rows = [
        ("07.1 check_fast_training, solution",
         lambda: checks07.check_fast_training(lab07["train_fast"]), None),
        ("07.2 check_adam_bytes, solution",
         lambda: checks07.check_adam_bytes(lab07["adam_bytes"]), None),
        ("07.3 check_largest_batch, solution",
         lambda: checks07.check_largest_batch(lab07["largest_batch"]), None),
        ("09.1 check_setup_device, solution",
         lambda: checks09.check_setup_device(lab09_answers["setup_device"]), None),
        ("09.1 check_setup_device, a function that never returns",
         lambda: checks09.check_setup_device(waits_for_ever), None),
        ("09.2 check_rank_aware_load, solution",
         lambda: checks09.check_rank_aware_load(lab09_answers["load_for_this_rank"],
                                                folder=str(after)), None),
        ("09.3 check_save_on_rank_zero, solution",
         lambda: checks09.check_save_on_rank_zero(lab09_answers["save_on_rank_zero"],
                                                  folder=str(after)), None),
        ("09.3 check_save_on_rank_zero, barrier inside `if rank == 0`",
         lambda: lab09.judge_saves([barrier_inside_if], folder=str(scratch / "if"))[0], None),
        ("10.1 check_load_sharded, solution, first run (writes its checkpoint)",
         lambda: checks10.check_load_sharded(lab10_answers["load_sharded"], folder=str(alone)),
         fresh),
        ("10.1 check_load_sharded, solution, run again (the checkpoint is there)",
         lambda: checks10.check_load_sharded(lab10_answers["load_sharded"], folder=str(alone)),
         None),
    ]
    print(f"cores: {os.cpu_count()}, load average at start: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, median of {args.runs}")
    print(f"| {'check, answer':<72} | wall s | CPU s | verdict |")
    print(f"|{'-' * 74}|-------:|------:|---------|")
    slowest = 0.0
    for name, run, before in rows:
        wall, cpu, verdict = measure(run, args.runs, before)
        slowest = max(slowest, wall)
        print(f"| {name:<72} | {wall:6.2f} | {cpu:5.2f} | {verdict} |", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"slowest check {slowest:.2f} s (target: under 10 s)")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if slowest < 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
