"""Set up an nbgrader course folder with every lab as an assignment (docs/teaching.md).

Run it in the teacher's environment (``make teacher`` builds .venv-teacher with nbgrader)::

    .venv-teacher/bin/python -m tools.classroom ~/course          # every lab
    .venv-teacher/bin/python -m tools.classroom ~/course 02 05    # some labs

It writes ``source/NN_topic/NN_topic.ipynb`` for each lab (the solution lab, outputs cleared,
with the student lab's badges and navigation), an ``nbgrader_config.py`` if there is none,
and runs ``nbgrader generate_assignment`` for each, which writes ``release/NN_topic/``: the
same notebook as labs/NN_topic.ipynb. Then collect, ``nbgrader autograde NN_topic`` and
``nbgrader generate_feedback NN_topic`` as in nbgrader's own documentation.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import nbformat

from tools import build_nav, lessons, nbgrader_cells

COURSE_ID = "device-placement"
CONFIG = '''\
# nbgrader's configuration for this course, written by tools/classroom.py (edit freely).
import os

# The kernels nbgrader starts inherit these: grade every submission on the CPU (with meta
# as the second device), whatever the grading machine has, and show quizzes as text.
os.environ.setdefault("LESSONS_DEVICE", "cpu")
os.environ.setdefault("LESSONS_WIDGETS", "text")

c = get_config()  # noqa: F821 - nbgrader provides get_config
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course!r}
# A lab runs in seconds on a CPU; leave room for a busy grading machine.
c.ExecutePreprocessor.timeout = 300
'''


def assignment_name(lab: Path) -> str:
    """The nbgrader assignment a lab becomes: its file name without .ipynb (``02_copy_pitfall``)."""
    return lab.stem


def source_notebook(solution_path: Path) -> nbformat.NotebookNode:
    """Return the nbgrader source for a solution lab: nbgrader metadata, the student lab's
    badges and navigation, no outputs."""
    solution = nbgrader_cells.with_nbgrader_metadata(build_nav.read(solution_path))
    source = build_nav.with_generated_cells(solution, lessons.LABS / solution_path.name)
    for cell in source.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return source


def select(numbers: list[str]) -> list[Path]:
    """The solution labs whose two-digit numbers are in ``numbers`` (all when empty)."""
    labs = lessons.solution_labs()
    chosen = [lab for lab in labs if not numbers or lab.name[:2] in numbers]
    unknown = set(numbers) - {lab.name[:2] for lab in labs}
    if unknown:
        raise SystemExit(f"no lab numbered {', '.join(sorted(unknown))}; the labs are "
                         f"{', '.join(lab.name[:2] for lab in labs)}")
    return chosen


def write_sources(course: Path, labs: list[Path], course_id: str = COURSE_ID) -> None:
    """Write ``course/source/NN_topic/NN_topic.ipynb`` for each lab, and a config if none."""
    course.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG.format(root=str(course.resolve()), course=course_id),
                          encoding="utf-8")
    for lab in labs:
        folder = course / "source" / assignment_name(lab)
        folder.mkdir(parents=True, exist_ok=True)
        text = build_nav.serialize(source_notebook(lab))
        (folder / lab.name).write_text(text, encoding="utf-8")


def nbgrader(course: Path, *args: str) -> None:
    """Run the nbgrader command line in ``course``; exit with its message if it fails."""
    command = [sys.executable, "-m", "nbgrader", *args]
    # nbgrader runs `alembic` from PATH: put this environment's scripts first.
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}
    done = subprocess.run(command, cwd=course, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"`nbgrader {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path, help="the course folder (created if missing)")
    parser.add_argument("labs", nargs="*", help="two-digit lab numbers (default: every lab)")
    args = parser.parse_args(argv)
    labs = select(args.labs)
    write_sources(args.course, labs)
    for lab in labs:
        nbgrader(args.course, "generate_assignment", assignment_name(lab), "--force")
        print(f"released: {args.course / 'release' / assignment_name(lab) / lab.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
