"""labchecks.feedback: the one runner every check uses, and the stub it tells apart from
PyTorch's own NotImplementedError."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import stub
from torch import nn

from labchecks import feedback, lab04, lab05


def copies_off_meta(*args):
    """A real error with the stub's type: meta has no data to copy."""
    return torch.empty(2, device="meta").cpu()


def test_call_returns_the_result_or_the_error():
    assert feedback.call(lambda a, b: a + b, 2, 3) == (5, None)
    result, error = feedback.call(lambda: 1 / 0)
    assert result is None and isinstance(error, ZeroDivisionError)


def test_call_raises_not_attempted_for_the_stub_only():
    with pytest.raises(feedback.NotAttempted):
        feedback.call(stub, 1)
    result, error = feedback.call(copies_off_meta)
    assert result is None and isinstance(error, NotImplementedError)
    assert "Cannot copy out of meta tensor" in str(error)


def test_attempt_turns_each_outcome_into_feedback():
    assert feedback.attempt("Exercise 1", lambda: 7) == (7, None)
    _status(feedback.attempt("Exercise 1", stub)[1], feedback.NOT_ATTEMPTED)
    _status(feedback.attempt("Exercise 1", copies_off_meta)[1], feedback.FAILED,
            "Cannot copy out of meta tensor")
    _status(feedback.attempt("Exercise 1", nn.Linear(2, 2))[1], feedback.FAILED,
            "expected the function you wrote, got Linear")


@pytest.mark.parametrize("check", [
    lambda f, tmp: lab05.check_gpu_checkpoint(f, "cpu", tmp),
    lambda f, tmp: lab05.check_ddp_checkpoint(f, tmp),
    lambda f, tmp: lab05.check_whole_model(f, tmp),
    lambda f, tmp: lab04.check_train_step(f, "cpu", "meta"),
], ids=["lab05.1", "lab05.2", "lab05.4", "lab04.3"])
def test_meta_not_implemented_is_a_failure_and_a_non_function_is_named(check, tmp_path):
    _status(check(stub, tmp_path), feedback.NOT_ATTEMPTED)
    _status(check(copies_off_meta, tmp_path), feedback.FAILED, "Cannot copy out of meta tensor")
    _status(check(3, tmp_path), feedback.FAILED, "expected the function you wrote, got int")
