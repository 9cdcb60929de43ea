"""Every notebook, in real JupyterLab, in a real (headless) Chromium: Run All, no surprises.

What it does, per lesson notebook: open it, run all cells, wait for the kernel to go idle,
then check that only cells tagged ``raises-exception`` show an error, that every code
cell ran, that no widget failed to render ("Error displaying widget"), and that every quiz
rendered as a widget. On the first quiz it clicks an answer and checks the feedback
against :func:`utils.widgets.quiz_feedback`. A screenshot of each notebook goes to
tests/screenshots/ (git-ignored).

JupyterLab is started from this environment on 127.0.0.1, on a free port, with a random
token, serving a *copy* of notebooks/ in a temporary folder: the tracked notebooks are
never run or saved in place. The server is always stopped at the end. The notebooks take
turns on one kernel (the first one's), each joining it as "Select Kernel" would once the one
before is closed and its widgets closed: torch is imported once, not once per notebook.

Chromium is Debian's package (``apt-get install chromium``), driven by Playwright for
Python through its ``executable_path``; Playwright's own browser download is not used.
Outside CI a missing Chromium skips this file; with ``CI=true`` it fails.

What it does not run twice: each notebook is served with its cells up to the end of its
first section (or its first ``utils.torchrun`` launch, in 09 and 10) and, after that, its markdown
and every widget cell (``utils.quiz`` and the explorers); the other code cells are dropped
from the copy (see :func:`_browser_copy`). nbval already runs every one of those cells, in the
same ipykernel from the same environment, and compares their outputs with the stored ones,
which is stricter than the "no error" this test checks; running them here again cost about
half of this test's time. Besides the accelerator rules nbval's kernels add, what differs in
this test's kernel is the widget mode (``LESSONS_WIDGETS`` unset), which only the widget
cells read, and those all run here: the test checks that the copy kept every quiz of the
tracked notebook and that each one renders.

The placement viewer (notebook 03) and the scenario explorer (05) are clicked where the
notebooks show them: a choice made, the button pressed, the result read.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch

from tools import lessons
from utils.widgets import quiz_feedback  # noqa: E402

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]
SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false",
                                                    "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
}
ON_GPU = torch.cuda.is_available()  # then a cuda-tagged checkpoint loads, whatever LESSONS_DEVICE
IN_CI = os.environ.get("CI", "").lower() == "true"
INSTALL_HINT = (
    "Chromium not found: install it (Debian/Ubuntu: `sudo apt-get install chromium`) "
    "to run the JupyterLab browser test"
)
NOTEBOOKS = lessons.lesson_notebooks()
# Every wait below is a wait *until* something shows, so a generous limit costs nothing when
# things work and only a real hang reaches it. The limits are sized for a 2-core machine
# running notebooks beside this test with both cores busy (tools/bench/stress_test_suite.py).
START_SECONDS = 180  # JupyterLab's server answering /api/status
WAIT_MS = 120_000  # the app, a kernel, a widget's reply to a click
RUN_ALL_MS = 600_000  # one notebook's Run All (seconds when the machine is quiet)


def _chromium() -> str:
    """Path to the Chromium binary; skip (or fail in CI) when there is none."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if IN_CI:
        pytest.fail(f"CI=true but {INSTALL_HINT[0].lower()}{INSTALL_HINT[1:]}")
    pytest.skip(INSTALL_HINT)


LAUNCH = "utils.torchrun("  # a cell that starts worker processes
WIDGET_CALLS = ("utils.quiz(", "utils.explore_save_load(", "utils.view_placement(")


def _quizzes(sources: list[str]) -> int:
    return sum(source.count("utils.quiz(") for source in sources)


