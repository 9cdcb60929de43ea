"""Student labs are generated from their solutions and carry no solution code."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tools import build_labs, lessons

SOLUTIONS = lessons.solution_labs()


def test_every_solution_has_a_student_lab_and_a_lesson():
    assert SOLUTIONS, "no labs found in labs/solutions/"
    for solution in SOLUTIONS:
        assert (lessons.LABS / solution.name).exists(), f"run: make labs ({solution.name})"
        assert list(lessons.NOTEBOOKS.glob(f"{solution.name[:2]}_*.ipynb")), solution.name


def test_student_labs_are_up_to_date_with_their_solutions():
    stale = [p.name for p in build_labs.stale_labs()]
    assert not stale, f"stale student labs: {stale}; run `make labs` and commit"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_student_lab_has_a_stub_for_every_solution_region(solution):
    def code(path: Path) -> str:
        cells = nbformat.read(path, as_version=4).cells
        return "\n".join(c.source for c in cells if c.cell_type == "code")

    solution_text, student_text = code(solution), code(lessons.LABS / solution.name)
    assert "### BEGIN SOLUTION" not in student_text
    regions = solution_text.count("### BEGIN SOLUTION")
    assert regions >= 3, "a lab has at least three exercises"
    assert student_text.count("raise NotImplementedError()") == regions


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_every_exercise_is_checked_by_a_later_cell(solution):
    import re

    cells = [c.source for c in nbformat.read(solution, as_version=4).cells if c.cell_type == "code"]
    for index, source in enumerate(cells):
        if "### BEGIN SOLUTION" in source:
            name = re.search(r"^def (\w+)", source, re.M).group(1)
            later = "\n".join(cells[index + 1:])
            checked = re.search(rf"checks\.check_\w+\([^)]*\b{name}\b", later)
            assert checked, f"{name} is never checked"


@pytest.mark.parametrize("solution", SOLUTIONS, ids=lambda p: p.name)
def test_student_lab_reports_not_attempted_and_solution_passes(solution):
    def outputs(path: Path) -> list[str]:
        cells = nbformat.read(path, as_version=4).cells
        return [o.get("data", {}).get("text/plain", "") for c in cells if c.cell_type == "code"
                and c.source.startswith("checks.check_") for o in c.outputs]

    assert outputs(solution) and all(text.startswith("✅") for text in outputs(solution))
    student = outputs(lessons.LABS / solution.name)
    assert student and all(text.startswith("⏳") for text in student)


def test_strip_solutions_keeps_indentation_and_code_around_the_region():
    source = "def f(x):\n    ### BEGIN SOLUTION\n    y = x + 1\n    ### END SOLUTION\n    return y"
    assert build_labs.strip_solutions(source) == (
        "def f(x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n    return y"
    )


def test_strip_solutions_refuses_unbalanced_markers():
    with pytest.raises(ValueError, match="unbalanced"):
        build_labs.strip_solutions("### BEGIN SOLUTION\nx = 1\n")
