"""What tools/ generates is up to date: README table, badges, navigation, Colab preamble."""

from __future__ import annotations

import re
import sys

import nbformat

from tools import build_nav, lessons, reading_time


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
    quizzes = [cell for path in lessons.lesson_notebooks()
               for cell in nbformat.read(path, as_version=4).cells
               if cell.cell_type == "code" and cell.source.startswith("utils.quiz(")]
    assert quizzes
    for cell in quizzes:
        assert cell.metadata["jupyter"]["source_hidden"] is True
        assert cell.metadata["cellView"] == "form"


def test_every_lab_says_how_to_keep_your_work_on_colab_and_binder():
    labs = lessons.student_labs() + lessons.solution_labs()
    assert labs
    line = build_nav.keep_your_work()
    assert "Save a copy in Drive" in line and "Download" in line and "my-work/" in line
    for path in labs:
        header = nbformat.read(path, as_version=4).cells[0]
        assert build_nav.HEADER_TAG in header.metadata["tags"], path.name
        assert header.source.endswith(f"\n\n{line}"), f"{path.name}: run `make nav`"



def _hidden_when_folded(cells: list) -> set[int]:
    """Indexes of the cells a reader does not see when the notebook opens: JupyterLab's rule.

    A folded heading cell hides every cell after it up to the next cell whose first heading
    is of the same or a higher level; a cell folded with source and outputs hidden is hidden,
    and so is a source-hidden cell with no stored outputs (the setup helpers' cell).
    """
    hidden, folded_level = set(), None
    for index, cell in enumerate(cells):
        heading = reading_time.headings(build_nav.source(cell))[:1] if (
            cell.cell_type == "markdown") else []
        if folded_level is not None and heading and heading[0][0] <= folded_level:
            folded_level = None
        if folded_level is not None:
            hidden.add(index)
        elif cell.metadata.get(build_nav.JUPYTERLAB_COLLAPSED):
            folded_level = heading[0][0]
        jupyter = cell.metadata.get("jupyter", {})
        if jupyter.get("source_hidden") and (jupyter.get("outputs_hidden")
                                             or not cell.get("outputs")):
            hidden.add(index)
    return hidden


def _outside_main_flow(cells: list) -> set[int]:
    """Indexes of the cells tools/reading_time.py counts only in 'everything'."""
    return {index for index, cell in enumerate(cells)
            if reading_time.estimate_cells(cells[: index + 1]).main
            == reading_time.estimate_cells(cells[:index]).main
            and reading_time.estimate_cells([cell]).all != reading_time.Tally()}


def _synthetic_notebook():
    markdown, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    cells = [
        markdown("## 1. The lesson", id="lesson"),
        code("x = 1", id="lesson-code"),
        markdown("### Going deeper: the internals", id="deeper"),
        code("y = 2", id="deeper-code"),
        markdown("## 2. **On a CPU-only machine**", id="cpu-only"),
        markdown("What meta does here.", id="cpu-only-text"),
        markdown("## 3. Back to the lesson", id="back", metadata={
            build_nav.JUPYTERLAB_COLLAPSED: True}),  # stale: no longer an optional heading
        code("z = 3", id="tagged", metadata={"tags": ["going-deeper"]}),
        code("print(z)", id="after"),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def test_going_deeper_and_cpu_only_headings_open_folded_in_jupyterlab_and_colab():
    notebook = _synthetic_notebook()
    folded = build_nav.collapse_optional_parts(notebook, notebook.cells)
    assert folded == ["deeper", "cpu-only"]
    assert notebook.metadata["colab"]["collapsed_sections"] == ["deeper", "cpu-only"]
    by_id = {cell.id: cell for cell in notebook.cells}
    for name in folded:
        assert by_id[name].metadata[build_nav.JUPYTERLAB_COLLAPSED] is True
        assert by_id[name].metadata["id"] == name  # where Colab looks for a cell's id
    assert build_nav.JUPYTERLAB_COLLAPSED not in by_id["back"].metadata
    assert by_id["tagged"].metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}
    hidden = {notebook.cells[i].id for i in _hidden_when_folded(notebook.cells)}
    assert hidden == {"deeper-code", "cpu-only-text", "tagged"}


