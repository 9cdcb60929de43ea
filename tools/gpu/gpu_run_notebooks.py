"""Run every notebook and lab solution on the machine's own device and keep what it printed.

    python -m tools.gpu.gpu_run_notebooks OUT_FOLDER [NOTEBOOK ...]

Unlike tools/run_notebooks.py (which makes the stored CPU outputs), this leaves
``LESSONS_DEVICE`` unset, so on a GPU machine every notebook takes its GPU branches. It never
writes into the repository: each executed notebook goes to OUT_FOLDER under its own name, and
a line per notebook (passed, or the first failing cell and its error, and its wall time) is
appended to OUT_FOLDER/summary.txt, so that one notebook can run alone after the others (for
its timings). Cells tagged ``raises-exception`` may raise, as in the tests. Notebooks run in
parallel, one fresh kernel each. Used by tools/gpu/gpu_verify.sh (docs/gpu-verification.md).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
from nbclient.exceptions import CellExecutionError

from tools import lessons, run_notebooks


def run_one(path: Path, out: Path) -> str:
    """Execute ``path``; write the executed copy under ``out``; return its summary line."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        run_notebooks.client(notebook, path).execute()
        verdict = "passed"
    except CellExecutionError as error:
        first = str(error).strip().splitlines()
        verdict = "FAILED: " + " | ".join(line for line in first[-4:] if line.strip())[:600]
    except Exception as error:  # noqa: BLE001 - a dead kernel or timeout is a result too
        verdict = f"FAILED ({type(error).__name__}): {error}"[:600]
    seconds = time.perf_counter() - start
    name = f"{path.parent.name}__{path.name}"
    (out / name).write_text(nbformat.writes(notebook), encoding="utf-8")
    return f"{path.relative_to(lessons.ROOT)}: {verdict} ({seconds:.1f} s)"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    paths = [Path(a).resolve() for a in argv[1:]] or [
        *lessons.lesson_notebooks(), *lessons.solution_labs()]
    os.environ.pop("LESSONS_DEVICE", None)
    os.environ.setdefault("LESSONS_WIDGETS", "text")
    with ProcessPoolExecutor(max_workers=min(8, len(paths))) as pool:
        lines = list(pool.map(run_one, paths, [out] * len(paths)))
    with (out / "summary.txt").open("a", encoding="utf-8") as summary:  # a run may come in parts
        summary.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(": passed" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
