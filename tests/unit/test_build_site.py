"""tools/build_site.py: what goes on the static site, and how a notebook is made a page.

These run in `make test` (standard library only); the built site itself is tested in a browser
by tests/site/test_site.py (`make test-site`).
"""

from __future__ import annotations

import json
import tomllib

import pytest

from tools import build_nav, build_site, lessons, reading_time

REPOSITORY = lessons.config()["repository"].rstrip("/")
BRANCH = lessons.config()["branch"]


@pytest.fixture(scope="module")
def pages():
    return build_site.site_pages()


def test_the_site_has_every_notebook_and_student_lab_and_no_solution(pages):
    assert pages["README.md"] == "index.md"
    notebooks = [p.relative_to(lessons.ROOT).as_posix() for p in lessons.lesson_notebooks()]
    labs = [p.relative_to(lessons.ROOT).as_posix() for p in lessons.student_labs()]
    assert [p for p in pages if p.startswith("notebooks/")] == notebooks
    assert [p for p in pages if p.startswith("labs/")] == labs
    assert "docs/errors.md" in pages and "docs/teaching.md" in pages
    assert not [p for p in pages if "solutions" in p]


def test_the_tags_it_drops_and_folds_are_the_ones_the_notebooks_use():
    assert build_nav.HELPERS_TAG in build_site.DROPPED_TAGS
    assert reading_time.CHECK_TAG in build_site.DROPPED_TAGS
    assert build_site.FOLDED_TAGS == reading_time.OPTIONAL_TAGS
    assert build_site.FOLDED_HEADINGS == reading_time.OPTIONAL_HEADINGS


def test_a_jupyterlab_anchor_and_its_heading_give_the_same_slug():
    title = "4. Cause: a tensor made inside forward without device="
    assert build_site.slug(title) == "4-cause-a-tensor-made-inside-forward-without-device"
    assert build_site.slug(title.replace(" ", "-")) == build_site.slug(title)
    assert build_site.slug("the-notebooks") == "the-notebooks"


@pytest.mark.parametrize(
    "target, source, expected",
    [
        ("../README.md#the-notebooks", "notebooks/02_copy_pitfall.ipynb",
         "../index.md#the-notebooks"),
        ("docs/errors.md", "README.md", "docs/errors.md"),
        ("03_module_to.ipynb", "notebooks/02_copy_pitfall.ipynb", "03_module_to.ipynb"),
        ("../notebooks/04_cross_device_errors.ipynb#2.-Cause:-the-input-was-not-moved",
         "docs/errors.md",
         "../notebooks/04_cross_device_errors.ipynb#2-cause-the-input-was-not-moved"),
        ("#same-device", "docs/errors.md", "#same-device"),
        ("https://pytorch.org/docs", "README.md", "https://pytorch.org/docs"),
        ("gpu-verification.md", "docs/errors.md",
         f"{REPOSITORY}/blob/{BRANCH}/docs/gpu-verification.md"),
        ("../labs/solutions/05_save_load_scenarios.ipynb#x", "docs/errors.md",
         f"{REPOSITORY}/blob/{BRANCH}/labs/solutions/05_save_load_scenarios.ipynb#x"),
        ("tools/", "CONTRIBUTING.md", f"{REPOSITORY}/tree/{BRANCH}/tools"),
    ],
)
def test_links_to_pages_stay_on_the_site_and_links_to_other_files_go_to_github(
    pages, target, source, expected
):
    assert build_site.site_link(target, source, pages) == expected


def test_a_link_to_a_missing_file_is_left_for_sphinx_to_report(pages):
    assert build_site.site_link("no_such_file.md", "README.md", pages) == "no_such_file.md"


def test_the_error_index_anchors_become_targets_that_links_resolve_to():
    text = '<a id="same-device"></a>\n\n## Expected all tensors to be on the same device\n'
    assert build_site.entry_labels(text).startswith("(same-device)=\n")


def test_a_notebook_page_leaves_out_the_checks_and_the_helpers_cell_and_keeps_the_rest():
    path = lessons.NOTEBOOKS / "02_copy_pitfall.ipynb"
    notebook = json.loads(path.read_text())
    page = build_site.page_notebook(notebook, "notebooks/02_copy_pitfall.ipynb",
                                    build_site.site_pages())
    tags = [t for cell in page["cells"] for t in cell["metadata"].get("tags", [])]
    assert not set(tags) & build_site.DROPPED_TAGS
    assert not [c for c in page["cells"] if "@title ✓ Checked" in "".join(c["source"])]
    code = [c for c in notebook["cells"] if c["cell_type"] == "code"
            and not set(c["metadata"].get("tags", [])) & build_site.DROPPED_TAGS
            and not "".join(c["source"]).startswith("utils.quiz(")]
    assert len([c for c in page["cells"] if c["cell_type"] == "code"]) == len(code)
    assert len({c["id"] for c in page["cells"]}) == len(page["cells"])


