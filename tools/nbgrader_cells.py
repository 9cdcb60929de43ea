"""Write nbgrader's cell metadata into a solution lab, from the lab's own structure.

No one edits nbgrader metadata by hand: ``tools/build_labs.py`` (``make labs``) calls
:func:`with_nbgrader_metadata` on every lab in labs/solutions/, so any lab, including one
written later, is a valid nbgrader source notebook. The structure it reads is the one
CONTRIBUTING.md asks of every lab:

- a code cell holding a ``### BEGIN SOLUTION`` region is an nbgrader *solution* cell,
  its ``grade_id`` the name of the function it defines;
- a code cell whose source starts with ``checks.check_`` is an *autograded test* cell,
  its ``grade_id`` the check's name, worth one point for each learner function it checks
  (``checks.check_resume(save_checkpoint, load_checkpoint, device)`` is worth 2);
- every other cell carries no nbgrader metadata.

A lab's check module may weigh its exercises: ``POINTS = {"check_is_predictions": 3}`` in
``labchecks/labNN.py`` (read without importing it, by :func:`declared_points`). The
course ``tools/classroom.py`` writes uses those points; labs/solutions keeps one point per
function, so that ``make labs`` does not depend on them.

Under nbgrader each test cell shows its score as its value (the grader, hidden in the cell
by tools/classroom.py; labchecks/grading.py), and nbgrader gives the cell that score.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

CHECKS = Path(__file__).resolve().parent.parent / "labchecks"

SCHEMA_VERSION = 3  # nbgrader's cell metadata schema (nbgrader 0.9)
SOLUTION_MARK = "### BEGIN SOLUTION"
CHECK_CALL = re.compile(r"^checks\.(?P<check>check_\w+)\((?P<args>.*)\)\s*$", re.DOTALL)
DEFINED = re.compile(r"^def (\w+)\(", re.MULTILINE)


def solution_functions(notebook: nbformat.NotebookNode) -> list[str]:
    """Return the names of the functions defined in the solution cells, in order."""
    names = []
    for cell in notebook.cells:
        if cell.cell_type == "code" and SOLUTION_MARK in cell.source:
            found = DEFINED.findall(cell.source)
            if not found:
                raise ValueError(
                    f"a solution region sits in a cell that defines no function:\n{cell.source}\n"
                    "Put each exercise in a function (CONTRIBUTING.md, Labs)."
                )
            names.append(found[0])
    return names


def _metadata(grade_id: str, *, solution: bool, points: float | None) -> dict:
    fields = {
        "grade": points is not None,
        "grade_id": grade_id,
        "locked": not solution,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
        "task": False,
    }
    if points is not None:
        fields["points"] = points
    return fields


def declared_points(lab: Path) -> dict[str, float]:
    """``POINTS`` of the lab's check module (``labchecks/labNN.py``), or {} if none."""
    module = CHECKS / f"lab{Path(lab).name[:2]}.py"
    if not module.exists():
        return {}
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "POINTS" for t in targets):
            return dict(ast.literal_eval(node.value))
    return {}


def with_nbgrader_metadata(notebook: nbformat.NotebookNode,
                           points: dict[str, float] | None = None) -> nbformat.NotebookNode:
    """Return a copy of the solution lab ``notebook`` with nbgrader metadata on every cell.

    Idempotent: metadata is computed from the sources, and any older nbgrader metadata is
    replaced. ``points`` ({check name: points}) overrides one point per learner function.
    Raises ValueError when a lab has no check cell, or a check checks nothing the learner
    wrote.
    """
    notebook = nbformat.from_dict(notebook)
    functions = solution_functions(notebook)
    used: set[str] = set()
    graded = 0
    for cell in notebook.cells:
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type != "code":
            continue
        if SOLUTION_MARK in cell.source:
            grade_id = DEFINED.findall(cell.source)[0]
            cell.metadata["nbgrader"] = _metadata(_unique(grade_id, used), solution=True,
                                                  points=None)
            continue
        call = CHECK_CALL.match(cell.source.strip())
        if call is None:
            continue
        checked = [name for name in functions if re.search(rf"\b{name}\b", call["args"])]
        if not checked:
            raise ValueError(
                f"`{cell.source.strip()}` checks none of the learner's functions "
                f"({', '.join(functions)}); pass the function the exercise asks for."
            )
        worth = (points or {}).get(call["check"], len(checked))
        cell.metadata["nbgrader"] = _metadata(_unique(call["check"], used), solution=False,
                                              points=worth)
        graded += 1
    if functions and not graded:
        raise ValueError("no check cell (a cell starting with `checks.check_`) in this lab")
    return notebook


def points(notebook: nbformat.NotebookNode) -> dict[str, float]:
    """Return ``{grade_id: points}`` for the autograded test cells of ``notebook``."""
    return {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"]
            for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")}


def _unique(grade_id: str, used: set[str]) -> str:
    """``grade_id``, or ``grade_id-2``, ``-3``... if already taken in this notebook."""
    candidate, n = grade_id, 1
    while candidate in used:
        n += 1
        candidate = f"{grade_id}-{n}"
    used.add(candidate)
    return candidate
