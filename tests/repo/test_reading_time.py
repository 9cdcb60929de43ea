"""The reading-time estimate (tools/reading_time.py), and the 30-minute rule for a first read."""

from __future__ import annotations

import dataclasses

import nbformat
import pytest

from tools import build_nav, lessons, reading_time
from tools.reading_time import Tally, estimate_cells

# A first read (main flow) of every notebook takes at most 30 minutes, and its visible asserts
# are at most 5% of its code lines: the proof moves into a check cell (tag
# reading_time.CHECK_TAG, source collapsed) below the lesson it checks.


def markdown(text: str, tags: list[str] | None = None) -> dict:
    return {"cell_type": "markdown", "metadata": {"tags": tags or []}, "source": text}


def code(source: str, outputs: int = 0, figures: int = 0, **metadata) -> dict:
    results = [{"output_type": "execute_result", "data": {"text/plain": f"{n}"},
                "execution_count": 1, "metadata": {}} for n in range(outputs)]
    image = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "F"}}
    return {
        "cell_type": "code",
        "metadata": metadata,
        "source": source,
        "outputs": results + [image] * figures,
    }


def test_consecutive_pieces_of_one_stream_are_one_output_as_jupyter_shows_them():
    def stream(name: str) -> dict:
        return {"output_type": "stream", "name": name, "text": "printed\n"}

    split = code("print(1)\nprint(2)\n")
    split["outputs"] = [stream("stdout"), stream("stdout"), stream("stderr"), stream("stdout")]
    joined = code("print(1)\nprint(2)\n")
    joined["outputs"] = [stream("stdout"), stream("stderr"), stream("stdout")]
    assert estimate_cells([split]).main == estimate_cells([joined]).main
    assert estimate_cells([split]).main.outputs == 3


def words(n: int) -> str:
    return " ".join(["word"] * n)


def test_prose_is_read_at_the_documented_words_per_minute():
    result = estimate_cells([markdown(words(reading_time.WORDS_PER_MINUTE))])
    assert result.main == result.all == Tally(words=reading_time.WORDS_PER_MINUTE)
    assert result.main.seconds == 60


def test_link_targets_html_tags_urls_and_markdown_syntax_are_not_words():
    text = (
        "# Title here\n\n| a | b |\n|---|---|\n"
        "See [the docs](https://example.org/a/very/long/path) and <b>this</b> https://x.org now."
    )
    # Title, here, a, b, See, the, docs, and, this, now.
    assert estimate_cells([markdown(text)]).all.words == 10


def test_fenced_code_in_markdown_counts_as_code_lines():
    result = estimate_cells([markdown("Two words\n\n```python\nx = 1\n\ny = 2\n```\n")])
    assert result.all == Tally(words=2, code_lines=2)


def test_each_non_blank_code_line_each_output_and_each_figure_costs_its_constant():
    result = estimate_cells([code("a = 1\n\nb = 2\nprint(a + b)\n", outputs=2, figures=1)])
    assert result.main == Tally(code_lines=3, outputs=2, figures=1)
    assert result.main.seconds == (
        3 * reading_time.SECONDS_PER_CODE_LINE
        + 2 * reading_time.SECONDS_PER_OUTPUT
        + reading_time.SECONDS_PER_FIGURE
    )


def test_a_quiz_costs_one_quiz_and_its_collapsed_answer_key_is_not_read():
    quiz = code('utils.quiz(\n    "Which?",\n    ["a", "b"],\n    answer=0,\n)\n', outputs=1)
    result = estimate_cells([quiz])
    assert result.main == result.all == Tally(quizzes=1)
    assert result.main.seconds == reading_time.SECONDS_PER_QUIZ


def test_a_prediction_asked_in_prose_costs_a_quizs_pause_once():
    asked = markdown("**Predict, then run.** Where is `t` now?")
    answer = code("print(t.device)", outputs=1)
    pause = reading_time.SECONDS_PER_QUIZ
    alone = estimate_cells([asked, answer]).main
    assert alone.predictions == 1
    assert alone.seconds == dataclasses.replace(alone, predictions=0).seconds + pause
    quiz = code('utils.quiz("Where?", ["cpu", "meta"], answer="cpu")', outputs=1)
    assert estimate_cells([asked, quiz, answer]).main.predictions == 0  # the quiz is its pause
    assert estimate_cells([markdown("- Predict where a tensor is, then check it.")]).main \
        == Tally(words=8)  # a learning goal asks nothing
    folded = markdown("<details><summary>Why</summary>\n\nPredict what happens.\n</details>")
    assert estimate_cells([folded]).main.predictions == 0


