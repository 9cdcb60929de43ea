"""The grader nbgrader runs in each test cell, and how a check behaves for a learner alone.

nbgrader's own run of every lab is tests/classroom/test_nbgrader.py, and of a simulated
class with its cheats tests/classroom/test_simulated_class.py (`make test-classroom`).
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
from lab_checks import stub

from labchecks import grading
from labchecks import lab02 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED, Feedback
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
    assert checks.check_prepare(kept_using_batch, META).status == FAILED
    assert checks.check_prepare(stub, META).status == NOT_ATTEMPTED


@pytest.mark.parametrize("mode", ["autograde", "validate"])
def test_a_wrong_answer_raises_its_misconception_under_nbgrader(monkeypatch, mode):
    monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    with pytest.raises(grading.CheckFailed, match=r"(?s)^❌ Exercise 2: .*kept using\s+`batch`"):
        checks.check_prepare(kept_using_batch, META)


def test_an_unattempted_exercise_raises_under_nbgrader(autograding):
    with pytest.raises(grading.CheckFailed, match="^⏳ .*not attempted yet"):
        checks.check_prepare(stub, META)


def test_a_passed_check_prints_rather_than_returns_a_value_nbgrader_would_parse(
        autograding, capsys):
    feedback = checks.check_prepare(right_prepare, META)
    assert feedback and isinstance(feedback, Feedback)  # `if checks.check_...:` works
    feedback._ipython_display_()
    assert capsys.readouterr().out.startswith("✅ Exercise 2:")


def test_an_unknown_nbgrader_mode_is_not_autograding(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "")
    assert not grading.autograding()


def test_every_check_is_gradable_in_the_module_its_lab_imports():
    import importlib

    for lab in lessons.solution_labs():
        module = importlib.import_module(f"labchecks.lab{lab.name[:2]}")
        found = [n for n in vars(module) if n.startswith("check_")]
        assert found, lab.name
        for name in found:
            assert hasattr(getattr(module, name), "__wrapped_check__"), f"{lab.name}: {name}"


def test_making_a_check_gradable_twice_wraps_once():
    def check_x():
        return Feedback("x", PASSED, "ok")

    once = grading.graded(check_x)
    assert grading.graded(once) is once and once.__wrapped_check__ is check_x


# --- the grader: what the hidden part of a test cell runs -------------------------------


def noisy_right_prepare(batch, device):
    import logging
    import os
    print("moving the batch", file=sys.stderr)
    warnings.warn("debugging prepare", stacklevel=2)
    logging.getLogger("student").warning("prepare called")
    os.write(2, b"progress 100%\n")
    return batch.to(device)


def looping_prepare(batch, device):
    while True:
        pass


def test_the_grader_shows_the_score_and_the_verdict_wrapped(capsys):
    assert grading.grade("check_prepare", 2, lambda: grading.arguments(right_prepare, META)) == 2
    assert capsys.readouterr().out.startswith("✅ Exercise 2:")
    assert grading.grade("check_prepare", 2, lambda: grading.arguments(kept_using_batch, META)) == 0
    out = capsys.readouterr().out
    assert out.startswith("❌ Exercise 2:") and "kept using `batch`" in " ".join(out.split())
    assert max(map(len, out.splitlines())) <= grading.FEEDBACK_WIDTH


def test_learner_output_to_stderr_never_reaches_the_cell(capfd):
    args = lambda: grading.arguments(noisy_right_prepare, META)  # noqa: E731
    assert grading.grade("check_prepare", 1, args) == 1
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out.startswith("✅")


def test_a_wrong_noisy_answer_still_scores_zero(capfd):
    def noisy_wrong(batch, device):
        print("hello", file=sys.stderr)
        return batch
    assert grading.grade("check_prepare", 1, lambda: grading.arguments(noisy_wrong, META)) == 0
    assert capfd.readouterr().err == ""


def test_the_grader_ignores_the_environment_and_rebound_checks(monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(checks, "check_prepare", lambda *a: Feedback("x", "passed", "ok"))
    assert grading.grade("check_prepare", 1, lambda: grading.arguments(stub, META)) == 0
    assert "not graded" in capsys.readouterr().out  # the visible name was rebound: read it


def test_a_replaced_helper_of_the_checks_scores_zero_and_writes_to_stderr(monkeypatch, capfd):
    import labchecks.lab02 as lab02
    monkeypatch.setattr(lab02, "attempt", lambda exercise, function, *args: (args[0].to(args[1]),
                                                                            None))
    assert grading.grade("check_prepare", 1, lambda: grading.arguments(stub, META)) == 0
    captured = capfd.readouterr()
    assert "not graded" in captured.out and "labchecks.lab02.attempt" in captured.err


def test_a_patched_feedback_method_is_found():
    original = Feedback.__bool__
    try:
        Feedback.__bool__ = lambda self: True
        assert "labchecks.feedback.Feedback.__bool__" in grading.tampering()
    finally:
        Feedback.__bool__ = original
    assert grading.tampering() == []


def test_five_of_six_predictions_earn_five_sixths_of_the_points(capsys):
    def five_right():
        return {q: eval(q, {"torch": torch, "t": torch.ones(3), "model": torch.nn.Linear(3, 2)})
                if q != "t.cpu() is t" else False for q in checks.IS_QUESTIONS}
    assert grading.grade("check_is_predictions", 3, lambda: grading.arguments(five_right)) == 2.5
    assert "Partial credit: 2.5 of 3 points" in capsys.readouterr().out


def test_a_loop_that_never_ends_is_stopped_with_a_message(monkeypatch, capsys):
    monkeypatch.setattr(grading, "CHECK_TIME_LIMIT_S", 1)
    assert grading.grade("check_prepare", 1, lambda: grading.arguments(looping_prepare, META)) == 0
    assert "look for a loop that never ends" in capsys.readouterr().out


def test_after_the_grader_the_visible_line_runs_nothing_again(autograding, capsys):
    calls = []

    def counted(batch, device):
        calls.append(1)
        return batch.to(device)
    grading.grade("check_prepare", 1, lambda: grading.arguments(counted, META))
    ran = len(calls)
    shown = checks.check_prepare(counted, META)
    assert len(calls) == ran and shown and isinstance(shown, grading.GradedFeedback)
    again = checks.check_prepare(counted, META)  # a later, ungraded cell: never raises
    assert len(calls) == ran and type(again) is Feedback


def test_the_hidden_part_is_python_that_grades(capsys):
    source = grading.hidden_test("check_prepare", 1, "prepare, other", grading.__file__)
    assert source.startswith("### BEGIN HIDDEN TESTS") and source.endswith("### END HIDDEN TESTS")
    namespace = {"prepare": kept_using_batch, "other": META}
    exec(compile(source, "hidden", "exec"), namespace)
    assert capsys.readouterr().out.startswith("❌ Exercise 2:")
    assert "__grader" not in namespace


def test_the_lab_02_answer_key_is_not_shipped():
    assert all(isinstance(q, str) for q in checks.IS_QUESTIONS)
    source = (Path(grading.__file__).parent / "lab02.py").read_text()
    assert not re.search(r"is t\"?\s*[:,]\s*\(?\s*(True|False)", source)


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


def test_points_declared_by_a_lab_replace_one_per_function():
    lab = _lab("def f():\n    ### BEGIN SOLUTION\n    pass\n    ### END SOLUTION",
               "checks.check_f(f)")
    assert nbgrader_cells.points(nbgrader_cells.with_nbgrader_metadata(lab, {"check_f": 3})) == {
        "check_f": 3}
    declared = nbgrader_cells.declared_points(Path("labs/solutions/02_copy_pitfall.ipynb"))
    assert declared["check_is_predictions"] == 3
