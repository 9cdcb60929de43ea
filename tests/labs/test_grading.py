"""Under nbgrader a check that is not passed raises; for a learner alone it never does.

nbgrader's own run of every lab is tests/classroom/test_nbgrader.py (`make test-classroom`).
"""

from __future__ import annotations

import nbformat
import pytest
import torch
from lab_checks import stub

import labchecks as checks
from labchecks import grading
from tools import lessons, nbgrader_cells

META = torch.device("meta")


def kept_using_batch(batch, device):
    batch.to(device)
    return batch


def right_prepare(batch, device):
    return batch.to(device)


@pytest.fixture
def autograding(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")


def test_checks_never_raise_for_a_learner_alone(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assert checks.check_prepare(kept_using_batch, META).status == checks.FAILED
    assert checks.check_prepare(stub, META).status == checks.NOT_ATTEMPTED


@pytest.mark.parametrize("mode", ["autograde", "validate"])
def test_a_wrong_answer_raises_its_misconception_under_nbgrader(monkeypatch, mode):
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    with pytest.raises(grading.CheckFailed, match=r"^❌ Exercise 2: .*kept using `batch`"):
        checks.check_prepare(kept_using_batch, META)


def test_an_unattempted_exercise_raises_under_nbgrader(autograding):
    with pytest.raises(grading.CheckFailed, match="^⏳ .*not attempted yet"):
        checks.check_prepare(stub, META)


def test_a_passed_check_prints_rather_than_returns_a_value_nbgrader_would_parse(
        autograding, capsys):
    feedback = checks.check_prepare(right_prepare, META)
    assert feedback and isinstance(feedback, checks.Feedback)  # `if checks.check_...:` works
    feedback._ipython_display_()
    assert capsys.readouterr().out.startswith("✅ Exercise 2:")


def test_an_unknown_nbgrader_mode_is_not_autograding(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "")
    assert not grading.autograding()


def test_every_exported_check_is_gradable():
    names = [name for name in checks.__all__ if name.startswith("check_")]
    assert names
    for name in names:
        assert hasattr(getattr(checks, name), "__wrapped_check__"), name


def test_making_checks_gradable_twice_wraps_once():
    namespace = {"check_x": lambda: checks.Feedback("x", checks.PASSED, "ok"), "helper": len}
    grading.make_checks_gradable(namespace)
    once = namespace["check_x"]
    grading.make_checks_gradable(namespace)
    assert namespace["check_x"] is once and namespace["helper"] is len


# --- nbgrader's cell metadata, written by make labs ------------------------------------


@pytest.mark.parametrize("solution", lessons.solution_labs(), ids=lambda p: p.name)
def test_every_solution_lab_is_an_nbgrader_source_with_points_for_each_check(solution):
    notebook = nbformat.read(solution, as_version=4)
    graded = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")]
    answers = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert graded and all(c.source.startswith("checks.check_") for c in graded)
    assert all(c.metadata.nbgrader["locked"] and c.metadata.nbgrader["points"] >= 1
               for c in graded)
    assert [c for c in notebook.cells if "### BEGIN SOLUTION" in c.source] == answers
    ids = [c.metadata.nbgrader["grade_id"] for c in graded + answers]
    assert len(ids) == len(set(ids))
    assert sum(nbgrader_cells.points(notebook).values()) == len(answers)


def _lab(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def test_a_check_is_worth_one_point_per_learner_function_it_checks():
    lab = nbgrader_cells.with_nbgrader_metadata(_lab(
        "def save(p):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
        "def load(p):\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
        "checks.check_resume(save, load, device)",
        "checks.check_resume(save, load, device)",
        "print('not graded')",
    ))
    assert nbgrader_cells.points(lab) == {"check_resume": 2, "check_resume-2": 2}
    assert "nbgrader" not in lab.cells[-1].metadata
    assert lab.cells[0].metadata.nbgrader["grade_id"] == "save"


def test_writing_nbgrader_metadata_is_idempotent_and_replaces_stale_metadata():
    lab = _lab("def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
               "checks.check_f(f)", "x = 1")
    lab.cells[2].metadata["nbgrader"] = {"grade": True, "points": 5}
    once = nbgrader_cells.with_nbgrader_metadata(lab)
    assert nbgrader_cells.with_nbgrader_metadata(once) == once
    assert "nbgrader" not in once.cells[2].metadata


def test_a_check_of_nothing_the_learner_wrote_is_refused():
    lab = _lab("def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
               "checks.check_f(g)")
    with pytest.raises(ValueError, match="checks none of the learner's functions"):
        nbgrader_cells.with_nbgrader_metadata(lab)


def test_a_solution_outside_a_function_is_refused():
    with pytest.raises(ValueError, match="defines no function"):
        nbgrader_cells.with_nbgrader_metadata(_lab("### BEGIN SOLUTION\nx = 1\n### END SOLUTION"))
