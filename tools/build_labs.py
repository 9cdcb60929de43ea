"""Generate each student lab from its solution, and run both so their outputs are true.

labs/solutions/NN_topic.ipynb is the source of truth. Solution code sits between
nbgrader-compatible markers::

    ### BEGIN SOLUTION
    return batch.to(device)
    ### END SOLUTION

In the student version labs/NN_topic.ipynb each such region becomes nbgrader's stub
(``# YOUR CODE HERE`` and ``raise NotImplementedError()``), so the lab's checks
report "not attempted yet" until the learner writes code. The solution labs also get
nbgrader's cell metadata (tools/nbgrader_cells.py), so each is an nbgrader source notebook;
nbgrader's own ``generate_assignment`` makes the same student version (tests/classroom/).
Usage:

    python -m tools.build_labs            # regenerate and re-run every lab
    python -m tools.build_labs labs/02_copy_pitfall.ipynb   # one lab (student or solution path)
    python -m tools.build_labs --check    # exit 1 if a student lab is stale
    python -m tools.build_labs --force    # overwrite student labs that hold changes (backed up)

A student lab whose cells differ both from what the generator would write now and from
what it wrote last time (recorded in the lab's metadata) holds someone's work, a learner's
answers for example: it is not overwritten unless ``--force`` is given, and then a copy is
kept in my-work/labs/ first. Outputs do not count: running a lab changes nothing here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import nbformat

from tools import build_nav, lessons, nbgrader_cells, run_notebooks, workspace

FINGERPRINT_KEY = "generated_cells_sha256"  # in each student lab's metadata.lessons
SOLUTION_REGION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[ \t]*\n.*?^[ \t]*### END SOLUTION[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def strip_solutions(source: str) -> str:
    """Return ``source`` with every solution region replaced by nbgrader's stub."""
    def stub(found: re.Match) -> str:
        indent = found.group("indent")
        return f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()"

    stripped = SOLUTION_REGION.sub(stub, source)
    if "### BEGIN SOLUTION" in stripped or "### END SOLUTION" in stripped:
        raise ValueError(f"unbalanced solution markers in:\n{source}")
    return stripped


