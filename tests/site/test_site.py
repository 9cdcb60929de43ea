"""The built static site (make site) in a real browser: `make test-site` builds it, then runs this.

It serves build/site from a local http.server under a sub-folder, as GitHub Pages does, and
opens it in headless Chromium (Debian's, /usr/bin/chromium): the home page lists every
notebook, a notebook page shows its outputs with its folds closed, a search for an error
message finds its entry in the error index first, and nothing the site must not publish is
in it (a solution, a hidden check). Not part of `make test`: the site needs .venv-site.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from tools import build_nav, build_site, lessons

SITE = Path(os.environ.get("SITE", lessons.ROOT / "build" / "site"))
#: The folder the site is served under: GitHub Pages serves a project's site under its name.
PREFIX = "/pytorch-device-lessons/"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = lessons.ROOT / "tests" / "e2e" / "screenshots"
#: The first line of every hidden check cell (tools/build_nav.py writes it).
HIDDEN_CHECK_MARKER = "@title ✓ Checked"
#: Messages a learner pastes, and the error index's entry that answers each, when it has one.
SEARCHES = {
    "Expected all tensors to be on the same device": "same-device",
    # the other wording of the same error, which the entry lists
    "found at least two devices, cuda:0 and cpu": "same-device",
    "Placeholder storage has not been allocated": None,  # the entry's anchor, read from the index
}


@pytest.fixture(scope="module")
def site() -> Path:
    if not (SITE / "index.html").is_file() or not (SITE / "pagefind").is_dir():
        pytest.fail(f"no built site in {SITE}: run `make site` first (`make test-site` does)")
    return SITE


@pytest.fixture(scope="module")
def base_url(site):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def translate_path(self, path):  # serve the site under PREFIX only
            if not path.startswith(PREFIX):
                return str(site / "no-such-file")
            return super().translate_path("/" + path[len(PREFIX):])

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}{PREFIX}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    yield page
    page.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"site_{name}.png"))


def test_the_home_page_lists_every_notebook_and_lab_in_course_order(page, base_url):
    page.goto(base_url)
    screenshot(page, "home")
    article = page.locator("article")
    for notebook in lessons.lesson_notebooks():
        link = article.locator(f'a[href="notebooks/{notebook.stem}.html"]').first
        assert link.is_visible(), f"the home page has no link to {notebook.name}"
    for lab in lessons.student_labs():
        assert article.locator(f'a[href="labs/{lab.stem}.html"]').count(), lab.name
    sidebar = page.locator("nav.bd-docs-nav a").evaluate_all("links => links.map(a => a.href)")
    order = [href.rsplit("/", 1)[1] for href in sidebar if "/notebooks/" in href]
    assert order == [f"{n.stem}.html" for n in lessons.lesson_notebooks()]


def test_a_notebook_page_shows_its_outputs_and_badges_with_its_folds_closed(page, base_url):
    page.goto(base_url + "notebooks/02_copy_pitfall.html")
    screenshot(page, "notebook")
    article = page.locator("article")
    assert article.locator("h1").first.inner_text().startswith("02 · The copy pitfall")
    assert article.locator('a[href^="https://colab.research.google.com/"] img').count() == 1
    assert article.locator('a[href^="https://mybinder.org/"] img').count() == 1
    outputs = article.locator(".cell_output")
    assert outputs.count() > 10
    assert article.get_by_text("model on meta | Adagrad's sums on ['cpu', 'cpu']").is_visible()
    # Every fold is closed, and what is folded is out of sight: a "Going deeper" section.
    folds = article.locator("details")
    assert folds.count() > 5
    assert folds.evaluate_all("all => all.filter(d => d.open).length") == 0
    heading = "h3#going-deeper-swapping-the-tensors-inside-the-parameters"
    assert article.locator(heading).is_visible()
    assert not article.get_by_text("set_swap_module_params_on_conversion(True)").first.is_visible()
    # The quiz: its question and choices in view, its answer folded.
    assert article.get_by_text("Predict, then run: After the line").is_visible()
    assert article.get_by_text("b) still on the CPU").first.is_visible()
    answer = article.locator("details.lessons-quiz-answer")
    assert not answer.get_by_text("nothing kept it", exact=False).is_visible()
    answer.locator("summary").click()
    assert answer.get_by_text("nothing kept it", exact=False).is_visible()


def test_a_watch_it_happen_link_of_the_error_index_opens_that_section_of_a_notebook(
    page, base_url
):
    page.goto(base_url + "docs/errors.html")
    link = page.locator('article a[href*="notebooks/"][href*="#"]').first
    anchor = link.get_attribute("href").split("#", 1)[1]
    link.click()
    page.wait_for_url(f"**/notebooks/*.html#{anchor}")
    assert page.locator(f'[id="{anchor}"]').is_visible()


def entry_anchor(site: Path, message: str) -> str | None:
    """The anchor of the error index's entry whose title starts like ``message``, if any."""
    for anchor, title, _ in build_site.error_entries((site / "docs/errors.html").read_text()):
        if title.lower().startswith(message.lower()[:40]):
            return anchor
    return None