def _browser_copy(tracked: Path, copy: Path) -> None:
    """Write the notebook this test runs: ``tracked`` up to the end of its first section (or
    its first launch), then only its markdown and its widget cells (module docstring: why that
    is no loss)."""
    notebook = nbformat.read(tracked, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    first = next((notebook.cells.index(c) for c in code if LAUNCH in c.source), None)
    second = next((i for i, c in enumerate(notebook.cells)
                   if c.cell_type == "markdown" and c.source.lstrip().startswith("## 2.")), None)
    first = min(i for i in (first, second, len(notebook.cells)) if i is not None)
    notebook.cells = notebook.cells[:first] + [
        cell for cell in notebook.cells[first:]
        if cell.cell_type != "code" or any(call in cell.source for call in WIDGET_CALLS)]
    kept = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    assert _quizzes(kept) == _quizzes([cell.source for cell in code]), "a quiz was dropped"
    assert not any(LAUNCH in source for source in kept)
    nbformat.write(notebook, copy)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _api(base: str, token: str, path: str, method: str = "GET"):
    request = urllib.request.Request(
        f"{base}{path}", method=method, headers={"Authorization": f"token {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
    return json.loads(body) if body else None


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab serving a copy of notebooks/; yields (base URL, token, wait_until_ready)."""
    _chromium()  # skip before starting anything when there is no browser
    root = tmp_path_factory.mktemp("lab")
    shutil.copytree(lessons.NOTEBOOKS, root / "notebooks",
                    ignore=shutil.ignore_patterns("checkpoints", ".ipynb_checkpoints"))
    for notebook in NOTEBOOKS:
        _browser_copy(notebook, root / "notebooks" / notebook.name)
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.pop("LESSONS_WIDGETS", None)  # real widgets here, not the text form nbval checks
    env.update(
        LESSONS_DEVICE="cpu",
        JUPYTER_CONFIG_DIR=str(root / "config"),
        JUPYTER_RUNTIME_DIR=str(root / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(root / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(root / "workspaces"),
    )
    for plugin, settings in SETTINGS.items():  # no news pop-up, no autosave
        target = root / "settings" / f"{plugin}.jupyterlab-settings"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings))
    log = open(root / "server.log", "w")  # noqa: SIM115 (closed in the finalizer below)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True",
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI containers run as root
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def wait_until_ready() -> None:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                _api(base, token, "/api/status")
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"JupyterLab did not start: {(root / 'server.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.25)

    try:
        yield base, token, wait_until_ready  # the browser starts while the server boots
    finally:
        try:
            _api(base, token, "/api/shutdown", method="POST")  # also stops its kernels
            server.wait(timeout=15)
        except Exception:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGTERM)
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, signal.SIGKILL)
                    server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser_page(lab, tmp_path_factory):
    """One headless Chromium page, with a fresh profile."""
    if not IN_CI:
        pytest.importorskip("playwright", reason="playwright missing: make install")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=_chromium(), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            base, token, wait_until_ready = lab
            wait_until_ready()
            page.goto(f"{base}/lab?reset&token={token}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell",
                                   timeout=WAIT_MS)
            page.evaluate("() => window.jupyterapp.started")
            page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
            yield page
        finally:
            context.close()


# JavaScript run in the page, through the app JupyterLab exposes (expose_app_in_browser).
PANEL_JS = """path => Array.from(window.jupyterapp.shell.widgets('main'))
  .find(w => w.context && w.context.path === path)"""

# One kernel for all the notebooks, one notebook at a time, as "Select Kernel" -> an existing
# kernel would: the kernel imports torch once instead of once per notebook (about 3 s of CPU
# each). Before the next notebook joins it, the widgets of the one before are closed, so the new
# page restores none of them. Each notebook's setup cell runs again in it; what this test checks
# (errors only where tagged, every cell run, widgets rendered and answering) is the front end's.
OPEN_JS = """async path => {
  const app = window.jupyterapp;
  let kernel = undefined;
  if (window.lessonsKernel) {
    const connection = app.serviceManager.kernels.connectTo({model: window.lessonsKernel});
    await connection.requestExecute({code: 'import ipywidgets; ipywidgets.Widget.close_all()',
                                     store_history: false}).done;
    connection.dispose();
    kernel = {id: window.lessonsKernel.id};
  }
  const panel = (""" + PANEL_JS + """)(path) || await app.commands.execute('docmanager:open',
      {path, factory: 'Notebook', kernel});
  await panel.sessionContext.ready;
  const model = panel.sessionContext.session.kernel.model;
  window.lessonsKernel = {id: model.id, name: model.name};
  app.shell.activateById(panel.id);
}"""

# Run All on this notebook: make it the current one first, since the command acts on that.
RUN_ALL_JS = """async path => {
  const app = window.jupyterapp;
  const panel = (""" + PANEL_JS + """)(path);
  app.shell.activateById(panel.id);
  while (app.shell.currentWidget !== panel) { await new Promise(r => setTimeout(r, 50)); }
  await app.commands.execute('notebook:run-all-cells');
}"""

READY_JS = """path => { const panel = (""" + PANEL_JS + """)(path);
  const kernel = panel && panel.sessionContext.session && panel.sessionContext.session.kernel;
  return !!kernel && kernel.status === 'idle' && panel.content.widgets.length > 0; }"""

# Done when the kernel is idle and no cell is running, for a moment (RUN_ALL_JS already
# waits for Run All's promise, which settles once every cell has run; widgets are waited
# for by count, below). A cell that was never run (Run All stopped early) keeps an empty
# count: the test then reports it.
FINISHED_JS = """path => { const panel = (""" + PANEL_JS + """)(path);
  const busy = panel.sessionContext.session.kernel.status !== 'idle' || panel.content.widgets
    .some(c => c.model.type === 'code' && c.model.executionState === 'running');
  const now = Date.now();
  if (busy || !window.lessonsIdleSince) { window.lessonsIdleSince = busy ? null : now; }
  return !busy && now - window.lessonsIdleSince >= 300; }"""

# Rendering a widget view is asynchronous (the front end asks the kernel for the model's
# state): wait until the quizzes are all on the page or a widget failed to render.
# Mark the notebook under test, so that quizzes of a notebook still closing are not counted.
CURRENT = "[data-lessons-current]"
MARK_JS = """path => { document.querySelectorAll('""" + CURRENT + """')
    .forEach(node => node.removeAttribute('data-lessons-current'));
  (""" + PANEL_JS + """)(path).node.setAttribute('data-lessons-current', ''); }"""

QUIZZES_JS = """n => document.querySelectorAll('""" + CURRENT + """ .lessons-quiz').length >= n
  || document.body.textContent.includes('Error displaying widget')"""

CELLS_JS = """path => (""" + PANEL_JS + """)(path).content.widgets
  .filter(c => c.model.type === 'code').map(c => ({
    tags: c.model.getMetadata('tags') || [],
    count: c.model.executionCount,
    errors: c.model.outputs.toJSON().filter(o => o.output_type === 'error')
      .map(o => o.ename + ': ' + o.evalue),
    source: c.model.sharedModel.getSource(),
  }))"""

CLOSE_JS = """path => { (""" + PANEL_JS + """)(path).dispose(); }"""

EXPAND_JS = "() => window.jupyterapp.commands.execute('notebook:expand-all-headings')"

def _first_quiz_call(sources: list[str]) -> tuple[list[str], str, dict] | None:
    """(choices, answer, explanations) of the first utils.quiz(...) call in the sources."""
    for source in sources:
        if "utils.quiz(" not in source:
            continue
        call = ast.parse(source).body[0].value
        kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        return kwargs["choices"], kwargs["answer"], kwargs["explanations"]
    return None


def _path(notebook: Path) -> str:
    return f"notebooks/{notebook.name}"


def _run_all(page, notebook: Path) -> list[dict]:
    """Open ``notebook`` on the shared kernel (one notebook at a time: two open on one kernel
    fail to render their widgets), Run All; return its cells."""
    path = _path(notebook)
    page.evaluate(OPEN_JS, path)
    page.wait_for_function(READY_JS, arg=path, timeout=WAIT_MS, polling=250)
    page.evaluate(RUN_ALL_JS, path)
    page.evaluate("() => { window.lessonsIdleSince = null; }")
    page.wait_for_function(FINISHED_JS, arg=path, timeout=RUN_ALL_MS, polling=250)
    return page.evaluate(CELLS_JS, path)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.name)
def test_notebook_runs_all_in_jupyterlab_with_widgets_rendered(browser_page, notebook):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser_page
    try:
        cells = _run_all(page, notebook)
        for index, cell in enumerate(cells):
            expected = "raises-exception" in cell["tags"]
            assert bool(cell["errors"]) == expected, (
                f"{notebook.name} code cell {index}: errors {cell['errors']}, "
                f"tagged raises-exception: {expected}"
            )
            assert cell["count"] is not None, (
                f"{notebook.name} code cell {index} did not run; execution counts: "
                f"{[c['count'] for c in cells]}"
            )
        tracked = nbformat.read(notebook, as_version=4).cells
        quizzes = _quizzes([cell.source for cell in tracked if cell.cell_type == "code"])
        assert _quizzes([cell["source"] for cell in cells]) == quizzes, "a quiz did not run"
        page.evaluate(MARK_JS, _path(notebook))
        with contextlib.suppress(PlaywrightTimeout):  # the assert below says what is missing
            page.wait_for_function(QUIZZES_JS, arg=quizzes, timeout=WAIT_MS, polling=100)
        assert page.locator("text=Error displaying widget").count() == 0
        assert page.locator(f"{CURRENT} .lessons-quiz").count() == quizzes, "a quiz did not render"

        quiz = _first_quiz_call([cell["source"] for cell in cells])
        if quiz:
            choices, answer, explanations = quiz
            # The first quiz may sit in a folded part: unfold them all, as a reader would.
            page.evaluate(EXPAND_JS)
            first = page.locator(f"{CURRENT} .lessons-quiz").first
            first.scroll_into_view_if_needed()
            feedback = first.locator(".lessons-quiz-feedback")
            # Unfolding re-renders the cells: a click that lands while the quiz's view is
            # replaced is lost (a full run under load timed out here, 2026-12-02). Click again, as a
            # reader would, a few times; a quiz that never answers still fails.
            for _attempt in range(4):
                first.locator(".lessons-quiz-choice").first.click()
                with contextlib.suppress(PlaywrightTimeout):
                    feedback.wait_for(timeout=WAIT_MS // 4)
                    break
            feedback.wait_for(timeout=1_000)
            right, text = quiz_feedback(choices[0], choices, answer, explanations)
            mark = "✔" if right else "✘"
            assert feedback.inner_text().strip() == f"{mark} {text.replace('`', '')}"
            first.evaluate("quiz => quiz.scrollIntoView({block: 'center'})")  # for the picture
        sources = [cell["source"] for cell in cells]
        if any("utils.view_placement(" in source for source in sources):
            _click_placement_viewer(page)
        if any("utils.explore_save_load(" in source for source in sources):
            _click_scenario_explorer(page)
        SCREENSHOTS.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{notebook.stem}.png"))
    finally:
        page.evaluate(CLOSE_JS, _path(notebook))  # the kernel stops with the server


def _click_scenario_explorer(page) -> None:
    """Notebook 05's explorer: run the default case, then a dict map_location."""
    page.evaluate(EXPAND_JS)  # the widget may sit in a folded part
    explorer = page.locator(f"{CURRENT} .lessons-scenario")
    assert explorer.count() == 1, "the scenario explorer did not render"
    explorer.scroll_into_view_if_needed()
    explorer.locator(".lessons-scenario-run").click()
    result = explorer.locator(".lessons-scenario-result")
    result.wait_for(timeout=WAIT_MS)
    if not ON_GPU:
        assert "Attempting to deserialize object on a CUDA device" in result.inner_text()
    explorer.locator("select").nth(2).select_option("dict")
    explorer.locator(".lessons-scenario-run").click()
    page.wait_for_function(
        "() => document.querySelector('" + CURRENT + " .lessons-scenario-result').innerText"
        ".includes('map_location={\"cuda:0\": \"cpu\"}')", timeout=WAIT_MS)
    assert "Loaded" in result.inner_text() and "weight: cpu" in result.inner_text()


def _click_placement_viewer(page) -> None:
    """Notebook 03's viewer: a plain tensor attribute moved to meta is left behind."""
    page.evaluate(EXPAND_JS)  # the widget may sit in a folded part
    viewer = page.locator(f"{CURRENT} .lessons-placement")
    assert viewer.count() == 1, "the placement viewer did not render"
    viewer.scroll_into_view_if_needed()
    viewer.locator("select").nth(0).select_option("plain tensor attribute")
    viewer.locator("select").nth(1).select_option("meta")
    viewer.locator(".lessons-placement-show").click()
    report = viewer.locator(".lessons-placement-result")
    report.wait_for(timeout=WAIT_MS)
    assert "Left behind by Module.to: scale" in report.inner_text()
