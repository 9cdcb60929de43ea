"""Set up an nbgrader course folder with every lab as an assignment (docs/teaching.md).

Run it in the teacher's environment (``make teacher`` builds .venv-teacher with nbgrader)::

    .venv-teacher/bin/python -m tools.classroom ~/course          # every lab
    .venv-teacher/bin/python -m tools.classroom ~/course 02 05    # some labs
    .venv-teacher/bin/python -m tools.classroom ~/course --failed 02_copy_pitfall
    .venv-teacher/bin/python -m tools.classroom ~/course --suspicious 02_copy_pitfall

It writes ``source/NN_topic/NN_topic.ipynb`` for each lab (the solution lab, outputs cleared,
with a classroom header instead of the self-study one, and the grader as a hidden part of
every autograded test cell), an ``nbgrader_config.py`` if there is none, and runs ``nbgrader
generate_assignment`` for each, which writes ``release/NN_topic/``. A source you edited is
kept (it says so) unless you pass ``--force``, which keeps a dated copy first. Then collect,
``nbgrader autograde NN_topic`` and ``nbgrader generate_feedback NN_topic`` as in nbgrader's
own documentation; ``--failed`` lists the submissions autograde could not grade, and
``--suspicious`` the answer cells that touch the grading machinery.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from tools import build_nav, lessons, nbgrader_cells

COURSE_ID = "device-placement"
#: nbgrader's per-cell limit (labchecks/grading.py's CELL_TIMEOUT_S, which names it in
#: the message); the grader stops a check a little earlier, with its own message
#: (CHECK_TIME_LIMIT_S). A lab's cells run in about a second.
#: The grader the hidden parts load (the checks' package's grading.py).
GRADER = lessons.ROOT / "labchecks" / "grading.py"
#: What the labs write next to the notebook: not copied into autograded/ or feedback/.
IGNORED = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "checkpoints",
           "scratch_lab08_libraries", "scratch_lab09", "scratch_lab10", "*.pt", "*.pth", "*.distcp",
           "my-work"]
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
# Files the labs write (checkpoints) stay out of autograded/ and of the feedback you return.
c.CourseDirectory.ignore = {ignored!r}
# A lab's cells run in about a second; a cell still running after {timeout} s is stuck. The
# grader stops a check at {check} s with "look for a loop that never ends"; this catches the
# rest (a loop in an answer cell): the kernel is interrupted, the cell shows the same advice
# (labchecks/grading.py, CELL_TIMEOUT_S: change both together) and the next cell runs.
c.ExecutePreprocessor.timeout = {timeout}
c.ExecutePreprocessor.interrupt_on_timeout = True
c.ExecutePreprocessor.error_on_timeout = {{
    "ename": "CellTimeout",
    "evalue": "this cell did not finish in {timeout} s: look for a loop that never ends",
    "traceback": ["this cell did not finish in {timeout} s: look for a loop that never ends"],
}}
# Every kernel nbgrader starts first runs labchecks.grading.KERNEL_SETUP, so that under
# autograde a cell the timeout stops shows that advice, not a KeyboardInterrupt traceback.
c.ExecutePreprocessor.extra_arguments = {kernel_arguments!r}
# A student who deleted a test cell gets it back (and its score), not a missing line.
c.OverwriteCells.add_missing_cells = True
'''
#: The first cell of a released assignment (instead of Colab, Binder and `make lab`).
CLASSROOM_HEADER = (
    "**Graded assignment.** Work in this notebook and save it; your teacher collects it "
    "from here. Each check cell tells you ✅ right, ❌ what to rethink, or ⏳ not tried yet; "
    "*Validate* runs them all. The lesson it practises is notebook {lesson} of the course."
)
MANIFEST = ".lessons-sources.json"


def assignment_name(lab: Path) -> str:
    """The nbgrader assignment a lab becomes: its file name without .ipynb (``02_copy_pitfall``)."""
    return lab.stem


def source_notebook(solution_path: Path) -> nbformat.NotebookNode:
    """Return the nbgrader source for a solution lab: nbgrader metadata with the lab's
    points, the classroom header, the grader hidden in each test cell, no outputs."""
    points = nbgrader_cells.declared_points(solution_path)
    solution = nbgrader_cells.with_nbgrader_metadata(build_nav.read(solution_path), points)
    source = build_nav.with_generated_cells(solution, lessons.LABS / solution_path.name)
    lesson = next(iter(lessons.NOTEBOOKS.glob(f"{solution_path.name[:2]}_*.ipynb")), None)
    header = CLASSROOM_HEADER.format(lesson=lesson.stem if lesson else solution_path.stem)
    cells = []
    for cell in source.cells:
        tags = build_nav.tags(cell)
        if build_nav.FOOTER_TAG in tags:
            continue  # links to ../notebooks and ../README.md, which a release does not have
        if build_nav.HEADER_TAG in tags:
            cell.source = header
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("grade") and not grading.get("solution"):
            call = nbgrader_cells.CHECK_CALL.match(cell.source.strip())
            cell.source = f"{hidden_test(call['check'], grading['points'], call['args'])}\n" \
                          f"{cell.source}"
        cells.append(cell)
    source.cells = cells
    return source


def hidden_test(check: str, points: float, arguments: str) -> str:
    """The grader's hidden part for ``checks.check(arguments)`` (labchecks/grading.py)."""
    from labchecks.grading import hidden_test as write
    return write(check, points, " ".join(arguments.split()), str(GRADER))