def student_version(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Return the student notebook for ``solution``: solutions stubbed, outputs cleared."""
    student = nbformat.from_dict(solution)
    for cell in student.cells:
        cell.metadata.pop("nbgrader", None)  # a learner's lab is a plain notebook
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source)
            cell.outputs = []
            cell.execution_count = None
    return student


def _sources(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """The cells that matter for staleness: type and source, generated cells left out."""
    return [(c.cell_type, c.source) for c in notebook.cells
            if not build_nav.GENERATED_TAGS & set(c.metadata.get("tags", []))]


def cells_fingerprint(notebook: nbformat.NotebookNode) -> str:
    """Return the sha256 of what a learner can change: each cell's type and source.

    Generated cells (navigation, the setup helpers), outputs and metadata are left out, so
    regenerating navigation or running the lab changes nothing. A copy made before the
    helpers had a cell of their own has them at the top of its setup cell: left out too.
    """
    cells = []
    for cell in notebook.cells:
        cell_tags = set(cell.metadata.get("tags", []))
        if build_nav.GENERATED_TAGS & cell_tags:
            continue
        text = build_nav.without_preamble(cell.source) if build_nav.SETUP_TAG in cell_tags \
            else cell.source
        cells.append([cell.cell_type, text])
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()


def unsaved_work(student_path: Path, expected: nbformat.NotebookNode) -> str | None:
    """Return what overwriting ``student_path`` with ``expected`` would lose, or None.

    None when the lab is missing, or its cells are what the generator writes now or wrote
    last time (``metadata.lessons.generated_cells_sha256``); otherwise a sentence naming
    the first cell that is someone's work.
    """
    if not student_path.exists():
        return None
    try:
        current = nbformat.read(student_path, as_version=4)
    except Exception as error:  # a hand-damaged file is still someone's work
        return f"it cannot be read as a notebook ({type(error).__name__})"
    fingerprint = cells_fingerprint(current)
    recorded = current.metadata.get("lessons", {}).get(FINGERPRINT_KEY)
    if fingerprint in (cells_fingerprint(expected), recorded):
        return None
    generated = {(c.cell_type, c.source) for c in expected.cells}
    changed = [c for c in current.cells if (c.cell_type, c.source) not in generated
               and build_nav.HEADER_TAG not in c.metadata.get("tags", [])
               and build_nav.FOOTER_TAG not in c.metadata.get("tags", [])]
    if not changed:
        return "cells were deleted or moved since it was generated"
    first_line = next((line for line in changed[0].source.splitlines() if line.strip()), "")
    return (f"{len(changed)} cell(s) differ from the generated lab, the first starting "
            f"{first_line.strip()!r}")


def backup(student_path: Path) -> Path:
    """Copy ``student_path`` to my-work/labs/NN_topic-backup-DATE.ipynb; return the copy."""
    folder = lessons.ROOT / workspace.FOLDER / "labs"
    folder.mkdir(parents=True, exist_ok=True)
    kept = workspace.dated_name(folder / f"{student_path.stem}-backup{student_path.suffix}")
    shutil.copy2(student_path, kept)
    return kept

def _grading(notebook: nbformat.NotebookNode) -> list[dict | None]:
    """Each cell's nbgrader metadata (None where it has none)."""
    return [c.metadata.get("nbgrader") for c in notebook.cells]


def stale_labs() -> list[Path]:
    """Return the labs that differ from what ``make labs`` writes: a student lab whose cells
    differ from what its solution generates, or a solution lab whose nbgrader metadata does."""
    stale = []
    for solution_path in lessons.solution_labs():
        student_path = lessons.LABS / solution_path.name
        solution = nbformat.read(solution_path, as_version=4)
        if _grading(solution) != _grading(nbgrader_cells.with_nbgrader_metadata(solution)):
            stale.append(solution_path)
        expected = _sources(student_version(solution))
        if not student_path.exists():
            stale.append(student_path)
        elif _sources(nbformat.read(student_path, as_version=4)) != expected:
            stale.append(student_path)
    return stale


def build(solution_path: Path) -> None:
    """Write nbgrader metadata into the solution and run it in place, then write and run its
    student version."""
    source = nbgrader_cells.with_nbgrader_metadata(nbformat.read(solution_path, as_version=4))
    solution_path.write_text(build_nav.serialize(source), encoding="utf-8")
    solution = run_notebooks.execute(solution_path)
    solution_path.write_text(build_nav.serialize(solution), encoding="utf-8")
    student_path = lessons.LABS / solution_path.name
    student = build_nav.with_generated_cells(student_version(solution), student_path)
    student.metadata.setdefault("lessons", {})[FINGERPRINT_KEY] = cells_fingerprint(student)
    student_path.write_text(build_nav.serialize(student), encoding="utf-8")
    student = run_notebooks.execute(student_path)
    student_path.write_text(build_nav.serialize(student), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale student labs")
    parser.add_argument("--force", action="store_true",
                        help="overwrite student labs that hold changes, keeping a copy of each "
                             "in my-work/labs/ first")
    parser.add_argument("labs", nargs="*", type=Path,
                        help="only these labs (student or solution paths); default: every lab")
    args = parser.parse_args(argv)
    solutions = lessons.solution_labs()
    if args.labs:
        solutions = [lessons.SOLUTIONS / path.name for path in args.labs]
        missing = [path for path in solutions if not path.exists()]
        if missing:
            print(f"no such lab: {', '.join(str(path) for path in missing)}", file=sys.stderr)
            return 2
    if args.check:
        stale = stale_labs()
        for path in stale:
            print(f"out of date: {path.relative_to(lessons.ROOT)} (run: make labs)")
        return 1 if stale else 0
    at_risk = []
    for solution_path in solutions:
        student_path = lessons.LABS / solution_path.name
        expected = student_version(nbformat.read(solution_path, as_version=4))
        reason = unsaved_work(student_path, expected)
        if reason:
            at_risk.append((student_path, reason))
    if at_risk and not args.force:
        for path, reason in at_risk:
            print(f"not overwritten: {path.relative_to(lessons.ROOT)}: {reason}.")
        print("Nothing was changed. Learners' answers belong in my-work/ (`make lab` copies the "
              "labs there). To regenerate anyway, keeping a copy of each lab above in "
              "my-work/labs/: python -m tools.build_labs --force")
        return 1
    for path, _ in at_risk:
        kept = backup(path)
        print(f"kept: {path.relative_to(lessons.ROOT)} as {kept.relative_to(lessons.ROOT)}")
    build_nav.main([])  # badges and navigation first, so both versions carry them
    for solution_path in solutions:
        build(solution_path)
        print(f"built: labs/{solution_path.name} from labs/solutions/{solution_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
