"""A learner's answers survive `make lab` again, `make labs`, and an update of the course.

The learner works in my-work/ (tools/workspace.py, run by `make lab`); tools/build_labs.py
refuses to overwrite a student lab that holds someone's work. Nothing here runs a notebook:
each test copies one lab into a temporary folder and works on that.
"""

from __future__ import annotations

import ast
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import build_labs, build_nav, lessons, run_notebooks, workspace

LAB = "labs/02_copy_pitfall.ipynb"
LESSON = "notebooks/02_copy_pitfall.ipynb"
ANSWER = "return 'the answer I worked out for an hour'"
TODAY = datetime.date.today().isoformat()


def write_answer(path: Path) -> bytes:
    """Replace the first stub in the notebook at ``path`` with ANSWER, as JupyterLab saves."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] == "code" and "raise NotImplementedError()" in text:
            cell["source"] = text.replace("raise NotImplementedError()", ANSWER, 1)
            break
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path.read_bytes()


def change_a_markdown_cell(path: Path, text: str) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "markdown"
                and "nav-header" not in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]) + text
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


@pytest.fixture
def course(tmp_path) -> Path:
    """A copy of the course with one lesson, its lab and the lab's solution."""
    for name in (LAB, LESSON, "labs/solutions/02_copy_pitfall.ipynb", "pyproject.toml",
                 ".gitignore", "tools/__init__.py", "tools/workspace.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lessons.ROOT / name, tmp_path / name)
    return tmp_path


# --- make lab: the working folder ------------------------------------------------------------

def test_make_lab_run_again_keeps_the_learners_answers(course):
    workspace.update(course)
    mine = course / workspace.FOLDER / LAB
    answered = write_answer(mine)
    assert workspace.update(course) == ["Your copies in my-work/ are up to date with the course."]
    assert mine.read_bytes() == answered


def test_first_run_copies_lessons_and_labs_with_their_layout(course):
    (lines,) = workspace.update(course)
    assert lines.startswith("Created my-work/")
    assert (course / "my-work" / LAB).read_bytes() == (course / LAB).read_bytes()  # no answers
    mine = nbformat.read(course / "my-work" / LESSON, as_version=4)
    theirs = nbformat.read(course / LESSON, as_version=4)
    assert [c.source for c in mine.cells] == [  # the same cells, explanations folded
        workspace.fold_explanation(c.source) if i in workspace.explanation_cells(theirs.cells)
        else c.source for i, c in enumerate(theirs.cells)]
    assert not (course / "my-work/labs/solutions").exists()
    assert "../README.md" in (course / "my-work/README.md").read_text(encoding="utf-8")


def test_a_lab_new_in_the_course_is_copied_and_the_others_are_left_alone(course):
    workspace.update(course)
    answered = write_answer(course / "my-work" / LAB)
    shutil.copyfile(course / LAB, course / "labs/09_new_topic.ipynb")
    assert workspace.update(course) == [
        "New in the course, copied into my-work/: labs/09_new_topic.ipynb"]
    assert (course / "my-work/labs/09_new_topic.ipynb").exists()
    assert (course / "my-work" / LAB).read_bytes() == answered


def test_a_copy_of_the_old_08_is_kept_and_make_lab_says_where_its_parts_went(course):
    workspace.update(course)
    old_lab, old_lesson = "labs/08_many_devices.ipynb", "notebooks/08_many_devices.ipynb"
    shutil.copyfile(course / LESSON, course / "my-work" / old_lesson)  # copied before the split
    shutil.copyfile(course / LAB, course / "my-work" / old_lab)
    answered = write_answer(course / "my-work" / old_lab)
    for name in ("labs/09_many_processes.ipynb", "labs/10_sharded_training.ipynb"):
        shutil.copyfile(course / LAB, course / name)  # the course now has its two parts
    lines = workspace.update(course)
    assert ("my-work/labs/08_many_devices.ipynb is kept as it is; the course split it into "
            "labs/09_many_processes.ipynb and labs/10_sharded_training.ipynb (your copies of "
            "those are in my-work/ too).") in lines
    assert any(line.startswith(f"my-work/{old_lesson} is kept as it is") and
               "notebooks/09_many_processes.ipynb and notebooks/10_sharded_training.ipynb" in line
               for line in lines)
    assert (course / "my-work" / old_lab).read_bytes() == answered
    assert (course / "my-work/labs/10_sharded_training.ipynb").exists()
    assert workspace.update(course)[-2:] == lines[-2:]  # said again, and the copy still kept
    assert (course / "my-work" / old_lab).read_bytes() == answered


def test_a_newer_lab_upstream_is_reported_and_the_copy_is_untouched(course):
    workspace.update(course)
    answered = write_answer(course / "my-work" / LAB)
    change_a_markdown_cell(course / LAB, "\nA clearer sentence.")
    lines = workspace.update(course)
    assert lines == [
        "The course has a newer version of 1 of your copies in my-work/ (they are untouched):",
        f"  {LAB}  (edited by you)",
        "For the new version of one, keeping yours with today's date in its name: "
        f"make fresh COPY={LAB}",
    ]
    assert (course / "my-work" / LAB).read_bytes() == answered
    assert workspace.update(course) == lines  # said every time until the learner acts on it


def test_a_newer_version_of_an_unedited_copy_says_so(course):
    workspace.update(course)  # the lesson's copy has its explanations folded: not an edit
    change_a_markdown_cell(course / LESSON, "\nA clearer sentence.")
    assert f"  {LESSON}  (not edited by you)" in workspace.update(course)


def test_a_copy_recorded_before_folds_is_judged_by_its_source(course):
    workspace.update(course)
    record = course / "my-work" / workspace.RECORD
    copies = json.loads(record.read_text(encoding="utf-8"))
    del copies["copies"][LAB]["copy"]  # as an older make lab wrote it (labs fold nothing)
    record.write_text(json.dumps(copies), encoding="utf-8")
    change_a_markdown_cell(course / LAB, "\nA clearer sentence.")
    assert f"  {LAB}  (not edited by you)" in workspace.update(course)


def test_a_course_rerun_that_changes_only_outputs_is_not_a_newer_version(course):
    workspace.update(course)
    notebook = json.loads((course / LAB).read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], 7
    (course / LAB).write_text(json.dumps(notebook), encoding="utf-8")
    assert workspace.update(course) == ["Your copies in my-work/ are up to date with the course."]


def test_fresh_copy_keeps_the_learners_with_the_date_in_its_name(course):
    workspace.update(course)
    answered = write_answer(course / "my-work" / LAB)
    change_a_markdown_cell(course / LAB, "\nA clearer sentence.")
    lines = workspace.fresh(f"my-work/{LAB}", course)
    kept = course / "my-work/labs" / f"02_copy_pitfall-{TODAY}.ipynb"
    assert lines == [f"Kept your copy as my-work/labs/{kept.name}",
                     f"my-work/{LAB} is now the course's current version."]
    assert kept.read_bytes() == answered
    assert (course / "my-work" / LAB).read_bytes() == (course / LAB).read_bytes()
    assert workspace.update(course) == ["Your copies in my-work/ are up to date with the course."]
    workspace.fresh(LAB, course)  # a second fresh copy the same day keeps both old ones
    assert (course / "my-work/labs" / f"02_copy_pitfall-{TODAY}-2.ipynb").exists()
    assert kept.read_bytes() == answered


def test_fresh_copy_of_something_not_in_the_course_names_the_choices(course):
    with pytest.raises(SystemExit, match=r"No notebook or lab called 'labs/99_x.ipynb'.*"
                                         r"notebooks/02_copy_pitfall.ipynb, labs/02_copy"):
        workspace.fresh("labs/99_x.ipynb", course)


def test_make_lab_updates_my_work_and_opens_jupyterlab_there():
    result = subprocess.run(["make", "-n", "lab"], cwd=lessons.ROOT, capture_output=True,
                            text=True, check=True)
    lines = result.stdout.splitlines()
    step = next(i for i, line in enumerate(lines) if "tools.workspace" in line)
    start = next(i for i, line in enumerate(lines) if "jupyter lab" in line)
    assert step < start
    assert f'--ServerApp.root_dir="{lessons.ROOT}"' in lines[start]
    assert "--LabApp.default_url=/lab/tree/my-work" in lines[start + 1]


# --- predict, then run: the learner's copies open with the answers cleared ------------------

def _cells(*specs):
    """Cells from (type, source, tags) triples, as a notebook's JSON holds them."""
    made = []
    for kind, text, tags in specs:
        cell = {"cell_type": kind, "source": text, "metadata": {"tags": tags}}
        if kind == "code":
            cell.update(outputs=[{"output_type": "stream", "name": "stdout", "text": "answer"}],
                        execution_count=1)
        made.append(cell)
    return made


def test_an_answer_cell_is_the_first_code_cell_after_a_question_quizzes_skipped():
    cells = _cells(
        ("markdown", "## 1. Lesson\n\n**Predict, then run.** Where is it?", []),
        ("code", "utils.quiz('Where is it?', choices=['a', 'b'], answer='a')", []),
        ("code", "print(inputs.device)", []),  # 2: the answer
        ("code", "print('more')", []),
        ("markdown", "Predict what happens, then run it.", []),
        ("code", "run()", ["not-answer"]),  # the author says: not an answer
        ("markdown", "**Predict:** where does it load?", []),
        ("markdown", "First, a word of explanation.", []),
        ("code", "torch.load(path)", []),  # a markdown came first: only a tag makes it one
        ("code", "print(later)", ["answer"]),  # 9: tagged
        ("markdown", "## Exercise 1\n\nPredict; do not run the lines.", []),
        ("code", "def f():\n    raise NotImplementedError()", []),  # the learner's answer
        ("markdown", "- Predict what a step needs in memory (a learning goal, no question).", []),
        ("code", "print('setup')", []),
    )
    assert workspace.answer_cells(cells) == [2, 9]


def test_my_work_copies_open_with_answer_outputs_cleared_and_the_course_keeps_them(course):
    workspace.update(course)
    theirs = nbformat.read(course / LESSON, as_version=4)
    mine = nbformat.read(course / "my-work" / LESSON, as_version=4)
    nbformat.validate(mine)
    answers = workspace.answer_cells(json.loads((course / LESSON).read_text())["cells"])
    explanations = workspace.explanation_cells(json.loads((course / LESSON).read_text())["cells"])
    assert answers, f"{LESSON} asks 'Predict, then run' and has an answer cell"
    assert explanations, f"{LESSON} explains an answer right under it"
    for index, (my_cell, their_cell) in enumerate(zip(mine.cells, theirs.cells, strict=True)):
        if index in answers:
            assert their_cell.outputs and not my_cell.outputs and my_cell.execution_count is None
        elif index in explanations:
            assert my_cell.source.startswith(workspace.AFTER_RUNNING)
            assert my_cell.source != their_cell.source and my_cell.metadata == their_cell.metadata
        else:
            assert my_cell == their_cell, f"cell {index} changed in the copy"
    # The pitfall's answer is where `inputs` is: the course shows it, the copy does not.
    assert "inputs.to(other)" in theirs.cells[answers[0]].source
    assert workspace.update(course) == ["Your copies in my-work/ are up to date with the course."]


#: Questions whose answer comes after a markdown cell, so the rule cannot find it: the notebook's
#: owner tags the cell that answers it `answer` (then delete the line here).
UNANSWERED_UNTIL_TAGGED = {
}


def test_every_prediction_question_in_a_lesson_has_an_answer_cell_to_clear():
    unanswered = set()
    for path in lessons.lesson_notebooks():
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        answers = workspace.answer_cells(cells)
        asks = [i for i, c in enumerate(cells)
                if c["cell_type"] == "markdown" and workspace.ASKS.search(workspace._text(c))]
        for number, index in enumerate(asks):
            end = asks[number + 1] if number + 1 < len(asks) else len(cells)
            if not any(index < answer < end for answer in answers):
                unanswered.add((path.name, cells[index]["id"]))
        assert all(cells[i]["outputs"] for i in answers), f"{path.name}: an answer with no output"
    assert not unanswered - UNANSWERED_UNTIL_TAGGED.keys(), (
        "a 'Predict' question whose answer cell the rule cannot find: tag that cell `answer`")
    assert not UNANSWERED_UNTIL_TAGGED.keys() - unanswered, (
        "tagged now: remove it from UNANSWERED_UNTIL_TAGGED")


def test_a_quiz_on_its_own_is_a_question_answered_by_the_next_code_cell_that_runs_something():
    cells = _cells(
        ("markdown", "## 1. Lesson", []),
        ("code", "utils.quiz('How many bytes?', choices=['0', '8'], answer='0')", []),  # 1
        ("markdown", "A word before the answer, allowed after a quiz.", []),
        ("code", "assert True", ["hidden-check"]),  # a check cell prints nothing: skipped
        ("code", "%%writefile script.py\nprint(1)", []),  # writes a file: skipped
        ("code", "print(ledger.bytes_moved)", []),  # 5: the answer
        ("code", "utils.quiz('Which?', choices=['a', 'b'], answer='a')", []),  # 6
        ("markdown", "## 2. The next section", []),  # a new section: no answer for quiz 6
        ("code", "print('unrelated')", []),
    )
    assert workspace.questions(cells) == [(1, 5), (6, None)]
    assert workspace.answer_cells(cells) == [5]


def test_the_explanation_under_an_answer_opens_folded_until_a_heading_or_a_new_question():
    cells = _cells(
        ("markdown", "**Predict, then run.** Are they equal?", []),
        ("code", "print(a == b)", []),  # 1: the answer
        ("code", "assert True", ["hidden-check"]),  # a check cell between: skipped
        ("markdown", "They are **not** equal.\n\n```python\nx = 1\n\ny = 2\n```\n\n"
                     "Why, in short.\n\n## 2. Next\n\nMore.", []),  # 3: explains the answer
        ("markdown", "**Predict:** and now?", []),
        ("code", "print(c)", []),  # 5: the answer
        ("markdown", "## 3. A heading first: nothing explains the answer here", []),
    )
    assert workspace.explanation_cells(cells) == [3]
    folded = workspace.fold_explanation(cells[3]["source"])
    assert folded.startswith(workspace.AFTER_RUNNING + "\n\nThey are **not** equal.")
    lead, rest = folded.split("</details>")
    assert "```python\nx = 1\n\ny = 2\n```" in lead and "Why, in short." in lead
    assert rest == "\n\n## 2. Next\n\nMore."  # the next section stays in view
    for kept in ("## 3. Heading", "**Predict:** next?", "<details><summary>Deeper</summary>"):
        assert workspace.fold_explanation(kept + "\n\nText.") == kept + "\n\nText."


@pytest.mark.parametrize("path", lessons.lesson_notebooks(), ids=lambda p: p.name)
def test_no_explanation_under_an_answer_is_in_view_in_the_learners_copy(path, tmp_path):
    """The text right under an answer cell often opens with the answer ("They are **not**
    equal"): in the copy it waits in a fold until the learner has run the cell."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    copy = tmp_path / path.name
    workspace.learners_copy(path, copy)
    mine = json.loads(copy.read_text(encoding="utf-8"))["cells"]
    for answer in workspace.answer_cells(cells):
        after = answer + 1
        while after < len(cells) and workspace.CHECK_TAG in workspace._tags(cells[after]):
            after += 1
        if after == len(cells) or cells[after]["cell_type"] != "markdown":
            continue
        text, shown = workspace._text(cells[after]), workspace._text(mine[after])
        opens_elsewhere = workspace._ends_explanation(text.lstrip().split("\n\n")[0])
        assert opens_elsewhere or shown.startswith(workspace.AFTER_RUNNING), (
            f"{path.name}: cell {after} explains the answer of cell {answer} in view: "
            f"{text[:60]!r}")


def _quiz_answer(source: str) -> str:
    """The ``answer=`` of a ``utils.quiz(...)`` cell."""
    call = ast.parse(source).body[0].value
    return next(ast.literal_eval(k.value) for k in call.keywords if k.arg == "answer")


def _output_text(cell: dict) -> str:
    texts = []
    for output in cell.get("outputs", []):
        texts.append(output.get("text", "") if isinstance(output.get("text", ""), str)
                     else "".join(output["text"]))
        for value in output.get("data", {}).values():
            texts.append(value if isinstance(value, str) else "".join(map(str, value)))
    return "\n".join(texts)


@pytest.mark.parametrize("path", lessons.lesson_notebooks(), ids=lambda p: p.name)
def test_no_questions_answer_is_visible_in_the_learners_copy(path, tmp_path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    copy = tmp_path / path.name
    workspace.learners_copy(path, copy)
    mine = json.loads(copy.read_text(encoding="utf-8"))["cells"]
    for question, answer in workspace.questions(cells):
        where = f"{path.name}, the question in cell {question}"
        assert answer is not None, f"{where}: no answer cell found; tag the cell `answer`"
        assert not mine[answer].get("outputs"), f"{where}: its answer (cell {answer}) is shown"
        quizzes = [i for i in range(question, answer)
                   if workspace._text(cells[i]).startswith("utils.quiz(")]
        for quiz in quizzes:  # the right choice is printed nowhere before the answer is run
            right = _quiz_answer(workspace._text(cells[quiz]))
            shown = [i for i in range(question, answer) if i not in quizzes
                     and right in _output_text(mine[i])]
            assert not shown, f"{where}: cells {shown} print the quiz's answer {right!r}"


# --- an update of the course: git pull in a learner's clone ----------------------------------

def git(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "pull.rebase=false",
                           *args], cwd=folder, env=env, capture_output=True, text=True)


def test_git_pull_of_an_updated_course_keeps_the_learners_answers(course, tmp_path_factory):
    assert git(course, "init", "-q").returncode == 0
    git(course, "add", "-A")
    assert git(course, "commit", "-qm", "the course").returncode == 0
    clone = tmp_path_factory.mktemp("learner") / "course"
    assert git(clone.parent, "clone", "-q", str(course), str(clone)).returncode == 0

    tool = [sys.executable, "-m", "tools.workspace"]
    subprocess.run(tool, cwd=clone, check=True, capture_output=True)  # make lab, first time
    answered = write_answer(clone / "my-work" / LAB)
    assert git(clone, "status", "--porcelain").stdout == ""  # the answers are not git's business

    change_a_markdown_cell(course / LAB, "\nA clearer sentence.")
    git(course, "commit", "-qam", "lab 02: a clearer sentence")
    pulled = git(clone, "pull")
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert "CONFLICT" not in pulled.stdout + pulled.stderr
    assert (clone / LAB).read_bytes() == (course / LAB).read_bytes()  # the update arrived
    assert (clone / "my-work" / LAB).read_bytes() == answered  # and the answers are intact

    report = subprocess.run(tool, cwd=clone, check=True, capture_output=True, text=True).stdout
    assert f"  {LAB}  (edited by you)\n" in report
    assert (clone / "my-work" / LAB).read_bytes() == answered


# --- make labs: build_labs refuses to overwrite someone's work -------------------------------

@pytest.fixture
def lab_builder(course, monkeypatch) -> Path:
    """build_labs working on ``course``, with notebook execution and `make nav` skipped."""
    monkeypatch.setattr(lessons, "ROOT", course)
    monkeypatch.setattr(lessons, "NOTEBOOKS", course / "notebooks")
    monkeypatch.setattr(lessons, "LABS", course / "labs")
    monkeypatch.setattr(lessons, "SOLUTIONS", course / "labs/solutions")
    monkeypatch.setattr(build_nav, "main", lambda argv: 0)
    monkeypatch.setattr(run_notebooks, "execute", lambda path: nbformat.read(path, as_version=4))
    return course


def test_make_labs_refuses_to_overwrite_a_lab_holding_answers(lab_builder, capsys):
    answered = write_answer(lab_builder / LAB)
    assert build_labs.main([]) == 1
    assert (lab_builder / LAB).read_bytes() == answered
    out = capsys.readouterr().out
    assert f"not overwritten: {LAB}: 1 cell(s) differ from the generated lab" in out
    assert "python -m tools.build_labs --force" in out


def test_make_labs_force_keeps_a_backup_in_my_work_then_regenerates(lab_builder, capsys):
    answered = write_answer(lab_builder / LAB)
    assert build_labs.main(["--force"]) == 0
    kept = lab_builder / "my-work/labs" / f"02_copy_pitfall-backup-{TODAY}.ipynb"
    assert kept.read_bytes() == answered
    assert ANSWER not in (lab_builder / LAB).read_text(encoding="utf-8")
    assert f"kept: {LAB} as my-work/labs/{kept.name}" in capsys.readouterr().out


def test_make_labs_regenerates_its_own_lab_after_the_solution_changed(lab_builder):
    assert build_labs.main([]) == 0  # records what it wrote in the lab's metadata
    change_a_markdown_cell(lab_builder / "labs/solutions/02_copy_pitfall.ipynb", "\nNew words.")
    assert build_labs.main([]) == 0
    assert "New words." in (lab_builder / LAB).read_text(encoding="utf-8")


def test_a_lab_that_was_only_run_is_not_someones_work(lab_builder):
    notebook = json.loads((lab_builder / LAB).read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], 3
    (lab_builder / LAB).write_text(json.dumps(notebook), encoding="utf-8")
    assert build_labs.main([]) == 0
