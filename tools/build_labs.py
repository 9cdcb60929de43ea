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

    python tools/build_labs.py            # regenerate and re-run every lab
    python tools/build_labs.py --check    # exit 1 if a student lab is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_nav  # noqa: E402
import lessons  # noqa: E402
import nbgrader_cells  # noqa: E402
import run_notebooks  # noqa: E402

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
    generated = {build_nav.HEADER_TAG, build_nav.FOOTER_TAG}
    return [(c.cell_type, c.source) for c in notebook.cells
            if not generated & set(c.metadata.get("tags", []))]


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
    student_path.write_text(build_nav.serialize(student), encoding="utf-8")
    student = run_notebooks.execute(student_path)
    student_path.write_text(build_nav.serialize(student), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale student labs")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_labs()
        for path in stale:
            print(f"out of date: {path.relative_to(lessons.ROOT)} (run: make labs)")
        return 1 if stale else 0
    build_nav.main([])  # badges and navigation first, so both versions carry them
    for solution_path in lessons.solution_labs():
        build(solution_path)
        print(f"built: labs/{solution_path.name} from labs/solutions/{solution_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
