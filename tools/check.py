"""Check one changed notebook or lab in about a minute: what that change can break, in order.

    python -m tools.check notebooks/01_tensor_to.ipynb     # make check NB=...
    python -m tools.check labs/solutions/02_copy_pitfall.ipynb   # or labs/02_copy_pitfall.ipynb

The steps, each stopping the check when it fails:

1. its stored outputs, from a real run: a lesson notebook is re-run in place
   (tools/run_notebooks.py); a lab, student or solution, is rebuilt from its solution and both
   versions are re-run (tools/build_labs.py, that lab only);
2. what is derived from the outputs and the cells, rewritten after them (tools/build_nav.py: the
   README table with its reading times, each notebook's badges, navigation and folds, the
   error index), so the reading-time estimate sees the new outputs;
3. that notebook (for a lab, both versions) under nbval in strict mode, and the repository
   checks (tests/repo: generated files up to date, hygiene, claims, reading-time budget, lint).

The whole suite is `make test`; this is the loop for one notebook (CONTRIBUTING.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools import build_labs, build_nav, lessons, run_notebooks


def check(path: Path) -> int:
    """Run the three steps for the notebook or lab at ``path``; return the exit status (0: ok)."""
    notebooks = targets(path)
    if path.parent == lessons.NOTEBOOKS:
        step("re-run the notebook", f"tools.run_notebooks {relative(path)}")
        status = run_notebooks.main([str(path)])
    else:
        step("rebuild and re-run the lab, both versions", f"tools.build_labs {relative(path)}")
        status = build_labs.main([str(path)])
    if status:
        return status
    step("refresh what is generated from the notebooks", "tools.build_nav")
    status = build_nav.main([])
    if status:
        return status
    arguments = [*map(relative, notebooks), "tests/repo"]
    step("that notebook under strict nbval, and the repository checks",
         "pytest " + " ".join(arguments))
    return subprocess.call([sys.executable, "-m", "pytest", *arguments], cwd=lessons.ROOT)


def targets(path: Path) -> list[Path]:
    """The notebooks a change to ``path`` puts under nbval: itself, or both versions of a lab.

    Raises ValueError, naming what is accepted, for anything else."""
    name = path.name
    if path.parent == lessons.NOTEBOOKS and path in lessons.lesson_notebooks():
        return [path]
    if path.parent in (lessons.LABS, lessons.SOLUTIONS) and (lessons.SOLUTIONS / name).exists():
        return [lessons.LABS / name, lessons.SOLUTIONS / name]
    raise ValueError(
        f"{path}: not a lesson notebook (notebooks/NN_topic.ipynb) or a lab "
        "(labs/NN_topic.ipynb, labs/solutions/NN_topic.ipynb) of this repository"
    )


def relative(path: Path) -> str:
    return path.relative_to(lessons.ROOT).as_posix()


def step(what: str, command: str) -> None:
    print(f"\n== make check: {what} ({command})", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make check NB=notebooks/01_tensor_to.ipynb (or a lab: labs/NN_topic.ipynb, "
              "labs/solutions/NN_topic.ipynb)", file=sys.stderr)
        return 2
    path = Path(argv[0]).resolve()
    try:
        targets(path)
    except ValueError as error:
        print(f"make check: {error}", file=sys.stderr)
        return 2
    return check(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