def test_what_opens_folded_is_exactly_what_the_reading_time_leaves_out_of_the_main_flow():
    checked = 0
    for path in lessons.lesson_notebooks():
        cells = nbformat.read(path, as_version=4).cells
        folded_away = _hidden_when_folded(cells)
        left_out = _outside_main_flow(cells)
        # A folded heading's own cell stays visible (its title is what a reader clicks), and
        # a <details> block is closed inside a visible cell: neither is a whole hidden cell.
        assert folded_away <= left_out, f"{path.name}: folded but counted in the main flow"
        missing = {i for i in left_out - folded_away
                   if not cells[i].metadata.get(build_nav.JUPYTERLAB_COLLAPSED)
                   and "<details" not in build_nav.source(cells[i])}
        assert not missing, (f"{path.name}: cells {sorted(missing)} are left out of the main "
                             "flow's reading time but open unfolded; run `make nav`")
        checked += len(left_out)
    assert checked, "no notebook has a collapsible part yet"


def test_an_optional_heading_is_the_first_heading_of_its_cell():
    for path in lessons.lesson_notebooks():
        for cell in nbformat.read(path, as_version=4).cells:
            found = reading_time.headings(build_nav.source(cell)) if cell.cell_type == (
                "markdown") else []
            late = [text for _, text in found[1:] if reading_time.is_optional_heading(text)]
            assert not late, (f"{path.name} cell {cell.id}: {late[0]!r} is not the cell's first "
                              "heading, so JupyterLab cannot fold it: start a new cell with it")


def test_a_closed_optional_heading_shows_nothing_under_it():
    """JupyterLab folds the cells after a collapsed heading, not the rest of the heading's cell."""
    for path in lessons.lesson_notebooks() + lessons.student_labs():
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            first, _, rest = build_nav.source(cell).partition("\n")
            found = reading_time.headings(first)
            if found and reading_time.is_optional_heading(found[0][1]):
                assert not rest.strip(), (f"{path.name} cell {cell.id}: text under {first!r} in "
                                          "the same cell shows with the section closed: make nav")


def test_make_nav_moves_the_text_under_an_optional_heading_to_a_cell_of_its_own():
    heading = nbformat.v4.new_markdown_cell("### Going deeper: why\n\nDepth a first read skips.")
    plain = nbformat.v4.new_markdown_cell("## 2. A section\n\nText of the main flow.")
    cells = [heading, plain]
    build_nav.split_optional_headings(cells)
    assert [c.source for c in cells] == ["### Going deeper: why", "Depth a first read skips.",
                                         plain.source]
    assert cells[1].id == f"{heading.id}-text"
    build_nav.split_optional_headings(cells)  # a second run changes nothing
    assert len(cells) == 3
    assert reading_time.estimate_cells(cells).main.words == reading_time.estimate_cells(
        [cells[0], plain]).main.words  # what the fold hides is what the estimate leaves out
    assert reading_time.estimate_cells(cells[:1]).main.words == 3  # its title stays on screen


def test_the_readme_table_reads_the_notebooks_about_to_be_written():
    # `make nav` folds parts of a notebook and writes the README in one pass: the table's
    # reading times must come from the notebooks as written, not as they were on disk.

    path = lessons.lesson_notebooks()[0]
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_markdown_cell(" ".join(["word"] * 3000)))
    longer = build_nav.serialize(notebook)
    assert build_nav.readme_table({path: longer}) != build_nav.readme_table()
    assert f"| {reading_time.estimate(path, longer).text()} |" in build_nav.readme_table(
        {path: longer})


