"""How a lab check behaves when nbgrader grades it, rather than a learner reading it.

A learner alone sees one friendly line: ✅ passed, ❌ the misconception, ⏳ not attempted.
Under nbgrader two things happen, and only the first decides a mark:

1. **The grader.** Each autograded test cell that ``tools/classroom.py`` writes opens with a
   hidden part (:func:`hidden_test`, which ``nbgrader autograde`` puts back into every
   submission). It loads this file afresh from the teacher's disk and calls :func:`grade`:
   is the code that grades the code on disk (labchecks/tamper.py)? Then the real check runs,
   the learner's stderr kept out of the cell, and the cell's value is its score. Nothing in
   the grading path asks an environment variable.
2. **The visible line** (``checks.check_...(...)``). Under nbgrader (``NBGRADER_EXECUTION``
   is ``autograde`` or ``validate``) it returns the grader's verdict without running the
   learner's function again; where no grader ran (*Validate*), a check not passed raises
   :class:`CheckFailed`, so *Validate* shows what would lose points.

A cell nbgrader's timeout stops says why (:func:`explain_cell_timeouts`). Each check is marked
``@graded`` where it is defined. Introduced in docs/teaching.md (the classroom path), where
the trust model is too ("What grading protects"); importing this module changes nothing.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from labchecks.feedback import FAILED, PASSED, Feedback, NotAttempted, Verdict, not_attempted

AUTOGRADING_VARIABLE = "NBGRADER_EXECUTION"
AUTOGRADING_MODES = frozenset({"autograde", "validate"})
#: Seconds one check may run under the grader; nbgrader's per-cell timeout (the course
#: config, tools/classroom.py) is a little longer and catches loops outside a check.
CHECK_TIME_LIMIT_S = 50
#: Width of the feedback a student reads on the feedback page.
FEEDBACK_WIDTH = 90
#: Width of CheckFailed's message: `nbgrader validate` indents each line by 4, prefixes
#: "CheckFailed: " and cuts lines at 87 characters.
VALIDATE_WIDTH = 70
#: nbgrader's per-cell timeout in the course config tools/classroom.py writes.
CELL_TIMEOUT_S = 60
CELL_TOO_SLOW = (f"this cell did not finish in {CELL_TIMEOUT_S} s (nbgrader's limit for one "
                 "cell): look for a loop that never ends")
TOO_SLOW = ("your function did not finish in {seconds} s: look for a loop that never ends "
            "(a `while` whose condition never changes, or a loop over something that grows).")


class CheckFailed(AssertionError):
    """Raised by a check under nbgrader when the exercise is wrong or not attempted.

    Its message is the Feedback line (❌ misconception or ⏳ not attempted).
    """


def autograding() -> bool:
    """True while nbgrader autogrades or validates the notebook this kernel runs."""
    return os.environ.get(AUTOGRADING_VARIABLE, "") in AUTOGRADING_MODES


@dataclass(frozen=True, repr=False)
class PrintedFeedback(Feedback):
    """A passed Feedback that IPython shows by printing it (no value for nbgrader to parse)."""

    def _ipython_display_(self) -> None:
        print(self.wrapped(FEEDBACK_WIDTH))


@dataclass(frozen=True, repr=False)
class GradedFeedback(Feedback):
    """The grader's verdict, returned by the visible line of its own cell: shows nothing
    (the grader printed it already) and is true only when passed."""

    def _ipython_display_(self) -> None:
        pass


#: Verdicts of the grader in this kernel: {(check name, ids of its arguments): [Feedback,
#: shown by the visible line yet]}. Only what the visible line displays depends on it.
_verdicts: dict[tuple, list] = {}


def _key(name: str, args: tuple, kwargs: dict) -> tuple:
    """The same for the same objects (by identity; literals by value) in the same order."""
    def same(value):
        return repr(value) if isinstance(value, str | int | float | bool | None) else id(value)
    return (name, tuple(map(same, args)), tuple(sorted((k, same(v)) for k, v in kwargs.items())))


def graded(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Return ``check`` made gradable: unchanged for a learner; under nbgrader it returns
    the grader's verdict if the grader ran it, else raises CheckFailed unless passed.
    Marks each check where it is defined (``@graded``); a check already graded is returned
    as it is."""
    if hasattr(check, "__wrapped_check__"):
        return check

    @functools.wraps(check)
    def run(*args, **kwargs):
        if autograding():
            seen = _verdicts.get(_key(check.__name__, args, kwargs))
            if seen is not None:  # the grader ran this check: do not run the learner's code again
                feedback, shown = seen
                seen[1] = True
                if shown:  # a later, ungraded cell: the verdict as a learner reads it
                    return feedback
                return GradedFeedback(feedback.exercise, feedback.status, feedback.message)
        feedback = verdict_of(check, *args, **kwargs)
        if not autograding() or not isinstance(feedback, Feedback):
            return feedback
        if feedback.status != PASSED:
            raise CheckFailed(feedback.wrapped(VALIDATE_WIDTH))
        return PrintedFeedback(feedback.exercise, feedback.status, feedback.message)

    run.__wrapped_check__ = check
    return run