def test_generated_navigation_and_badge_cells_count_nothing():
    cells = [markdown(words(500), ["nav-header"]), markdown(words(500), ["nav-footer"])]
    assert estimate_cells(cells).all == Tally()


def test_details_are_left_out_of_the_main_flow_but_their_summary_stays():
    text = (
        "Before it.\n\n<details><summary><b>Going deeper</b>: how</summary>\n\n"
        f"{words(40)}\n\n```python\nx = 1\n```\n</details>\n\nAfter it."
    )
    result = estimate_cells([markdown(text)])
    # Before, it., Going, deeper:, how, After, it.
    assert result.main == Tally(words=7)
    assert result.all == Tally(words=47, code_lines=1)


def test_a_details_inside_a_details_is_hidden_with_its_summary():
    text = (
        "<details><summary>Outer</summary>\none\n"
        "<details><summary>Inner</summary>two three</details>\nfour\n</details>"
    )
    result = estimate_cells([markdown(text)])
    assert result.main.words == 1  # Outer
    assert result.all.words == 6


@pytest.mark.parametrize(
    "heading", ["## Going deeper: internals", "### **On a CPU-only machine**", "## 4. Going deeper"]
)
def test_a_going_deeper_or_cpu_only_section_is_left_out_until_the_next_heading(heading):
    cells = [
        markdown(f"## 1. Main\n\n{words(10)}"),
        markdown(f"{heading}\n\n{words(20)}"),
        code("x = 1\ny = 2\n", outputs=1),
        markdown(f"#### A smaller heading stays in the section\n\n{words(30)}"),
        markdown(f"## 5. Back to the main flow\n\n{words(5)}"),
        code("z = 3\n"),
    ]
    result = estimate_cells(cells)
    # "1.", "Main" and 10 words; the closed section's title, which stays on screen; then "5.",
    # "Back", "to", "the", "main", "flow" and 5 words. The smaller heading inside is folded.
    title = len(heading.split()) - 1
    assert result.main == Tally(words=12 + title + 11, code_lines=1)
    assert result.all.code_lines == 3
    assert result.all.outputs == 1
    assert result.all.words == 12 + len(heading.split()) - 1 + 20 + 7 + 30 + 11


def test_a_closed_sections_title_counts_once_as_a_summary_does_but_not_inside_a_fold():
    cells = [
        markdown("## 1. Main"),
        markdown("### Going deeper: first fold"),  # title shown: 4 words
        markdown(words(20)),
        markdown("#### Going deeper: nested inside"),  # hidden by the fold around it
        markdown(words(20)),
        markdown("### On a CPU-only machine: second"),  # a sibling: shown, 5 words
        markdown(words(20)),
        markdown("## 2. Back"),
    ]
    assert reading_time.fold_titles(cells) == ["Going deeper: first fold",
                                               "On a CPU-only machine: second"]
    result = estimate_cells(cells)
    assert result.main.words == 2 + 4 + 5 + 2
    assert result.all.words == 2 + 4 + 20 + 4 + 20 + 5 + 20 + 2
    summary = markdown("<details><summary>Going deeper: first fold</summary>\n\nNot shown.\n"
                       "</details>")
    assert estimate_cells([summary]).main.words == 4  # the same title, read the same way


@pytest.mark.parametrize("tag", sorted(reading_time.OPTIONAL_TAGS))
def test_cells_tagged_as_optional_are_left_out_of_the_main_flow(tag):
    cells = [
        markdown(words(10)),
        markdown(words(20), [tag]),
        {**code("x = 1\n"), "metadata": {"tags": [tag]}},
    ]
    result = estimate_cells(cells)
    assert result.main == Tally(words=10)
    assert result.all == Tally(words=30, code_lines=1)


def test_collapsed_source_is_left_out_of_the_main_flow_but_its_output_stays():
    cell = code("a = 1\nb = 2\n", outputs=1, jupyter={"source_hidden": True})
    result = estimate_cells([cell])
    assert result.main == Tally(outputs=1)
    assert result.all == Tally(code_lines=2, outputs=1)


def test_the_text_shows_main_flow_and_everything_in_whole_minutes_rounded_up():
    cells = [
        markdown(words(reading_time.WORDS_PER_MINUTE * 2 + 1)),
        markdown(f"<details><summary>More</summary>"
                 f"{words(reading_time.WORDS_PER_MINUTE * 2)}</details>"),
    ]
    assert estimate_cells(cells).text() == "3 / 5 min"


