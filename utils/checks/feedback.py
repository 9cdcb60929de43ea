"""What every lab check shares: the Feedback it returns and how it runs the learner's code.

A check takes the learner's function (or value), runs it on small real inputs, and
returns a :class:`Feedback`, which a notebook displays as one short paragraph:

- ``passed``: a short confirmation of the rule the learner just applied;
- ``failed``: what happened, the misconception that explains it, and what to do;
- ``not attempted``: the exercise still raises ``NotImplementedError``.

Introduced in lab 02_copy_pitfall.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
_SYMBOLS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳"}


@dataclass(frozen=True)
class Feedback:
    """The outcome of one check: ``status`` (passed, failed, not attempted) and ``message``.

    Displays as one line in a notebook; ``bool(feedback)`` is True only when passed.
    Introduced in lab 02_copy_pitfall.
    """

    exercise: str
    status: str
    message: str

    def __str__(self) -> str:
        return f"{_SYMBOLS[self.status]} {self.exercise}: {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.status == PASSED


def not_attempted(exercise: str) -> Feedback:
    """The Feedback for an exercise whose code still raises NotImplementedError."""
    return Feedback(exercise, NOT_ATTEMPTED,
                    "not attempted yet. Replace `raise NotImplementedError()` with your code, "
                    "run that cell, then run this one again.")


def is_stub(error: BaseException) -> bool:
    """True for the stub's bare ``NotImplementedError()``.

    PyTorch raises NotImplementedError too, with a message (meta's "Cannot copy out
    of meta tensor"); that is a real error in the learner's code, not an exercise left
    undone.
    """
    return type(error) is NotImplementedError and not str(error)


def not_a_function(exercise: str, function: object) -> Feedback | None:
    """A failed Feedback when ``function`` is not the learner's function, else None."""
    if callable(function) and not isinstance(function, torch.nn.Module):
        return None
    return Feedback(exercise, FAILED,
                    f"expected the function you wrote, got {type(function).__name__}. "
                    "Pass the function itself, without calling it.")


def attempt(exercise: str, function: Callable, *args):
    """Call the learner's function; return (result, None) or (None, Feedback) if it did not run."""
    problem = not_a_function(exercise, function)
    if problem is not None:
        return None, problem
    try:
        return function(*args), None
    except Exception as error:  # the learner's code raised: report it, do not crash the lab
        if is_stub(error):
            return None, not_attempted(exercise)
        return None, Feedback(exercise, FAILED,
                              f"your function raised {type(error).__name__}: {error}")


def device_name(device: torch.device) -> str:
    """How feedback names a device: meta is called out as the stand-in second device."""
    return "meta (the stand-in second device)" if device.type == "meta" else str(device)