def verdict_of(check: Callable[..., Feedback], *args, **kwargs) -> Feedback:
    """``check(*args, **kwargs)``: what it returns, the Feedback a helper of it raised
    (:func:`labchecks.feedback.stop_on`), or "not attempted" when the learner's code is still
    the stub (:class:`~labchecks.feedback.NotAttempted`, raised by feedback.call)."""
    try:
        return check(*args, **kwargs)
    except Verdict as verdict:
        return verdict.feedback
    except NotAttempted:
        return not_attempted(exercise_of(check))


def exercise_of(check: Callable) -> str:
    """"Exercise 2" for a check whose docstring opens "Exercise 02.2: ..."; else its name."""
    found = re.search(r"Exercise \d+\.(\d+)", check.__doc__ or "")
    return f"Exercise {found[1]}" if found else check.__name__


#: The line every kernel nbgrader starts runs first (tools/classroom.py's course config):
#: under autograde, a cell its timeout stops says why.
KERNEL_SETUP = "import labchecks.grading as _g; _g.explain_cell_timeouts(); del _g"


class CellTimeout(Exception):
    """Shown instead of the KeyboardInterrupt nbgrader's cell timeout sends the kernel."""


def explain_cell_timeouts() -> None:
    """Under autograde, show nbgrader's cell timeout (a KeyboardInterrupt, which nbgrader
    sends a cell still running after CELL_TIMEOUT_S) as CELL_TOO_SLOW, with the traceback
    pointing at the line that was running. Nothing changes for a learner alone."""
    shell = _shell()
    if shell is None or os.environ.get(AUTOGRADING_VARIABLE) != "autograde":
        return

    def timed_out(self, etype, value, tb, tb_offset=None):
        self.showtraceback((CellTimeout, CellTimeout(CELL_TOO_SLOW), tb), tb_offset=tb_offset)

    shell.set_custom_exc((KeyboardInterrupt,), timed_out)


# --- the grader: what a hidden test cell runs ----------------------------------------------

def hidden_test(check_name: str, points: float, arguments: str, grader_path: str) -> str:
    """The hidden part ``tools/classroom.py`` puts at the top of an autograded test cell:
    load this file afresh from ``grader_path`` and grade ``check_name(arguments)``."""
    return "\n".join([
        "### BEGIN HIDDEN TESTS",
        "# The grader (labchecks/grading.py), loaded afresh: students never see this part,",
        "# and nbgrader restores it in every submission. It prints the verdict and shows the",
        "# score as this cell's value; the line below then shows nothing more.",
        f"__grader = {{'__name__': 'lesson_grader', '__file__': {grader_path!r}}}",
        "exec(compile(open(__grader['__file__'], encoding='utf-8').read(), "
        "__grader['__file__'], 'exec'), __grader)",
        f"__grader['grade']({check_name!r}, {points!r},",
        f"                  lambda: __grader['arguments']({arguments}))",
        "del __grader",
        "### END HIDDEN TESTS",
    ])


def arguments(*args, **kwargs) -> tuple[tuple, dict]:
    """The arguments of the visible check call, as the hidden part passes them on."""
    return args, kwargs


def grade(check_name: str, points: float, arguments: Callable[[], tuple]) -> float:
    """Grade one test cell: run the real ``check_name`` on ``arguments()``, print the
    verdict, show the score (0 to ``points``) as the cell's value and return it.

    Never raises for anything the learner's code does: a cell that shows a score is scored
    by it, and only by it. The score is 0 when the lab's checks or IPython's output
    machinery are not the code on disk (code in the notebook replaced them).
    """
    changed = tampering()
    if changed:
        feedback = Feedback(check_name, FAILED, "not graded: code in this notebook replaced "
                            f"part of the grader ({'; '.join(changed[:3])}). Your teacher "
                            "will read it by hand.")
    else:
        feedback = _run_check(check_name, arguments)
        changed = tampering()  # the learner's function ran: look again
        if changed:
            feedback = Feedback(feedback.exercise, FAILED, "not graded: while the check ran, "
                                "your code replaced part of the grader "
                                f"({'; '.join(changed[:3])}). Your teacher will read it by hand.")
    fraction = 1.0 if feedback.status == PASSED else _fraction(feedback)
    score = round(points * fraction, 2)
    print(feedback.wrapped(FEEDBACK_WIDTH))
    if fraction and feedback.status != PASSED:
        print(f"   Partial credit: {score:g} of {points:g} points.")
    if changed:
        _remember(feedback, check_name, arguments)  # the visible line: nothing more to show
        # A second channel nbgrader reads as 0 (a cell that wrote to stderr), whatever
        # became of the value.
        sys.stderr.write(f"grader: {'; '.join(changed[:3])}\n")
        sys.stderr.flush()
    shell = _shell()
    if shell is not None:
        shell.displayhook(score)
    return score


