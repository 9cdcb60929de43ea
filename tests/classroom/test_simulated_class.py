"""A simulated class graded by nbgrader: each cheat scores 0, learner output costs nothing.

The class is tests/classroom/simulated_class.py (right, noisy, wrong, half done, crashing,
looping, and the cheats a teaching assistant tried). One nbgrader run for the whole module.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="needs requirements-teacher.txt: make test-classroom")

from tests.classroom import simulated_class
from tools import classroom

HERE = Path(__file__).resolve().parent

#: Lab 02 is worth 9 (1 + 2 + 3 + 2 + 1, labchecks/lab02.py POINTS), lab 05 is worth 4.
EXPECTED = {
    "right": 9,
    "right_noisy": 9,        # prints to stderr, warns, logs, writes to fd 2: still right
    "wrong": 4,              # 1 + 0 + 4/6 of 3 (partial credit) + 0 + 1
    "half_done": 3,
    "crashing": None,        # the kernel dies: not graded, listed by --failed
    "looping": 7,            # prepare never returns: stopped, 0 for it, the rest graded
    "blank_env": 0,          # os.environ.pop("NBGRADER_EXECUTION")
    "blank_patch": 0,        # checks.check_prepare = lambda ...
    "blank_grader": 0,       # grading.autograding = lambda: False; Feedback.__bool__ patched
    "blank_tracebacks": 0,   # get_ipython()._showtraceback = lambda ...: None
    "blank_deleted_check": 0,  # the check cell deleted: nbgrader puts it back
    "key": 6,                # checks.IS_QUESTIONS is no answer key
    "right_05": 4,
    "wrong_05": 3,
    "by_name_05": 3,         # refusing files named "hostile" passes nothing now
}


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    course = tmp_path_factory.mktemp("class") / "course"
    book = simulated_class.grade_class(HERE.parents[1], course)
    print(simulated_class.table(book))
    return course, book


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
def test_every_submission_gets_the_score_it_deserves(graded_class):
    _, book = graded_class
    assert simulated_class.tests_only(book) == EXPECTED


def test_a_crashed_submission_is_listed_and_the_cheats_are_flagged(graded_class, capsys):
    course, _ = graded_class
    assert classroom.failed_submissions(course, "02_copy_pitfall") == ["crashing"]
    flagged = {student for student, _, _ in classroom.suspicious_cells(course, "02_copy_pitfall")}
    assert {"blank_env", "blank_patch", "blank_grader", "blank_tracebacks", "key"} <= flagged
    assert not flagged & {"right", "right_noisy", "wrong", "half_done", "looping"}


def test_feedback_is_readable_and_carries_no_files(graded_class):
    course, _ = graded_class
    page = course / "feedback" / "wrong" / "02_copy_pitfall" / "02_copy_pitfall.html"
    text = html.unescape(page.read_text(encoding="utf-8"))
    assert "You seem to think Tensor.to always copies" in text
    assert "Partial credit: 2 of 3 points" in text
    looping = course / "feedback" / "looping" / "02_copy_pitfall" / "02_copy_pitfall.html"
    assert "look for a loop that never ends" in html.unescape(looping.read_text("utf-8"))
    files = [p for p in (course / "feedback").rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".html" for p in files), files


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def test_every_verdict_is_visible_whole_at_1280_px(graded_class):
    """In Chromium, 1280 px wide: no output box holding a ✅ / ❌ line scrolls sideways."""
    import shutil
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium not found (Debian/Ubuntu: apt-get install chromium)")
    playwright = pytest.importorskip("playwright.sync_api")
    course, _ = graded_class
    pages = [course / "feedback" / s / "02_copy_pitfall" / "02_copy_pitfall.html"
             for s in ("wrong", "half_done", "looping")]
    with playwright.sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for path in pages:
            page.goto(path.as_uri())
            boxes = page.evaluate("""() => [...document.querySelectorAll('pre')]
                .filter(p => /[✅❌⏳]/.test(p.textContent))
                .map(p => { let e = p, hidden = 0;
                            for (; e; e = e.parentElement)
                              hidden = Math.max(hidden, e.scrollWidth - e.clientWidth);
                            return [p.textContent.slice(0, 60), hidden,
                                    p.getBoundingClientRect().right]; })""")
            assert boxes, f"no verdict in {path}"
            for text, hidden, right in boxes:
                assert hidden <= 1 and right <= 1280, (path.parts[-3], text, hidden, right)
        browser.close()
