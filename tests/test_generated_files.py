"""What tools/ generates is up to date: README table, badges, navigation, Colab preamble."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import build_nav  # noqa: E402
import lessons  # noqa: E402


def test_readme_table_badges_and_navigation_are_up_to_date():
    stale = [path.relative_to(lessons.ROOT).as_posix() for path, _ in build_nav.stale_files()]
    assert not stale, f"out of date: {stale}; run `make nav` and commit"


def test_badges_point_at_the_configured_repository():
    repository = lessons.config()["repository"].removeprefix("https://github.com/")
    notebook = lessons.lesson_notebooks()[0]
    assert build_nav.colab_url(notebook) == (
        f"https://colab.research.google.com/github/{repository}/blob/main/notebooks/{notebook.name}"
    )
    assert build_nav.binder_url(notebook).endswith(f"?labpath=notebooks%2F{notebook.name}")


def test_a_hand_edited_readme_table_is_regenerated():
    original = (lessons.ROOT / "README.md").read_text(encoding="utf-8")
    edited = original.replace("| 00 |", "| 99 |")
    assert edited != original
    assert build_nav.updated_readme(edited) == build_nav.updated_readme(original)


def test_a_readme_without_table_markers_gets_a_clear_error():
    import pytest

    with pytest.raises(ValueError, match="table markers are missing"):
        build_nav.updated_readme("# A README with no table\n")


def _run_preamble(monkeypatch, on_colab: bool) -> list[list[str]]:
    """Execute the setup cells' Colab preamble; return the commands it would have run."""
    import subprocess
    import types

    commands = []
    monkeypatch.setattr(subprocess, "run", lambda command, check: commands.append(command))
    if on_colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(build_nav.colab_preamble(), {})
    return commands


def test_colab_preamble_installs_only_utils_and_never_torch(monkeypatch):
    (command,) = _run_preamble(monkeypatch, on_colab=True)
    repository = lessons.config()["repository"]
    assert command[1:] == ["-m", "pip", "install", "--quiet", "--no-deps", f"git+{repository}@main"]


def test_colab_preamble_does_nothing_outside_colab(monkeypatch):
    assert _run_preamble(monkeypatch, on_colab=False) == []


def test_quiz_cells_are_collapsed_so_the_answer_key_is_not_shown():
    import nbformat

    quizzes = [cell for path in lessons.lesson_notebooks()
               for cell in nbformat.read(path, as_version=4).cells
               if cell.cell_type == "code" and cell.source.startswith("utils.quiz(")]
    assert quizzes
    for cell in quizzes:
        assert cell.metadata["jupyter"]["source_hidden"] is True
        assert cell.metadata["cellView"] == "form"


def test_every_lab_says_how_to_keep_your_work_on_colab_and_binder():
    import nbformat

    labs = lessons.student_labs() + lessons.solution_labs()
    assert labs
    line = build_nav.keep_your_work()
    assert "Save a copy in Drive" in line and "Download" in line and "my-work/" in line
    for path in labs:
        header = nbformat.read(path, as_version=4).cells[0]
        assert build_nav.HEADER_TAG in header.metadata["tags"], path.name
        assert header.source.endswith(f"\n\n{line}"), f"{path.name}: run `make nav`"