def _remember(feedback: Feedback, check_name: str, arguments: Callable[[], tuple]) -> None:
    try:
        args, kwargs = arguments()
    except Exception:
        return
    _visible_verdicts()[_key(check_name, args, kwargs)] = [feedback, False]


def _fraction(feedback: Feedback) -> float:
    score = getattr(feedback, "score", None)
    return min(max(float(score), 0.0), 1.0) if isinstance(score, int | float) else 0.0


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class TooSlow(BaseException):
    """Raised inside the learner's code when a check runs past CHECK_TIME_LIMIT_S (a
    BaseException, so the learner's ``except Exception`` does not swallow it)."""


def _run_check(check_name: str, arguments: Callable[[], tuple]) -> Feedback:
    check = _real_check(check_name)
    if check is None:
        return Feedback(check_name, FAILED, f"the grader found no {check_name} in the lab's "
                        "checks: tell your teacher.")
    try:
        args, kwargs = arguments()
    except NameError as error:
        from labchecks.feedback import explain
        return Feedback(check_name, FAILED, explain(error))
    record = _visible_verdicts()
    key = _key(check_name, args, kwargs)
    exercise = exercise_of(check)
    record[key] = [Feedback(exercise, FAILED, TOO_SLOW.format(seconds=CHECK_TIME_LIMIT_S)),
                   False]
    try:
        with learner_output_silenced(), time_limit(CHECK_TIME_LIMIT_S):
            feedback = verdict_of(check, *args, **kwargs)
    except TooSlow:
        feedback = record[key][0]
    except KeyboardInterrupt:  # nbgrader's own cell timeout interrupted the kernel
        feedback = Feedback(exercise, FAILED, TOO_SLOW.format(seconds="the time allowed"))
    except Exception as error:  # the check itself broke on this answer: say so, score 0
        from labchecks.feedback import first_line
        feedback = Feedback(exercise, FAILED, f"the check could not run your answer "
                            f"(`{first_line(error)}`). Run the cell above this one, fix what "
                            "it reports, and run this one again.")
    if not isinstance(feedback, Feedback):
        feedback = Feedback(exercise, FAILED, "the check returned no verdict: tell your teacher.")
    record[key] = [feedback, False]
    return feedback


def _visible_verdicts() -> dict:
    """The verdict table of the kernel's own copy of this module (what the visible line
    reads); a throwaway dict when it is not loaded."""
    module = _tamper()["loaded"](_here())
    table = getattr(module, "_verdicts", None)
    return table if isinstance(table, dict) else {}


def _here() -> Path:
    """This file on disk (also when the hidden part exec()s it under another name)."""
    return Path(globals().get("__file__") or __file__).resolve()


def tampering() -> list[str]:
    """What code in the notebook replaced in the grader's path (labchecks/tamper.py, read
    afresh from disk); empty when everything is as on disk."""
    return _tamper()["tampering"]()


_tamper_namespace: dict | None = None


def _tamper() -> dict:
    """labchecks/tamper.py beside this file, run from disk once per copy of this module:
    never taken from ``sys.modules``, where code in the notebook could have replaced it."""
    global _tamper_namespace
    if _tamper_namespace is None:
        path = _here().parent / "tamper.py"
        namespace = {"__name__": "lesson_tamper", "__file__": str(path)}
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
        _tamper_namespace = namespace
    return _tamper_namespace


def _real_check(check_name: str) -> Callable[..., Feedback] | None:
    """The check named ``check_name`` as defined in a ``labchecks/labNN.py`` on disk,
    taken from the loaded module whose code :func:`tampering` verifies."""
    for path in sorted(_here().parent.glob("lab*.py")):
        if f"def {check_name}(" not in path.read_text(encoding="utf-8"):
            continue
        module = _tamper()["loaded"](path)
        check = vars(module).get(check_name) if module is not None else None
        return inspect.unwrap(check) if callable(check) else None
    return None


@contextlib.contextmanager
def learner_output_silenced() -> Iterator[None]:
    """Keep what the learner's code writes to stderr (print(file=sys.stderr), warnings,
    logging, a progress bar, the C level) out of the cell: nbgrader scores a test cell that
    wrote to stderr 0. What it prints to stdout still shows."""
    previous_disable = logging.root.manager.disable
    saved_fd = None
    try:
        sys.stderr.flush()
        saved_fd = os.dup(2)
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
    except (OSError, ValueError, AttributeError):
        saved_fd = None
    try:
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.CRITICAL)
            yield
    finally:
        logging.disable(previous_disable)
        if saved_fd is not None:
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise TooSlow in the learner's code after ``seconds`` (main thread, Unix only)."""
    usable = hasattr(signal, "setitimer") and _in_main_thread()
    if not usable:
        yield
        return

    def too_slow(signum, frame):
        raise TooSlow()

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _in_main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()