def released(notebook: nbformat.NotebookNode) -> list[tuple]:
    """(id, type, source) of each cell as a student sees it: hidden tests removed."""
    hidden = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.DOTALL)
    return [(c.get("id"), c.cell_type, hidden.sub("", c.source)) for c in notebook.cells]


def select(numbers: list[str]) -> list[Path]:
    """The solution labs whose two-digit numbers are in ``numbers`` (all when empty)."""
    labs = lessons.solution_labs()
    chosen = [lab for lab in labs if not numbers or lab.name[:2] in numbers]
    unknown = set(numbers) - {lab.name[:2] for lab in labs}
    if unknown:
        raise SystemExit(f"no lab numbered {', '.join(sorted(unknown))}; the labs are "
                         f"{', '.join(lab.name[:2] for lab in labs)}")
    return chosen


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_sources(course: Path, labs: list[Path], course_id: str = COURSE_ID,
                  force: bool = False) -> list[Path]:
    """Write ``course/source/NN_topic/NN_topic.ipynb`` for each lab, and a config if none.

    A source that differs from what this tool last wrote there (the teacher edited it) is
    kept, and named in the returned list, unless ``force``: then a dated copy is kept first.
    """
    course.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG.format(root=str(course.resolve()), course=course_id,
                                        ignored=IGNORED, timeout=_grader_constant(
                                            "CELL_TIMEOUT_S"),
                                        check=_grader_constant("CHECK_TIME_LIMIT_S"),
                                        kernel_arguments=kernel_arguments()),
                            encoding="utf-8")
    manifest_path = course / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    kept = []
    for lab in labs:
        folder = course / "source" / assignment_name(lab)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / lab.name
        text = build_nav.serialize(source_notebook(lab))
        key = target.relative_to(course).as_posix()
        if target.exists():
            current = target.read_text(encoding="utf-8")
            edited = current != text and _digest(current) != manifest.get(key)
            if edited and not force:
                kept.append(target)
                continue
            if edited:
                stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
                target.with_name(f"{target.stem}.edited-{stamp}.ipynb.bak").write_text(
                    current, encoding="utf-8")
        target.write_text(text, encoding="utf-8")
        manifest[key] = _digest(text)
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return kept


def kernel_arguments() -> list[str]:
    """The kernel's command-line arguments that run the grader's ``KERNEL_SETUP`` at start
    (read from labchecks/grading.py, as the other constants, without importing it)."""
    text = GRADER.read_text(encoding="utf-8")
    setup = re.search(r'^KERNEL_SETUP = "([^"\n]+)"$', text, re.MULTILINE)[1]
    return [f"--IPKernelApp.exec_lines={setup}"]


