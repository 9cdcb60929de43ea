"""make check NB=... (tools/check.py): the one-notebook loop re-runs, then refreshes, then tests."""

from __future__ import annotations

import pytest

from tools import check, lessons


def test_a_lesson_notebook_is_checked_alone():
    path = lessons.lesson_notebooks()[1]
    assert check.targets(path) == [path]


@pytest.mark.parametrize("folder", [lessons.LABS, lessons.SOLUTIONS])
def test_a_lab_given_as_either_version_checks_both(folder):
    solution = lessons.solution_labs()[0]
    assert check.targets(folder / solution.name) == [lessons.LABS / solution.name, solution]


def test_anything_else_is_refused_with_what_is_accepted(capsys):
    assert check.main(["README.md"]) == 2
    assert "not a lesson notebook (notebooks/NN_topic.ipynb) or a lab" in capsys.readouterr().err
    assert check.main([]) == 2
    assert "usage: make check NB=" in capsys.readouterr().err


def test_make_help_lists_install_and_check():
    import subprocess

    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=lessons.ROOT,
                           capture_output=True, text=True, check=True).stdout
    assert "make install " in shown and "make check " in shown
