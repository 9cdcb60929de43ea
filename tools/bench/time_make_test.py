"""Time `make test` (after installation): wall time of each run, median, and where it goes.

    .venv/bin/python -m tools.bench.time_make_test [--runs 3]

Each run is `make test PYTEST_ARGS=--junitxml=...`; the breakdown sums the test time of
each file (xdist runs several at a time, so the files add up to more than the wall time) and
times the widget tests on ipywidgets 7 (which `make test` runs alongside) on their own. Run it on
an idle machine: it measures, it asserts nothing. No test runs it.

With ``--write-schedule`` it also writes tests/schedule.json, the files longest first, which
conftest.py uses to hand the longest files to the test workers first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEDULE = ROOT / "tests" / "schedule.json"


def file_of(case: ET.Element) -> str:
    """The file a junit test case came from, as pytest names it (``tests/unit/test_x.py``,
    ``notebooks/00_devices.ipynb``)."""
    if case.get("file"):
        return case.get("file")
    name = case.get("classname", "").replace(".", "/")
    return name[: -len("/ipynb")] + ".ipynb" if name.endswith("/ipynb") else name + ".py"


def _failures(report: Path) -> str:
    """Each failed test's message and the end of its traceback, from the junit report."""
    if not report.exists():
        return ""
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for failure in [*case.iter("failure"), *case.iter("error")]:
            found.append(f"\n--- {case.get('classname')}::{case.get('name')}\n"
                         + "\n".join((failure.text or "").splitlines()[-25:]))
    return "".join(found)


def one_run(folder: Path, number: int) -> tuple[float, dict[str, float]]:
    report = folder / f"run{number}.xml"
    started = time.perf_counter()
    done = subprocess.run(["make", "--no-print-directory", "test",
                           f"PYTEST_ARGS=--junitxml={report}"], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode:  # a failed run is no measurement: say what failed, then stop
        raise SystemExit(f"run {number}: make test failed (exit {done.returncode}):\n"
                         + "\n".join((done.stdout + done.stderr).splitlines()[-40:])
                         + _failures(report))
    wall = time.perf_counter() - started
    per_file: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        per_file[file_of(case)] += float(case.get("time", 0))
    return wall, dict(per_file)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write-schedule", action="store_true",
                        help="write tests/schedule.json (the files, longest first)")
    options = parser.parse_args()
    runs = options.runs
    walls, files = [], defaultdict(list)
    with tempfile.TemporaryDirectory() as folder:
        for number in range(runs):
            wall, per_file = one_run(Path(folder), number)
            walls.append(wall)
            for name, seconds in per_file.items():
                files[name].append(seconds)
            print(f"run {number + 1}: make test {wall:.0f} s", flush=True)
    started = time.perf_counter()
    subprocess.run(["make", "--no-print-directory", "test-ipywidgets7"], cwd=ROOT, check=True,
                   capture_output=True)
    widgets7 = time.perf_counter() - started
    print(f"\nmake test, median of {runs}: {statistics.median(walls):.0f} s "
          f"(runs: {', '.join(f'{w:.0f}' for w in walls)}); test-ipywidgets7, run alongside, "
          f"takes about {widgets7:.0f} s on its own")
    print("\nslowest files (median test seconds; the workers run at once):")
    medians = sorted(((statistics.median(v), k) for k, v in files.items()), reverse=True)
    for seconds, name in medians[:15]:
        print(f"  {seconds:6.1f}  {name}")
    print(f"  {sum(s for s, _ in medians):6.1f}  all {len(medians)} files")
    if options.write_schedule:
        write_schedule({name: seconds for seconds, name in medians})


def write_schedule(seconds: dict[str, float]) -> None:
    """tests/schedule.json: each file's median seconds, longest first."""
    ordered = dict(sorted(((k, round(v, 1)) for k, v in seconds.items()), key=lambda kv: -kv[1]))
    SCHEDULE.write_text(json.dumps(ordered, indent=1) + "\n")
    print(f"wrote {SCHEDULE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
