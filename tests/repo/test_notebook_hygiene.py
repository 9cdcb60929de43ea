"""Every notebook and lab is stored as a clean Run All produced it, on the shared skeleton."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tools import build_nav, lessons, reading_time

RAISES_TAG = "raises-exception"
MACHINE_PATH = re.compile(r"(/tmp/|/root/|/home/|/Users/|[A-Z]:\\\\Users|/work/|site-packages)")

ALL = lessons.all_notebooks()
LESSONS = lessons.lesson_notebooks()


def _id(path: Path) -> str:
    return path.relative_to(lessons.ROOT).as_posix()


def _code_cells(path: Path) -> list:
    return [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]


def test_the_collection_has_its_first_notebooks():
    names = [p.name for p in LESSONS]
    assert names[:3] == ["00_devices.ipynb", "01_tensor_to.ipynb", "02_copy_pitfall.ipynb"]


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_notebook_was_run_top_to_bottom_in_one_fresh_kernel(path):
    counts = [cell.execution_count for cell in _code_cells(path)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"execution counts are {counts}; re-run it: python -m tools.run_notebooks {_id(path)}"
    )


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_notebook_shows_errors_only_where_a_cell_is_marked_to_raise(path):
    for index, cell in enumerate(_code_cells(path)):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        marked = RAISES_TAG in cell.metadata.get("tags", [])
        assert not errors or marked, f"code cell {index} shows {errors[0].ename} but is not tagged"
        assert errors or not marked, f"code cell {index} is tagged {RAISES_TAG!r}, raised nothing"


@pytest.mark.parametrize("path", ALL, ids=_id)
def test_notebook_outputs_show_no_machine_paths(path):
    for index, cell in enumerate(_code_cells(path)):
        text = nbformat.writes(nbformat.from_dict({"outputs": cell.outputs}))
        found = MACHINE_PATH.search(text)
        assert not found, f"code cell {index} output shows a machine path: {found.group(0)!r}"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_follows_the_skeleton(path):
    cells = nbformat.read(path, as_version=4).cells
    markdown = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    assert "colab.research.google.com" in cells[0].source, "first cell: launch badges"
    assert re.search(r"^# .+", cells[1].source, re.M), "second cell: the '# Title'"
    assert "Learning goals" in markdown or "You will learn" in markdown
    setup = [c for c in cells if "setup" in c.metadata.get("tags", [])]
    assert len(setup) == 1 and setup[0].cell_type == "code", "exactly one code cell tagged 'setup'"
    assert "utils.pick_device()" in setup[0].source
    assert re.search(r"^## 1\. ", markdown, re.M), "numbered sections start with '## 1. '"
    assert re.search(r"^## Summary", markdown, re.M)
    assert re.search(r"^## Practise", markdown, re.M)


CHECK_TAG = reading_time.CHECK_TAG
CHECK_CELL_LINES = 40


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_code_cells_stay_short(path):
    for index, cell in enumerate(_code_cells(path)):
        if "setup" in cell.metadata.get("tags", []):
            continue
        lines = [line for line in cell.source.splitlines()
                 if line.strip() and line != build_nav.CHECK_TITLE
                 and line not in build_nav.OPTIONAL_TITLES.values()]  # titles are generated
        # A check cell holds a whole section's checks (one folded bar per section):
        # a first read never opens it, so it may be longer than a cell a reader reads.
        limit = CHECK_CELL_LINES if CHECK_TAG in cell.metadata.get("tags", []) else 15
        assert len(lines) <= limit, f"code cell {index} has {len(lines)} lines; split it"


@pytest.mark.parametrize("path", LESSONS, ids=_id)
def test_lesson_asserts_its_facts(path):
    asserts = sum(cell.source.count("assert ") for cell in _code_cells(path))
    assert asserts >= 5, f"only {asserts} asserts: each fact the prose states needs one"
