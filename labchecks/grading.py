"""How a lab check behaves when nbgrader grades it, rather than a learner reading it.

A learner working alone sees one friendly line: ✅ passed, ❌ the misconception, ⏳ not
attempted. nbgrader scores a test cell by its outputs alone: an error means no points. So
while nbgrader runs a lab, every ``checks.check_...`` that is not passed raises
:class:`CheckFailed`, whose message is that same line (the learner reads it in the
feedback nbgrader returns), and a passed check prints its line instead of returning it as
the cell's value (nbgrader would try to read a returned value as a partial score).

Under autograding means: nbgrader sets ``NBGRADER_EXECUTION`` to ``"autograde"`` or
``"validate"`` in the environment the notebook's kernel starts in (nbgrader's FAQ, "Can I
modify the notebook behavior during autograding or validation?"). That is nbgrader's own,
documented signal; a teacher configures nothing, and a learner never sets it by accident.

Introduced in docs/teaching.md (the classroom path); the hook is one line at the end of
labchecks/__init__.py.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from labchecks.feedback import PASSED, Feedback

AUTOGRADING_VARIABLE = "NBGRADER_EXECUTION"
AUTOGRADING_MODES = frozenset({"autograde", "validate"})


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
        print(self)


def graded(check: Callable[..., Feedback]) -> Callable[..., Feedback]:
    """Return ``check`` made gradable: unchanged for a learner; under nbgrader it raises
    CheckFailed unless the check passed, and a passed Feedback prints itself."""

    @functools.wraps(check)
    def run(*args, **kwargs):
        feedback = check(*args, **kwargs)
        if not autograding() or not isinstance(feedback, Feedback):
            return feedback
        if feedback.status != PASSED:
            raise CheckFailed(str(feedback))
        return PrintedFeedback(feedback.exercise, feedback.status, feedback.message)

    run.__wrapped_check__ = check
    return run


def make_checks_gradable(namespace: dict) -> None:
    """Wrap, in place, every ``check_*`` function of ``namespace`` (a module's globals)."""
    for name, value in list(namespace.items()):
        wrapped = hasattr(value, "__wrapped_check__")
        if name.startswith("check_") and callable(value) and not wrapped:
            namespace[name] = graded(value)
