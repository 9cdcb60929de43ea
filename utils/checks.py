"""Checks for the labs: each one names the misconception behind a wrong answer.

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
from torch import nn

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


def _not_attempted(exercise: str) -> Feedback:
    return Feedback(exercise, NOT_ATTEMPTED,
                    "not attempted yet. Replace `raise NotImplementedError()` with your code, "
                    "run that cell, then run this one again.")


def _attempt(exercise: str, function: Callable, *args):
    """Call the learner's function; return (result, None) or (None, Feedback) if it did not run."""
    if not callable(function):
        return None, Feedback(exercise, FAILED,
                              f"expected the function you wrote, got {type(function).__name__}. "
                              "Pass the function itself, without calling it.")
    try:
        return function(*args), None
    except NotImplementedError:
        return None, _not_attempted(exercise)
    except Exception as error:  # the learner's code raised: report it, do not crash the lab
        return None, Feedback(exercise, FAILED,
                              f"your function raised {type(error).__name__}: {error}")


def _device_name(device: torch.device) -> str:
    return "meta (the stand-in second device)" if device.type == "meta" else str(device)


# --- lab 02: the copy pitfall -------------------------------------------------------------


def check_where_is_it_now(predict: Callable[[], str], other: torch.device) -> Feedback:
    """Exercise 02.1: predict ``inputs.device`` after a bare ``inputs.to(other)``.

    ``predict()`` returns a device name. Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 1"
    answer, problem = _attempt(exercise, predict)
    if problem is not None:
        return problem
    try:
        predicted = torch.device(answer)
    except (RuntimeError, TypeError):
        return Feedback(exercise, FAILED, f"{answer!r} is not a device name: try 'cpu' or "
                                          f"{str(other)!r}.")
    if predicted == torch.device("cpu"):
        return Feedback(exercise, PASSED, "right. `inputs.to(other)` made a new tensor and threw "
                                          "it away; `inputs` itself never moves.")
    if predicted.type == other.type:
        return Feedback(exercise, FAILED,
                        "you expected `inputs.to(other)` to move `inputs`. Tensor.to never "
                        "changes the tensor you call it on: it returns a new tensor on the "
                        "device, and that line does not keep it.")
    return Feedback(exercise, FAILED, f"{answer!r}: `inputs` was made on the CPU and nothing "
                                      "reassigned it. Where is it still?")


def check_prepare(prepare: Callable, other: torch.device) -> Feedback:
    """Exercise 02.2: ``prepare(batch, device)`` must return ``batch`` on ``device``.

    Catches: the result of ``.to`` not kept; a dtype changed along the way; a forced
    copy when the batch is already there. Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 2"
    batch = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    result, problem = _attempt(exercise, prepare, batch, other)
    if problem is not None:
        return problem
    if not isinstance(result, torch.Tensor):
        return Feedback(exercise, FAILED, f"prepare returned {type(result).__name__}, not a "
                                          "tensor. Return the batch that is on the device.")
    if result.device.type != other.type:
        if result is batch:
            return Feedback(exercise, FAILED,
                            "prepare returned the very same CPU tensor it was given. You called "
                            "`batch.to(device)` but kept using `batch`: Tensor.to returns a new "
                            "tensor, so write `batch = batch.to(device)` (or return it).")
        return Feedback(exercise, FAILED, f"the result is on {result.device}, not on "
                                          f"{_device_name(other)}.")
    if result.dtype != batch.dtype:
        return Feedback(exercise, FAILED, f"the device is right but the dtype changed from "
                                          f"{batch.dtype} to {result.dtype}. Move it; do not "
                                          "convert it.")
    already_there = batch.to(other)
    again, problem = _attempt(exercise, prepare, already_there, other)
    if problem is not None:
        return problem
    if again is not already_there:
        return Feedback(exercise, FAILED,
                        "when the batch is already on the device, prepare still made a new "
                        "tensor. Did you use copy=True or .clone()? Tensor.to returns the "
                        "tensor itself when nothing changes: no copy needed.")
    return Feedback(exercise, PASSED, "the batch arrives on the device, and a batch that is "
                                      "already there is passed through without a copy.")