@pytest.mark.parametrize("message", list(SEARCHES))
def test_a_search_for_a_message_finds_its_entry_in_the_error_index_first(
    page, base_url, site, message
):
    anchor = SEARCHES[message] or entry_anchor(site, message)
    if anchor is None:
        pytest.skip(f"docs/errors.md has no entry for {message!r} yet")
    page.goto(base_url + "search.html?q=" + quote(message))
    first = page.locator(".pagefind-ui__result-link").first
    first.wait_for(timeout=20_000)
    screenshot(page, "search_" + anchor)
    assert first.get_attribute("href") == f"{PREFIX}docs/errors.html#{anchor}"
    first.click()
    page.wait_for_load_state()
    assert page.locator(f'[id="{anchor}"]').is_visible()


def test_the_search_box_of_a_page_leads_to_the_results(page, base_url):
    page.goto(base_url + "notebooks/02_copy_pitfall.html")
    page.locator("button.search-button-field").first.click()
    box = page.locator("form.bd-search input").first
    box.fill("Expected all tensors to be on the same device")
    box.press("Enter")
    page.wait_for_url("**/search.html?q=*")
    first = page.locator(".pagefind-ui__result-link").first
    first.wait_for(timeout=20_000)
    assert first.get_attribute("href") == f"{PREFIX}docs/errors.html#same-device"


def test_every_entry_of_the_error_index_is_found_first_from_its_first_words(page, base_url, site):
    page.goto(base_url)
    missed = {}
    for anchor, title, _ in build_site.error_entries((site / "docs/errors.html").read_text()):
        words = " ".join(re.split(r" \(| \.\.\. | / ", title)[0].split()[:8])
        urls = page.evaluate(
            """async ([root, q]) => {
                 const pagefind = await import(root + "pagefind/pagefind.js");
                 const found = await pagefind.search(q);
                 return Promise.all(found.results.slice(0, 2).map(async r => (await r.data()).url));
               }""",
            [PREFIX, words],
        )
        if not urls or not urls[0].endswith(f"docs/errors.html#{anchor}"):
            missed[words] = urls
    assert not missed


def test_no_solution_and_no_hidden_check_is_published(site):
    published = [p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()]
    assert not [p for p in published if "solutions" in p]
    pages = {p: page_text(p) for p in site.rglob("*.html")}
    assert not [p for p, text in pages.items() if HIDDEN_CHECK_MARKER in text]
    # nor the generated cell that installs and imports the helpers (setup plumbing)
    assert not [p for p, text in pages.items() if build_nav.HELPERS_TITLE[2:] in text]
    # The code of each hidden check and of each solution is nowhere in the site.
    secret = set()
    for path in [*lessons.lesson_notebooks(), *lessons.solution_labs()]:
        for cell in json.loads(path.read_text())["cells"]:
            if "hidden-check" in cell["metadata"].get("tags", []) or "solutions" in path.parts:
                secret |= {line.strip() for line in "".join(cell["source"]).splitlines()}
    shown = set()
    for path in [*lessons.lesson_notebooks(), *lessons.student_labs()]:
        for cell in json.loads(path.read_text())["cells"]:
            if "hidden-check" not in cell["metadata"].get("tags", []):
                shown |= {line.strip() for line in "".join(cell["source"]).splitlines()}
    for doc in ["README.md", *build_site.GUIDES]:
        shown |= {line.strip() for line in (lessons.ROOT / doc).read_text().splitlines()}
    secret = {line for line in secret - shown if len(line) > 30 and not line.startswith("#")}
    assert len(secret) > 50  # the check below looks for something
    lines = {line.strip() for text in pages.values() for line in text.splitlines()}
    assert not secret & lines


def test_every_link_inside_the_site_resolves(site):
    assert build_site.broken_links(site) == []


def page_text(path: Path) -> str:
    """The text of an HTML page, as a reader would copy it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))
