"""The collapsed-cell budget: the bars a first read meets, per numbered section.

In JupyterLab every code cell whose source is collapsed (a check cell, a quiz, the setup helpers)
is a thin bar a reader skips. A first read meets at most one per `## N.` section on average,
never more than two in one section, and none between a question and its answer.
tools/first_read.py counts them (`python -m tools.first_read --bars`).
"""

from __future__ import annotations

import re

import nbformat
import pytest

from tools import first_read, lessons


def _lessons():
    return lessons.lesson_notebooks()


def code(source: str, tags=(), hidden: bool = False) -> dict:
    metadata = {"tags": list(tags)}
    if hidden:
        metadata["jupyter"] = {"source_hidden": True}
    return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": []}


def markdown(text: str, tags=()) -> dict:
    return {"cell_type": "markdown", "metadata": {"tags": list(tags)}, "source": text}


CHECK = code("# @title ✓ Checked: skip this cell\nassert True", ["hidden-check"], hidden=True)


def test_a_bar_is_a_collapsed_code_cell_of_the_main_flow_counted_in_its_section():
    cells = [
        markdown("# 99 · Title"),
        code("# @title Setup helpers", ["setup-helpers"], hidden=True),  # the top's bar
        markdown("## 1. First"),
        code("x = 1"),  # shown: no bar
        CHECK,
        markdown("### Going deeper: more"),
        CHECK,  # inside a folded part: not met
        markdown("Text, then a heading in the same cell.\n\n## 2. Second"),
        code("print(2)", ["going-deeper"], hidden=True),  # an optional part: not a bar
        CHECK,
        CHECK,
        CHECK,
    ]
    assert first_read.bars(cells) == {"(top)": 1, "1. First": 1, "2. Second": 3}


def test_a_bar_between_a_question_and_its_answer_is_found_but_its_quiz_is_not_one():
    quiz = code("utils.quiz('Where?', choices=['a', 'b'], answer='a')", hidden=True)
    cells = [
        markdown("## 1. Lesson\n\n**Predict, then run.** Where is it?"),
        quiz,
        CHECK,  # 2: between the question and its answer
        code("print(x.device)"),  # 3: the answer
        CHECK,  # after the answer: fine
    ]
    assert first_read.bars_between_questions_and_answers(cells) == [2]


@pytest.mark.parametrize("path", _lessons(), ids=lambda p: p.name)
def test_a_first_read_meets_at_most_one_bar_per_section_on_average_two_in_one(path):
    problems = first_read.bar_budget(path)
    assert not problems, f"{path.name}: {'; '.join(problems)}: merge a section's checks into " \
        "one cell at its end, or keep a folded part's code inside its fold"


@pytest.mark.parametrize("path", _lessons(), ids=lambda p: p.name)
def test_every_numbered_section_heading_opens_its_own_markdown_cell(path):
    # Then a reader collapsing the heading folds the whole section, and every counter finds it.
    late = [index for index, cell in enumerate(nbformat.read(path, as_version=4).cells)
            if cell.cell_type == "markdown"
            and re.search(r"(?m)^## \d+\.", cell.source.split("\n", 1)[1] if "\n" in cell.source
                          else "")]
    assert not late, f"{path.name}: cells {late} hold a '## N.' heading below other text"
