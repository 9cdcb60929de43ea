"""The authoring round trip (tools/notebook_text.py) keeps each cell's id and metadata."""

from __future__ import annotations

import nbformat
import pytest

from tools import build_nav, lessons, notebook_text


def _authored(notebook):
    return [c for c in notebook.cells
            if not build_nav.GENERATED_TAGS & set(c.metadata.get("tags", []))]


@pytest.mark.parametrize("path", lessons.lesson_notebooks()[:3], ids=lambda p: p.name)
def test_round_trip_keeps_every_cell_id_source_and_metadata(path):
    before = nbformat.read(path, as_version=4)
    after = notebook_text.from_text(notebook_text.to_text(path), before)
    old, new = _authored(before), after.cells
    assert [c.id for c in new] == [c.id for c in old]
    assert [c.cell_type for c in new] == [c.cell_type for c in old]
    for was, now in zip(old, new, strict=True):
        assert now.metadata == was.metadata, was.id
        assert now.source == was.source, was.id


def test_moved_and_added_cells_keep_their_ids_and_new_ones_get_fresh_ones(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title", id="title"),
        nbformat.v4.new_code_cell("x = 1", id="first",
                                  metadata={"jupyter": {"source_hidden": True}}),
        nbformat.v4.new_code_cell("y = 2", id="second"),
    ])
    path = tmp_path / "n.ipynb"
    nbformat.write(notebook, path)
    text = notebook_text.to_text(path)
    assert "# %% id=first" in text
    first, second = "# %% id=first\nx = 1\n", "# %% id=second\ny = 2\n"
    assert first in text and second in text
    edited = text.replace(first + second, second + "# %%\nz = 3\n" + first)
    rebuilt = notebook_text.from_text(edited, notebook)
    ids = [c.id for c in rebuilt.cells]
    assert ids[:2] == ["title", "second"] and ids[3] == "first"
    assert ids[2] not in {"title", "first", "second"} and len(set(ids)) == 4
    assert rebuilt.cells[3].metadata == {"jupyter": {"source_hidden": True}}
    nbformat.validate(rebuilt)


def test_an_id_used_twice_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="remove the id= of the copy"):
        notebook_text.from_text("# %% id=a\nx = 1\n# %% id=a\ny = 2\n")
