"""Helpers shared by the tests of labchecks (one test file per lab)."""

from __future__ import annotations

import re

from labchecks.feedback import Feedback


def stub(*args):
    """What a student's unattempted exercise does: nbgrader's stub."""
    raise NotImplementedError()


def assert_feedback(feedback: Feedback, status: str, *phrases: str) -> Feedback:
    """Assert the check's status and that its message contains each phrase; return it."""
    assert feedback.status == status, str(feedback)
    for phrase in phrases:
        assert phrase in feedback.message, f"{phrase!r} not in {feedback.message!r}"
    return feedback


#: A C++ source location in a message (PyTorch's "[enforce fail at alloc_cpu.cpp:127]", gloo's
#: ".../pair.cc:553]"): text for PyTorch's developers, not for a learner.
_CPP_LOCATION = re.compile(r"\.(cpp|cc|cu|h|hpp):\d+")


def assert_one_line(feedback: Feedback) -> Feedback:
    """Assert the message is one line with no terminal escape codes, traceback or C++ source
    location; return it."""
    assert "\n" not in feedback.message and "\x1b" not in feedback.message, feedback.message
    assert "Traceback" not in feedback.message, feedback.message
    assert not _CPP_LOCATION.search(feedback.message), feedback.message
    return feedback