def _grader_constant(name: str) -> int:
    text = GRADER.read_text(encoding="utf-8")
    return int(re.search(rf"^{name} = (\d+)", text, re.MULTILINE)[1])


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the nbgrader command line in ``course``; exit with its message if it fails
    (unless ``check`` is False: then return what it did)."""
    command = [sys.executable, "-m", "nbgrader", *args]
    # nbgrader runs `alembic` from PATH: put this environment's scripts first.
    scripts = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")])}
    done = subprocess.run(command, cwd=course, capture_output=True, text=True, env=env)
    if check and done.returncode != 0:
        raise SystemExit(f"`nbgrader {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")
    return done


def failed_submissions(course: Path, assignment: str) -> list[str]:
    """Students with a submission of ``assignment`` that autograde left ungraded (its kernel
    died, or the notebook could not be read): nbgrader then keeps no autograded copy, makes
    no feedback, and its grades.csv shows 0, the same as not submitting."""
    submitted = sorted((course / "submitted").glob(f"*/{assignment}"))
    return [folder.parent.name for folder in submitted
            if not any((course / "autograded" / folder.parent.name / assignment).glob("*.ipynb"))]


#: What no answer needs and a cheat does: the grading machinery, the checks, the kernel.
SUSPICIOUS = re.compile(r"NBGRADER|os\.environ|putenv|\bchecks\s*\.\s*\w+\s*=|labchecks|"
                        r"setattr|__code__|__wrapped|sys\.modules|builtins|importlib|"
                        r"get_ipython|displayhook|showtraceback|ctypes|\bgc\.|inspect\.stack|"
                        r"sys\._getframe|signal\.|os\._exit|IS_QUESTIONS|grading")


def suspicious_cells(course: Path, assignment: str) -> list[tuple[str, str, str]]:
    """(student, cell id, matching line) for each cell a student wrote or changed (answer
    cells, added cells, edited given cells) in a submission of ``assignment`` that mentions
    the grading machinery: read those by hand."""
    given = {}
    for path in (course / "release" / assignment).glob("*.ipynb"):
        given.update({c.get("id"): c.source for c in nbformat.read(path, as_version=4).cells})
    found = []
    for path in sorted((course / "submitted").glob(f"*/{assignment}/*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            answer = cell.metadata.get("nbgrader", {}).get("solution")
            if cell.cell_type != "code" or (not answer and given.get(cell.get("id")) ==
                                            cell.source):
                continue
            for line in cell.source.splitlines():
                if SUSPICIOUS.search(line):
                    found.append((path.parts[-3], cell.get("id", "?"), line.strip()))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path, help="the course folder (created if missing)")
    parser.add_argument("labs", nargs="*", help="two-digit lab numbers (default: every lab)")
    parser.add_argument("--force", action="store_true",
                        help="replace sources you edited (a dated copy of each is kept)")
    parser.add_argument("--failed", metavar="ASSIGNMENT",
                        help="list the submissions autograde could not grade, and stop")
    parser.add_argument("--suspicious", metavar="ASSIGNMENT",
                        help="list answer cells that touch the grading machinery, and stop")
    args = parser.parse_args(argv)
    if args.failed:
        failed = failed_submissions(args.course, args.failed)
        for student in failed:
            print(f"{student}: not graded (no autograded/{student}/{args.failed}/): re-run "
                  f"`nbgrader autograde {args.failed} --student {student} --force` and read "
                  "its log, or grade it by hand")
        print(f"{len(failed)} submission(s) of {args.failed} not graded")
        return 1 if failed else 0
    if args.suspicious:
        found = suspicious_cells(args.course, args.suspicious)
        for student, cell, line in found:
            print(f"{student} [{cell}]: {line}")
        print(f"{len({s for s, _, _ in found})} submission(s) of {args.suspicious} to read by hand")
        return 0
    labs = select(args.labs)
    kept = write_sources(args.course, labs, force=args.force)
    for path in kept:
        print(f"kept your edited {path} (not overwritten; --force replaces it, keeping a copy)")
    for lab in labs:
        nbgrader(args.course, "generate_assignment", assignment_name(lab), "--force")
        print(f"released: {args.course / 'release' / assignment_name(lab) / lab.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
