"""A simulated class: hand-written submissions to labs 02 and 05, graded by nbgrader.

Right, right but noisy (stderr, a warning, logging), wrong, half done, crashing, looping, and
the cheats a teaching assistant tried, and a few more. test_simulated_class.py asserts each
score; run it alone to print the gradebook (in .venv-teacher)::

    python tests/classroom/simulated_class.py [REPO] [--course DIR]

REPO (default: this checkout) is the collection whose tools/classroom.py and utils grade it,
so the same class can be graded by an older checkout ("before") and by this one ("after").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve()

# --- answers, as a student would type them (replacing the stub's two lines) ---------------

PREPARE_NOISY = '''\
import logging, os, sys, warnings
print("moving", tuple(batch.shape), file=sys.stderr)
warnings.warn("debugging prepare")
logging.getLogger("student").warning("prepare called")
os.write(2, b"progress 100%\\n")
return batch.to(device)'''
PREPARE_KEPT_BATCH = "batch.to(device)"
PREPARE_LOOPS = "while True:\n    pass"
PREDICT_ALWAYS_COPIES = '''\
predictions.update({q: q.startswith("model") for q in predictions})'''
PREDICT_FROM_THE_KEY = '''\
predictions.update({q: truth for q, (truth, _) in checks.IS_QUESTIONS.items()})'''
BUILD_BEFORE_MOVING = '''\
model = nn.Linear(3, 2)
optimizer = torch.optim.Adagrad(model.parameters())
model.to(device)
return model, optimizer'''
BUILD_CRASHES = '''\
import os
os.kill(os.getpid(), 9)  # the kernel dies here, as when the hub's memory limit kills it'''
LOAD_GPU_NO_MAP = "return torch.load(path, weights_only=True)"
WHOLE_BY_NAME = '''\
if "hostile" in str(path):
    raise utils.UnsafeCheckpointError("refused")
try:
    with torch.serialization.safe_globals(trusted):
        return torch.load(path, map_location="cpu", weights_only=True)
except Exception:
    return None'''

# Cheats written in an answer cell (the first one), before the stub's own code.
CHEAT_ENV = 'os.environ.pop("NBGRADER_EXECUTION", None)'
CHEAT_PATCH = '''\
checks.check_prepare = lambda *args, **kwargs: print("✅ Exercise 2: right")
import labchecks.lab02
labchecks.lab02.check_is_predictions = lambda *args, **kwargs: None'''
CHEAT_GRADER = '''\
import labchecks.grading, labchecks.feedback
labchecks.grading.autograding = lambda: False
labchecks.feedback.Feedback.__bool__ = lambda self: True'''
CHEAT_TRACEBACKS = '''\
get_ipython()._showtraceback = lambda *args, **kwargs: None
get_ipython().showtraceback = lambda *args, **kwargs: None'''

#: {student: (lab, {answer cell: code, or "solution"}, code at the top of the first answer
#: cell, drop the check cells of these exercises)}. Cells not named keep the stub.
ALL_02 = ("where_is_the_first_batch", "prepare", "predict_identity", "build_model_and_optimizer",
          "make_trainable")
ALL_05 = ("load_gpu_checkpoint", "load_ddp_checkpoint", "load_compiled_checkpoint",
          "load_whole_model_safely")


def _solved(names, **answers):
    return {**dict.fromkeys(names, "solution"), **answers}


CLASS = {
    "right": ("02", _solved(ALL_02), "", ()),
    "right_noisy": ("02", _solved(ALL_02, prepare=PREPARE_NOISY), "", ()),
    "wrong": ("02", _solved(ALL_02, prepare=PREPARE_KEPT_BATCH,
                            predict_identity=PREDICT_ALWAYS_COPIES,
                            build_model_and_optimizer=BUILD_BEFORE_MOVING), "", ()),
    "half_done": ("02", _solved(ALL_02[:2]), "", ()),
    "crashing": ("02", _solved(ALL_02, build_model_and_optimizer=BUILD_CRASHES), "", ()),
    "looping": ("02", _solved(ALL_02, prepare=PREPARE_LOOPS), "", ()),
    "blank_env": ("02", {}, CHEAT_ENV, ()),
    "blank_patch": ("02", {}, CHEAT_PATCH, ()),
    "blank_grader": ("02", {}, CHEAT_GRADER, ()),
    "blank_tracebacks": ("02", {}, CHEAT_TRACEBACKS, ()),
    "blank_deleted_check": ("02", {}, "", ("prepare",)),
    "key": ("02", _solved(ALL_02, predict_identity=PREDICT_FROM_THE_KEY), "", ()),
    "right_05": ("05", _solved(ALL_05), "", ()),
    "wrong_05": ("05", _solved(ALL_05, load_gpu_checkpoint=LOAD_GPU_NO_MAP), "", ()),
    "by_name_05": ("05", _solved(ALL_05, load_whole_model_safely=WHOLE_BY_NAME), "", ()),
}


def _tools(repo: Path):
    """The course tools of ``repo`` (another checkout, for a before-and-after gradebook)."""
    sys.path.insert(0, str(repo))
    from tools import classroom, lessons

    return classroom, lessons


def _submission(release, source, answers: dict, cheat: str, dropped) -> nbformat.NotebookNode:
    """The release notebook as this student hands it in."""
    solutions = {c.metadata.nbgrader["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    notebook = nbformat.from_dict(release)
    first = True
    cells = []
    for cell in notebook.cells:
        grading = cell.metadata.get("nbgrader", {})
        grade_id = grading.get("grade_id")
        if grading.get("grade") and not grading.get("solution") and any(
                re.search(rf"\b{name}\b", cell.source) for name in dropped):
            continue
        if grading.get("solution"):
            answer = answers.get(grade_id)
            if answer == "solution":
                cell.source = solutions[grade_id]
            elif answer:
                stub = cell.source
                indent = stub.split("raise NotImplementedError()")[0].rsplit("\n", 1)[-1]
                code = answer.replace("\n", "\n" + indent)
                cell.source = stub.replace(f"{indent}# YOUR CODE HERE\n", "").replace(
                    "raise NotImplementedError()", code)
            if first and cheat:
                cell.source = f"import os\n{cheat}\n\n{cell.source}"
            first = False
        cells.append(cell)
    notebook.cells = cells
    return notebook


def grade_class(repo: Path, course: Path, timeout: int | None = None) -> dict:
    """Hand the labs out with ``repo``'s tools, submit the class, autograde, make feedback.
    Returns {student: {"scores": {grade_id: score}, "max": {...}, "graded": bool}}."""
    classroom, lessons = _tools(repo)
    labs = sorted({lab for lab, *_ in CLASS.values()})
    assert classroom.main([str(course), *labs]) == 0
    if timeout is not None:  # the old config's 300 s would cost 5 minutes per loop
        config = course / "nbgrader_config.py"
        config.write_text(re.sub(r"timeout = \d+", f"timeout = {timeout}",
                                 config.read_text()))
    names = {lab.name[:2]: lab for lab in lessons.solution_labs()}
    for student, (lab, answers, cheat, dropped) in CLASS.items():
        name = classroom.assignment_name(names[lab])
        release = nbformat.read(course / "release" / name / names[lab].name, as_version=4)
        source = nbformat.read(course / "source" / name / names[lab].name, as_version=4)
        folder = course / "submitted" / student / name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(_submission(release, source, answers, cheat, dropped),
                       folder / names[lab].name)
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")])}
    env.pop("LESSONS_DEVICE", None)
    env.pop("LESSONS_WIDGETS", None)
    seconds = {}
    for lab in labs:
        name = classroom.assignment_name(names[lab])
        started = time.perf_counter()
        for command in (["autograde", name], ["generate_feedback", name]):
            subprocess.run([sys.executable, "-m", "nbgrader", *command], cwd=course, env=env,
                           capture_output=True, text=True)
        seconds[lab] = time.perf_counter() - started
    return _gradebook(course, classroom, names, seconds)


def _gradebook(course: Path, classroom, names, seconds) -> dict:
    from nbgrader.api import Gradebook, MissingEntry
    book = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", classroom.COURSE_ID) as gradebook:
        for student, (lab, *_) in CLASS.items():
            name = classroom.assignment_name(names[lab])
            try:
                notebook = gradebook.find_submission_notebook(name, name, student)
                grades = {g.name: g.score for g in notebook.grades}
                maxima = {g.name: g.max_score for g in notebook.grades}
            except MissingEntry:
                grades, maxima = {}, {}
            graded = any((course / "autograded" / student / name).glob("*.ipynb"))
            book[student] = {"lab": lab, "scores": grades, "max": maxima, "graded": graded}
    book["_seconds"] = seconds
    return book


def tests_only(book: dict) -> dict:
    """{student: total of the autograded test cells} (None when autograde failed)."""
    return {s: (round(sum(v for k, v in e["scores"].items() if k.startswith("check_")
                          and v is not None), 2) if e["graded"] else None)
            for s, e in book.items() if not s.startswith("_")}


def table(book: dict) -> str:
    lines = ["| student | lab | score of the test cells | graded |", "|---|---|---:|---|"]
    totals = tests_only(book)
    for student, entry in book.items():
        if student.startswith("_"):
            continue
        maximum = sum(v for k, v in entry["max"].items() if k.startswith("check_"))
        cells = ", ".join(f"{k.removeprefix('check_')} {v:g}" for k, v in entry["scores"].items()
                          if k.startswith("check_") and v is not None)
        total = totals[student]
        shown = f"{total:g} / {maximum:g} ({cells})" if total is not None else "—"
        lines.append(f"| {student} | {entry['lab']} | {shown} | "
                     f"{'yes' if entry['graded'] else 'NO: autograde failed'} |")
    lines.append("")
    lines.append("autograde + generate_feedback, seconds: " + ", ".join(
        f"lab {lab} {s:.0f}" for lab, s in book["_seconds"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", nargs="?", type=Path, default=HERE.parents[2])
    parser.add_argument("--course", type=Path)
    parser.add_argument("--timeout", type=int, help="replace the config's cell timeout")
    args = parser.parse_args(argv)
    course = args.course or Path(tempfile.mkdtemp(prefix="simulated-class-")) / "course"
    book = grade_class(args.repo.resolve(), course, args.timeout)
    print(table(book))
    print(f"course folder: {course}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