def test_the_readme_table_marks_00_to_06_as_the_core_path_and_the_rest_as_the_next_step():
    table = build_nav.readme_table()
    last = lessons.lesson_notebooks()[-1].name[:2]
    core, _, later = table.partition(f"**The next step: 07-{last}**")
    assert core.startswith("**The core path: 00-06**"), core[:80]
    numbers = lambda text: [line[2:4] for line in text.splitlines() if line[:2] == "| " and  # noqa: E731
                            line[2:4].isdigit()]
    assert numbers(core) == ["00", "01", "02", "03", "04", "05", "06"]
    assert numbers(later) == [p.name[:2] for p in lessons.lesson_notebooks()[7:]]
    assert {"07", "09", "10"} <= set(numbers(later))
    minutes = sum(reading_time.estimate(path).main.minutes
                  for path in lessons.lesson_notebooks()[:7])
    assert build_nav._hours(minutes) in core.splitlines()[0]


def test_every_notebook_and_lab_closes_with_a_link_to_the_error_index():
    paths = lessons.all_notebooks()
    assert len(paths) > len(lessons.lesson_notebooks())
    for path in paths:
        footer = nbformat.read(path, as_version=4).cells[-1]
        assert build_nav.FOOTER_TAG in footer.metadata["tags"], path.name
        line = build_nav.errors_line(path)
        assert line.startswith("**Got an error?**") and line in footer.source, (
            f"{path.name}: run `make nav`")
        target = (path.parent / re.search(r"\]\(([^)]+)\)", line).group(1)).resolve()
        assert target == lessons.ROOT / "docs" / "errors.md" and target.exists(), path.name


def test_setup_cell_says_what_to_do_when_a_learners_own_utils_hides_the_course(tmp_path):
    """A learner's utils.py next to the notebook comes first on sys.path: say so, clearly."""
    import subprocess
    import sys

    (tmp_path / "utils.py").write_text("def my_helper():\n    return 1\n")
    preamble = build_nav.colab_preamble()
    result = subprocess.run([sys.executable, "-c", preamble], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: import utils found ")
    assert str(tmp_path / "utils.py") in last and "rename that file or folder" in last
    clean = tmp_path / "clean"
    clean.mkdir()
    assert subprocess.run([sys.executable, "-c", preamble], cwd=clean).returncode == 0


def test_every_check_cell_opens_with_the_title_a_folded_cell_shows_once():
    for path in lessons.lesson_notebooks():
        for cell in nbformat.read(path, as_version=4).cells:
            if reading_time.CHECK_TAG in cell.metadata.get("tags", []):
                assert cell.source.startswith(build_nav.CHECK_TITLE + "\n"), (path.name, cell.id)
                assert cell.source.count(build_nav.CHECK_TITLE) == 1, (path.name, cell.id)
    once = build_nav.with_check_title("assert True")
    assert build_nav.with_check_title(once) == once == f"{build_nav.CHECK_TITLE}\nassert True"


def test_every_folded_optional_code_cell_has_a_title_that_says_it_is_optional():
    assert set(build_nav.OPTIONAL_TITLES) == reading_time.OPTIONAL_TAGS  # a title for each tag
    for path in lessons.lesson_notebooks():
        for cell in nbformat.read(path, as_version=4).cells:
            tags = set(cell.metadata.get("tags", []))
            if cell.cell_type == "code" and tags & set(build_nav.OPTIONAL_TITLES) and not (
                    tags & {reading_time.CHECK_TAG} or cell.source.startswith("%%")):
                assert cell.source.startswith("# @title"), (path.name, cell.id)
    deeper = {"going-deeper"}
    titled = build_nav.with_optional_title("print(1)", deeper)
    assert titled == f"{build_nav.OPTIONAL_TITLES['going-deeper']}\nprint(1)"
    assert build_nav.with_optional_title(titled, deeper) == titled  # once
    own = "# @title Helper: one of its own\nprint(1)"
    assert build_nav.with_optional_title(own, {"cpu-only"}) == own
    magic = "%%writefile a.py\nprint(1)"  # a cell magic must stay the first line
    assert build_nav.with_optional_title(magic, deeper) == magic