def test_a_file_that_is_not_a_notebook_gets_a_clear_error(tmp_path):
    path = tmp_path / "broken.ipynb"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="broken.ipynb: cannot read it as a notebook"):
        reading_time.estimate(path)


def _without_outputs(path) -> str:
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return build_nav.serialize(notebook)


def test_a_notebook_with_no_stored_outputs_is_refused_naming_it_and_what_to_run():
    # from-text leaves a notebook without outputs; its estimate would be minutes short.
    path = lessons.lesson_notebooks()[1]
    name = path.relative_to(lessons.ROOT).as_posix()
    with pytest.raises(reading_time.NotRunError) as refused:
        reading_time.estimate(path, _without_outputs(path))
    assert name in str(refused.value)
    assert f"make check NB={name}" in str(refused.value)
    # and so is the README table that would show it: make nav writes nothing then
    with pytest.raises(reading_time.NotRunError):
        build_nav.readme_table({path: _without_outputs(path)})


def test_a_notebook_that_ran_or_has_no_code_is_estimated():
    assert reading_time.has_run([markdown("words only")])
    assert reading_time.has_run([code("x = 1"), code("x", outputs=1)])
    assert not reading_time.has_run([code("x = 1"), code("x")])


def test_the_readme_table_shows_each_notebooks_reading_time():
    table = build_nav.readme_table()
    header = "| # | Notebook | What it covers | Read (main / with folds) | Lab | Colab | Binder |"
    assert header in table.splitlines()
    for path in lessons.lesson_notebooks():
        row = next(line for line in table.splitlines() if line.startswith(f"| {path.name[:2]} |"))
        assert f"| {reading_time.estimate(path).text()} |" in row


def _over_limit() -> dict[str, str]:
    limit = reading_time.MAIN_FLOW_LIMIT_MINUTES * 60
    found = {}
    for path in lessons.lesson_notebooks():
        result = reading_time.estimate(path)
        if result.main.seconds > limit:
            found[path.name] = result.text()
    return found


def test_no_notebooks_main_flow_takes_over_30_minutes():
    new = _over_limit()
    assert not new, (
        f"main flow over {reading_time.MAIN_FLOW_LIMIT_MINUTES} minutes (main / all): {new}; "
        "move depth into 'Going deeper' or 'On a CPU-only machine' parts, "
        "see `python -m tools.reading_time`"
    )


def test_visible_asserts_count_per_main_flow_code_line_but_check_cells_do_not():
    cells = [
        code("x = 1\nassert x == 1\n"),
        code("assert x\nassert x\n", tags=[reading_time.CHECK_TAG],
             jupyter={"source_hidden": True}),
        markdown("## Going deeper: more"),
        code("assert x\n"),
        markdown("## 2. Back"),
        code("y = 2  # assert in a comment is no assert\nassert_close = 3\n"),
    ]
    share = reading_time.assert_share_cells(cells)
    assert (share.asserts, share.code_lines) == (1, 4)
    assert share.text() == "1 / 4 (25.0%)"


def test_make_nav_folds_a_check_cell():
    import nbformat

    cell = nbformat.v4.new_code_cell("assert True", metadata={"tags": [reading_time.CHECK_TAG]})
    notebook = nbformat.v4.new_notebook(cells=[cell])
    build_nav.collapse_optional_parts(notebook, notebook.cells)
    assert cell.metadata["jupyter"] == {"source_hidden": True, "outputs_hidden": True}


@pytest.mark.parametrize("path", lessons.lesson_notebooks(), ids=lambda p: p.name)
def test_every_check_cell_is_a_collapsed_code_cell_that_shows_nothing(path):
    import nbformat

    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if reading_time.CHECK_TAG in cell.metadata.get("tags", []):
            assert cell.cell_type == "code", f"cell {index}: a check cell holds code"
            assert cell.metadata.get("jupyter", {}).get("source_hidden"), f"cell {index}: make nav"
            assert not cell.get("outputs"), f"cell {index}: a check cell prints nothing"


@pytest.mark.parametrize("path", lessons.lesson_notebooks(), ids=lambda p: p.name)
def test_visible_asserts_are_at_most_5_percent_of_the_main_flow(path):
    share = reading_time.assert_share(path)
    assert share.share <= reading_time.ASSERT_SHARE_LIMIT, (
        f"{path.name}: visible asserts {share.text()} of main-flow code lines; "
        f"move the checks into a cell tagged {reading_time.CHECK_TAG!r}")