#: The expressions of exercise 02.3, and why each is True or False.
IS_QUESTIONS = {
    "t.to('cpu') is t": (True, "nothing changes, so Tensor.to returns `t` itself"),
    "t.to(torch.float64) is t": (False, "the dtype changes, so Tensor.to builds a new tensor"),
    "t.to('cpu', copy=True) is t": (False, "copy=True always builds a new tensor"),
    "t.cpu() is t": (True, "`.cpu()` is `.to('cpu')`: nothing changes, so you get `t` back"),
    "model.to('cpu') is model": (True, "Module.to changes the module in place and returns it"),
    "model.to(torch.float64) is model": (True, "Module.to always returns the module itself"),
}


def check_is_predictions(predict: Callable[[], dict]) -> Feedback:
    """Exercise 02.3: predict True/False for each expression in :data:`IS_QUESTIONS`.

    Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 3"
    answers, problem = _attempt(exercise, predict)
    if problem is not None:
        return problem
    if not isinstance(answers, dict):
        return Feedback(exercise, FAILED, "return a dict: {expression: True or False}.")
    missing = [q for q in IS_QUESTIONS if q not in answers]
    if missing:
        return Feedback(exercise, FAILED, f"no prediction yet for: {', '.join(missing)}.")
    wrong = [q for q, (truth, _) in IS_QUESTIONS.items() if answers[q] is not truth]
    if not wrong:
        return Feedback(exercise, PASSED, "all six right. Tensor.to returns self only when "
                                          "nothing changes; Module.to always returns self.")
    reasons = "; ".join(f"`{q}` is {IS_QUESTIONS[q][0]}: {IS_QUESTIONS[q][1]}" for q in wrong)
    tensor_always_copies = all(answers[q] is False for q in IS_QUESTIONS if q.startswith("t"))
    hint = (" You seem to think Tensor.to always copies: it does not when nothing changes."
            if tensor_always_copies else "")
    return Feedback(exercise, FAILED, f"{len(wrong)} of 6 wrong. {reasons}.{hint}")


def check_model_and_optimizer(build: Callable, other: torch.device) -> Feedback:
    """Exercise 02.4: ``build(device)`` returns ``(model, optimizer)``, ready to train there.

    Passes when every parameter and every piece of optimizer state is on ``device``
    and the optimizer holds the model's own Parameter objects. Catches: the
    optimizer built before the model was moved. Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 4"
    result, problem = _attempt(exercise, build, other)
    if problem is not None:
        return problem
    if not (isinstance(result, tuple) and len(result) == 2):
        return Feedback(exercise, FAILED, "return a pair: (model, optimizer).")
    model, optimizer = result
    if not isinstance(model, nn.Module) or not isinstance(optimizer, torch.optim.Optimizer):
        return Feedback(exercise, FAILED, "return (model, optimizer): an nn.Module and a "
                                          "torch.optim optimizer.")
    on_device = all(p.device.type == other.type for p in model.parameters())
    if not on_device:
        return Feedback(exercise, FAILED, "the model is not on the device. Module.to moves it "
                                          "in place: call model.to(device).")
    held = [p for group in optimizer.param_groups for p in group["params"]]
    if not all(any(h is p for p in model.parameters()) for h in held):
        return Feedback(exercise, FAILED,
                        "the optimizer holds Parameter objects the model no longer uses: you "
                        "built it before moving the model, and this move replaced them. Move "
                        "the model first, then build the optimizer.")
    stale = [t for state in optimizer.state.values() for t in state.values()
             if isinstance(t, torch.Tensor) and t.dim() > 0 and t.device.type != other.type]
    if stale:
        return Feedback(exercise, FAILED,
                        f"the optimizer's state is on {stale[0].device}, the model on "
                        f"{_device_name(other)}: you built the optimizer before moving the "
                        "model, and Module.to never touches the optimizer. Move the model "
                        "first, then build the optimizer.")
    return Feedback(exercise, PASSED, "model on the device, optimizer built after it: its "
                                      "parameters and its state are all where they belong.")
