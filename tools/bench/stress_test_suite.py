"""Run `make test` from fresh clones, several times, some with both cores kept busy.

    python -m tools.bench.stress_test_suite [--quiet-runs 5] [--loaded-runs 3] [--rev HEAD]
                                      [--fresh-venvs] [--keep]

Proves the suite does not flake. Each run:

1. clones this repository at ``--rev`` into a new temporary folder (a fresh clone: nothing
   git ignores comes along: no .venv, no caches, no screenshots);
2. runs ``make test`` there, exactly the README's command. The virtual environments are
   built once, in the scratch folder, and shared by the runs through make's ``VENV`` and
   ``VENV7`` variables, so each run still reinstalls the clone itself (``pip install -e .``)
   but not torch; ``--fresh-venvs`` builds them anew in every clone instead (slower, what a
   brand-new user does);
3. for the loaded runs, first starts one busy-loop process per CPU core and stops them
   afterwards, so the tests compete for every core.

Prints one line per run (pass or fail, wall time, pytest's summary lines) and a total;
exits 1 if any run failed. Logs are kept in the scratch folder (printed at the end) with
``--keep``, or when a run fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^=+ (.*(passed|failed|error).*) =+$|^(\d+ passed.*)$")


def _busy_loops() -> list[subprocess.Popen]:
    """One CPU-bound process per core; stop them with _stop()."""
    loop = "while True:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(os.cpu_count() or 1)]


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
    for process in processes:
        process.wait()


def _summaries(log: str) -> list[str]:
    """pytest's final summary lines ('671 passed in 177.3s', ...), in order."""
    found = []
    for line in log.splitlines():
        match = SUMMARY.match(line.strip())
        if match:
            found.append(next(group for group in match.groups() if group))
    return found


def run_once(scratch: Path, index: int, rev: str, loaded: bool, fresh_venvs: bool) -> dict:
    clone = scratch / f"clone-{index}"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", rev], check=True)
    make = ["make", "test"]
    if not fresh_venvs:
        make += [f"VENV={scratch / 'venv'}", f"VENV7={scratch / 'venv-ipyw7'}"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    busy = _busy_loops() if loaded else []
    started = time.monotonic()
    try:
        result = subprocess.run(make, cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    finally:
        _stop(busy)
    seconds = time.monotonic() - started
    log = scratch / f"run-{index}.log"
    log.write_text(result.stdout)
    if fresh_venvs or result.returncode == 0:
        shutil.rmtree(clone, ignore_errors=True)
    return {"index": index, "loaded": loaded, "passed": result.returncode == 0,
            "seconds": seconds, "summaries": _summaries(result.stdout), "log": log}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet-runs", type=int, default=5)
    parser.add_argument("--loaded-runs", type=int, default=3)
    parser.add_argument("--rev", default="HEAD", help="commit to clone (default HEAD)")
    parser.add_argument("--fresh-venvs", action="store_true",
                        help="build the virtual environments anew in every clone")
    parser.add_argument("--keep", action="store_true", help="keep the logs of passing runs")
    args = parser.parse_args(argv)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="stress-test-suite-"))
    plan = [False] * args.quiet_runs + [True] * args.loaded_runs
    print(f"{len(plan)} runs of `make test` from fresh clones of {rev[:10]} "
          f"({args.loaded_runs} with {os.cpu_count()} busy loops); scratch: {scratch}",
          flush=True)
    results = []
    for index, loaded in enumerate(plan, start=1):
        outcome = run_once(scratch, index, rev, loaded, args.fresh_venvs)
        results.append(outcome)
        print(f"run {index} {'loaded' if loaded else 'quiet '}: "
              f"{'PASS' if outcome['passed'] else 'FAIL'} in {outcome['seconds']:.0f} s; "
              f"{' | '.join(outcome['summaries']) or 'no pytest summary'}", flush=True)
    failed = [r for r in results if not r["passed"]]
    for kind, subset in (("quiet", [r for r in results if not r["loaded"]]),
                         ("loaded", [r for r in results if r["loaded"]])):
        if subset:
            times = sorted(r["seconds"] for r in subset)
            print(f"{kind}: {sum(r['passed'] for r in subset)}/{len(subset)} passed, "
                  f"median {times[len(times) // 2]:.0f} s, max {times[-1]:.0f} s")
    if failed or args.keep:
        print(f"logs: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
