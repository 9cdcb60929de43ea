"""The graders stay on a budget: no labchecks file over about 600 lines, and labchecks/ no larger
than utils/ (the lesson helpers), as the reading-time budget holds the notebooks.

Lines are physical lines of the package's .py files (`wc -l labchecks/*.py`), docstrings and
blank lines included: what a maintainer has to read. docs/runs.md records the ratio of all the
machinery (labchecks, tools, tests) to lesson code, with the command that counts it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: "About 600": a few lines of grace, so that a one-line fix does not force a split.
MOST_LINES_PER_FILE = 620


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def package_lines(name: str) -> int:
    return sum(lines(path) for path in (ROOT / name).rglob("*.py"))


#: Lab 08's old checks (one file, simulated machines and multi-process judging together) are
#: being replaced by the libraries lab's and split into labs 09 and 10; until that lands,
#: both budgets wait for it.
OLD_LAB08 = ROOT / "labchecks" / "lab08.py"
_WAITING = OLD_LAB08.exists() and lines(OLD_LAB08) > MOST_LINES_PER_FILE
waits_for_lab08 = pytest.mark.xfail(_WAITING, strict=False,
                                    reason="labchecks/lab08.py is the old one, being split")


@pytest.mark.parametrize("path", sorted((ROOT / "labchecks").glob("*.py")), ids=lambda p: p.name)
def test_no_grader_file_is_over_about_600_lines(path):
    if path == OLD_LAB08 and _WAITING:
        pytest.xfail("labchecks/lab08.py is the old one, being split")
    assert lines(path) <= MOST_LINES_PER_FILE, (
        f"{path.name}: {lines(path)} lines; split it by audience (a learner's check, the "
        "teacher's grading, a simulation of its own) or share a pattern through feedback.py")


@waits_for_lab08
def test_the_graders_are_no_larger_than_the_lesson_helpers():
    graders, helpers = package_lines("labchecks"), package_lines("utils")
    assert graders <= helpers, f"labchecks/ has {graders} lines, utils/ {helpers}"