QUIZ = '''utils.quiz(
    "Where is `t`?",
    choices=["cpu", "meta"],
    answer="cpu",
    explanations=["Right: `to` returns a new tensor.", "No: `t` itself never moves."],
)'''


def test_a_quiz_becomes_its_question_and_choices_with_the_answer_folded():
    text = build_site.quiz_markdown(QUIZ)
    question, answer = text.split("<details", 1)
    assert "Where is `t`?" in question and "a) cpu" in question and "b) meta" in question
    assert "Right" not in question
    assert "**a) cpu.** Right: `to` returns a new tensor." in answer
    assert "Not b) meta: No: `t` itself never moves." in answer
    assert answer.rstrip().endswith("</details>")


def test_every_quiz_in_the_notebooks_can_be_read():
    for path in lessons.lesson_notebooks():
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and source.startswith("utils.quiz("):
                quiz = build_site.read_quiz(source)
                assert quiz.answer in quiz.choices, path.name


def md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text, tags=(), **jupyter):
    metadata = {"tags": list(tags), **({"jupyter": jupyter} if jupyter else {})}
    return {"cell_type": "code", "metadata": metadata, "source": text, "outputs": []}


def test_an_optional_section_is_folded_up_to_the_next_heading_of_its_level_with_its_heading_shown():
    cells = [md("## 1. Main"), code("a = 1"), md("### Going deeper: more"), md("why"),
             code("b = 2"), md("#### A detail"), md("### Back to the main flow"), code("c = 3")]
    folded = build_site.fold_sections(cells)
    sources = [c["source"] for c in folded]
    start = sources.index("### Going deeper: more")
    assert sources[start + 1].startswith("<details")
    end = sources.index("</details>")
    assert sources[start + 2:end] == ["why", "b = 2", "**A detail**"]
    assert sources[end + 1:] == ["### Back to the main flow", "c = 3"]


def test_a_heading_inside_a_fenced_block_or_details_does_not_split_a_cell():
    text = "intro\n```python\n# not a heading\n```\n<details>\n\n# inside\n</details>\n## Next\nx"
    assert build_site.split_at_headings(text) == [
        "intro\n```python\n# not a heading\n```\n<details>\n\n# inside\n</details>", "## Next\nx"
    ]


@pytest.mark.parametrize(
    "cell, tag",
    [
        (code("# @title Going deeper: the code (optional)\nx = 1", ["going-deeper"]), "hide-cell"),
        (code("x = 1", ["cpu-only"]), "hide-cell"),
        (code("# @title Setup\nx = 1", source_hidden=True), "hide-input"),
        (code("%%writefile a.py", outputs_hidden=True), "hide-output"),
        (code("x = 1", source_hidden=True, outputs_hidden=True), "hide-cell"),
    ],
)
def test_what_jupyterlab_shows_folded_stays_folded(cell, tag):
    folded = build_site.folded_code(cell)
    assert tag in folded["metadata"]["tags"]
    if "@title" in cell["source"] and tag != "hide-output":
        title = cell["source"].split("\n")[0].removeprefix("# @title ")
        assert folded["metadata"]["mystnb"]["code_prompt_show"] == title


def test_the_site_address_comes_from_the_repository_and_readme_and_pyproject_show_it():
    url = build_site.site_url()
    owner, name = REPOSITORY.removeprefix("https://github.com/").split("/")
    assert url == f"https://{owner.lower()}.github.io/{name}/"
    assert url in (lessons.ROOT / "README.md").read_text()
    with open(lessons.ROOT / "pyproject.toml", "rb") as handle:
        assert url in tomllib.load(handle)["project"]["urls"].values()


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="docs/a.html#here">ok</a> <a href="docs/a.html#gone">anchor</a> '
        '<a href="docs/b.html">page</a> <a href="https://example.org/x#y">outside</a>'
    )
    (tmp_path / "docs" / "a.html").write_text('<h2 id="here">Here</h2><a href="#here">up</a>')
    assert build_site.broken_links(tmp_path) == [
        "index.html -> docs/a.html#gone", "index.html -> docs/b.html"
    ]


def test_the_error_entries_are_read_from_the_built_index_page():
    page = ('<article class="bd-article"><h1>Index</h1><h2 id="same-device">Expected all '
            'tensors<a class="headerlink" href="#same-device">#</a></h2><p>Fix: <code>to'
            '</code></p><h2 id="other">Other</h2><p>more</p></article>')
    assert build_site.error_entries(page) == [
        ("same-device", "Expected all tensors", "Fix: to"), ("other", "Other", "more")
    ]
