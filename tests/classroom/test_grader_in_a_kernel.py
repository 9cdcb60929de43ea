"""The grader in a real IPython kernel: the score is the cell's value, and cheats score 0.

Quicker than nbgrader (tests/classroom/test_simulated_class.py): one kernel, a few cells,
the hidden part as tools/classroom.py writes it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tools import classroom

ROOT = Path(__file__).resolve().parents[2]

SETUP = "import torch\nfrom labchecks import lab02 as checks\nother = torch.device('meta')"
RIGHT = "def prepare(batch, device):\n    return batch.to(device)"
NOISY = ("import sys, warnings, logging, os\n"
         "def prepare(batch, device):\n"
         "    print('debug', file=sys.stderr)\n"
         "    warnings.warn('slow')\n"
         "    logging.getLogger('me').error('called')\n"
         "    os.write(2, b'progress\\n')\n"
         "    return batch.to(device)")
WRONG = "def prepare(batch, device):\n    batch.to(device)\n    return batch"
TRACEBACKS = RIGHT.replace("def prepare", "get_ipython()._showtraceback = lambda *a, **k: None\n"
                                          "def prepare")
PATCHED = RIGHT.replace("def prepare", "import labchecks.lab02 as lab02\n"
                                       "lab02.check_prepare = lambda *a: checks.Feedback("
                                       "'Exercise 2', 'passed', 'ok')\ndef prepare")


def _graded(answer: str, monkeypatch) -> tuple[float | None, str, list]:
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("LESSONS_DEVICE", "cpu")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    test = classroom.hidden_test("check_prepare", 2, "prepare, other") + \
        "\nchecks.check_prepare(prepare, other)"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s)
                                               for s in (SETUP, answer, test)])
    NotebookClient(notebook, kernel_name="python3", allow_errors=True, timeout=120).execute()
    outputs = notebook.cells[-1].outputs
    values = [o for o in outputs if o.output_type == "execute_result"]
    score = float(values[0].data["text/plain"]) if values else None
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    return score, text, outputs


@pytest.mark.parametrize(("answer", "score", "phrase"), [
    (RIGHT, 2.0, "✅ Exercise 2"),
    (NOISY, 2.0, "✅ Exercise 2"),
    (WRONG, 0.0, "kept using"),
    (TRACEBACKS, 0.0, "_showtraceback"),
    (PATCHED.replace("return batch.to(device)", "return batch"), 0.0, "lab02.check_prepare"),
], ids=["right", "right-noisy", "wrong", "tracebacks-hidden", "check-replaced"])
def test_the_grader_scores_a_cell_by_its_value(answer, score, phrase, monkeypatch):
    got, text, outputs = _graded(answer, monkeypatch)
    assert got == score and phrase in text, (got, outputs)
    stderr = [o for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    # nbgrader scores a cell that wrote to stderr 0: only a replaced grader does.
    assert bool(stderr) == (score != 2.0 and phrase != "kept using"), outputs
    assert text.count("Exercise 2") <= 1  # the visible line does not show the verdict again


def _stopped_by_the_timeout(kernel_arguments: list[str]) -> nbformat.NotebookNode:
    cells = ["from labchecks import lab02 as checks", "steps = 0\nwhile True:\n    steps += 1",
             "print('on')"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in cells])
    NotebookClient(notebook, kernel_name="python3", allow_errors=True, timeout=5,
                   interrupt_on_timeout=True, extra_arguments=kernel_arguments,
                   error_on_timeout={"ename": "x", "evalue": "x", "traceback": []}).execute()
    return notebook


def test_a_cell_stopped_by_the_timeout_says_to_look_for_a_loop(monkeypatch):
    """nbgrader interrupts a cell past its timeout; the cell says why, and the next one runs:
    the kernel starts as the course's configuration says (tools/classroom.py)."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    notebook = _stopped_by_the_timeout(classroom.kernel_arguments())
    errors = [o for o in notebook.cells[1].outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "CellTimeout"
    assert "look for a loop that never ends" in errors[0].evalue
    assert notebook.cells[2].outputs[0].text == "on\n"


def test_importing_the_checks_changes_nothing_in_the_kernel(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    notebook = _stopped_by_the_timeout([])
    errors = [o for o in notebook.cells[1].outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "KeyboardInterrupt"
