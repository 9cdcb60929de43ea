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
    """Exercise 02.1: predict ``batches[0].device`` after a loop of bare ``batch.to(other)``.

    ``predict()`` returns a device name. Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 1"
    answer, problem = _attempt(exercise, predict)
    if problem is not None:
        return problem
    try:
        predicted = torch.device(str(answer).strip().lower())
    except RuntimeError:
        return Feedback(exercise, FAILED, f"{answer!r} is not a device name: try 'cpu' or "
                                          f"{str(other)!r}.")
    if predicted.type == "cpu":
        return Feedback(exercise, PASSED, "right. Each `batch.to(other)` made a new tensor and "
                                          "threw it away; the tensors in the list never move.")
    return Feedback(exercise, FAILED,
                    f"you expected `batch.to(other)` to move the batch to {predicted}. Tensor.to "
                    "never changes the tensor you call it on: it returns a new tensor, and that "
                    "line does not keep it. (Rebinding the loop variable would not help either: "
                    "write `batches = [b.to(other) for b in batches]`.)")


def check_prepare(prepare: Callable, other: torch.device) -> Feedback:
    """Exercise 02.2: ``prepare(batch, device)`` must return ``batch`` on ``device``.

    Catches: the result of ``.to`` not kept; the ``device`` argument ignored; a dtype
    changed along the way; a forced copy when the batch is already there; ``.cuda()``.
    Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 2"
    batch = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    result, problem = _attempt(exercise, prepare, batch, other)
    if problem is not None:
        if "not compiled with CUDA" in problem.message or "cuda" in problem.message.lower():
            return Feedback(exercise, FAILED, f"{problem.message}. `.cuda()` names one kind of "
                                              "device; use `.to(device)` so the same code runs "
                                              "everywhere.")
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
    on_cpu, problem = _attempt(exercise, prepare, batch, torch.device("cpu"))
    if problem is not None:
        return problem
    if not isinstance(on_cpu, torch.Tensor) or on_cpu.device.type != "cpu":
        return Feedback(exercise, FAILED, "prepare(batch, 'cpu') did not return a CPU tensor: "
                                          "use the `device` argument, not a device fixed in "
                                          "the function.")
    already_there = batch.to(other)
    again, problem = _attempt(exercise, prepare, already_there, other)
    if problem is not None:
        return problem
    if again is not already_there or on_cpu is not batch:
        return Feedback(exercise, FAILED,
                        "when the batch is already on the device, prepare still made a new "
                        "tensor. Did you use copy=True, .clone() or zeros_like? Tensor.to returns "
                        "the tensor itself when nothing changes: no copy needed.")
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
    missing = [q for q in IS_QUESTIONS if answers.get(q) is None]
    if missing:
        return Feedback(exercise, FAILED, f"no prediction yet for: {', '.join(missing)}.")
    not_bool = [q for q in IS_QUESTIONS if not isinstance(answers[q], bool)]
    if not_bool:
        return Feedback(exercise, FAILED, f"use True or False (not {answers[not_bool[0]]!r}) "
                                          f"for: {', '.join(not_bool)}.")
    wrong = [q for q, (truth, _) in IS_QUESTIONS.items() if answers[q] is not truth]
    if not wrong:
        return Feedback(exercise, PASSED, "all six right. Tensor.to returns self only when "
                                          "nothing changes; Module.to always returns self.")
    reasons = "; ".join(f"`{q}` is {IS_QUESTIONS[q][0]}: {IS_QUESTIONS[q][1]}" for q in wrong)
    hints = []
    if all(answers[q] is False for q in IS_QUESTIONS if q.startswith("t")):
        hints.append("You seem to think Tensor.to always copies: not when nothing changes.")
    if all(answers[q] is False for q in IS_QUESTIONS if q.startswith("model")):
        hints.append("You seem to think Module.to returns a new model, like Tensor.to: it "
                     "works in place and returns the same module.")
    return Feedback(exercise, FAILED, f"{len(wrong)} of 6 wrong. {reasons}. {' '.join(hints)}"
                    .rstrip())


def check_model_and_optimizer(build: Callable, other: torch.device) -> Feedback:
    """Exercise 02.4: ``build(device)`` returns ``(model, optimizer)``, ready to train there.

    Passes when every parameter and every piece of optimizer state is on ``device``
    with the parameter's dtype, and the optimizer holds the model's own Parameter
    objects. Catches: the optimizer built before the model was moved (state left
    behind, or Parameters replaced); an optimizer over other tensors.
    Introduced in lab 02_copy_pitfall.
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
    if not all(p.device.type == other.type for p in model.parameters()):
        return Feedback(exercise, FAILED, "the model is not on the device. Module.to moves it "
                                          "in place: call model.to(device).")
    built_before = ("you built the optimizer before moving the model, and Module.to never "
                    "touches the optimizer. Move the model first, then build the optimizer.")
    held = [p for group in optimizer.param_groups for p in group["params"]]
    for parameter, state in optimizer.state.items():
        for tensor in state.values():
            if isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and (
                tensor.device.type != other.type or tensor.dtype != parameter.dtype
            ):
                return Feedback(exercise, FAILED,
                                f"the optimizer's state is {tensor.dtype} on {tensor.device}, "
                                f"the weights {parameter.dtype} on {_device_name(other)}: "
                                f"{built_before}")
    if not all(any(h is p for p in model.parameters()) for h in held):
        if len(held) == len(list(model.parameters())) and all(
            h.shape == p.shape for h, p in zip(held, model.parameters(), strict=False)
        ):
            return Feedback(exercise, FAILED, "the optimizer holds Parameter objects the model no "
                                              "longer uses: moving to this device replaced them. "
                                              + built_before)
        return Feedback(exercise, FAILED, "the optimizer does not hold model.parameters(): build "
                                          "it with torch.optim.Adagrad(model.parameters()).")
    return Feedback(exercise, PASSED, "model on the device, optimizer built after it: its "
                                      "parameters and its state are all where they belong.")


# --- lab 06: resume anywhere ---------------------------------------------------------------


def tiny_training(device: str | torch.device, seed: int = 0):
    """Return ``(model, optimizer, scheduler)``: a small model with dropout, SGD with
    momentum and a StepLR schedule, everything that a resume must restore.

    Introduced in lab 06_training_checkpoints.
    """
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 1))
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def _lab06_data(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)  # the data never depends on the global RNG
    inputs = torch.randn(64, 4, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=generator)
    return inputs.to(device), targets.to(device)


def train_epoch(model: nn.Module, optimizer, scheduler) -> float:
    """Train one epoch (shuffled mini-batches, dropout on); return the mean loss.

    Uses the global RNG for shuffling and dropout, so an exact resume must restore it.
    Introduced in lab 06_training_checkpoints.
    """
    device = next(model.parameters()).device
    inputs, targets = _lab06_data(device)
    model.train()
    order = torch.randperm(len(inputs))
    losses = []
    for batch in order.split(16):
        loss = nn.functional.mse_loss(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    return sum(losses) / len(losses)


def _same(a: float, b: float, device: torch.device) -> bool:
    return a == b if device.type == "cpu" else abs(a - b) <= 1e-5 * max(1.0, abs(a))


def check_resume(save_checkpoint: Callable, load_checkpoint: Callable,
                 device: str | torch.device, folder: str = "checkpoints") -> Feedback:
    """Exercises 06.2/06.3: train 4 epochs straight, and 2 + save + load + 2; compare.

    Passes when the resumed losses equal the uninterrupted ones (exactly on the CPU).
    On failure it says which piece the checkpoint did not restore: model, optimizer
    state, scheduler, RNG state or the epoch. Introduced in lab 06_training_checkpoints.
    """
    import os

    exercise = "Exercises 2 and 3"
    device = torch.device(device)
    total, stop = 4, 2
    training = tiny_training(device)
    reference = [train_epoch(*training) for _ in range(total)]

    training = tiny_training(device)
    for _ in range(stop):
        train_epoch(*training)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "lab06_resume_check.pt")
    rng_at_save = torch.get_rng_state()
    saved_model = {k: v.clone() for k, v in training[0].state_dict().items()}
    saved_lr = training[1].param_groups[0]["lr"]
    _, problem = _attempt(exercise, save_checkpoint, path, *training, stop)
    if problem is not None:
        return problem

    resumed = tiny_training(device, seed=99)  # a new process would start from other numbers
    torch.manual_seed(99)
    start, problem = _attempt(exercise, load_checkpoint, path, *resumed, device)
    if problem is not None:
        return problem
    model, optimizer, scheduler = resumed
    if start != stop:
        return Feedback(exercise, FAILED, f"load_checkpoint returned {start!r}; training stopped "
                                          f"after epoch {stop}, so it should return {stop}. "
                                          "Save the epoch in the checkpoint and return it.")
    if any(not torch.equal(saved_model[k], v) for k, v in model.state_dict().items()):
        return Feedback(exercise, FAILED, "the model's weights after loading differ from the "
                                          "saved ones: save model.state_dict() and restore it "
                                          "with model.load_state_dict().")
    if not optimizer.state:
        return Feedback(exercise, FAILED,
                        "the optimizer starts empty after loading: its momentum buffers restart "
                        "from zero, so the resumed run drifts. Save optimizer.state_dict() and "
                        "restore it with optimizer.load_state_dict() (after building the "
                        "optimizer on the moved model).")
    if optimizer.param_groups[0]["lr"] != saved_lr or scheduler.last_epoch != stop:
        return Feedback(exercise, FAILED,
                        "the learning-rate schedule restarted: the scheduler is back at epoch "
                        f"{scheduler.last_epoch}. Save scheduler.state_dict() and restore it.")
    if not torch.equal(torch.get_rng_state(), rng_at_save):
        return Feedback(exercise, FAILED,
                        "the random number generator was not restored, so shuffling and dropout "
                        "differ after the resume. Save torch.get_rng_state() (and the CUDA "
                        "states on a GPU) and restore them with torch.set_rng_state().")
    resumed_losses = [train_epoch(*resumed) for _ in range(stop, total)]
    if not all(_same(a, b, device) for a, b in zip(resumed_losses, reference[stop:], strict=True)):
        return Feedback(exercise, FAILED, f"the resumed losses {resumed_losses} differ from the "
                                          f"uninterrupted {reference[stop:]}.")
    return Feedback(exercise, PASSED, f"the resumed run repeats the uninterrupted one exactly: "
                                      f"losses {[round(x, 4) for x in reference[stop:]]}.")


def check_atomic_save(atomic_save: Callable, folder: str = "checkpoints") -> Feedback:
    """Exercise 06.1: ``atomic_save(obj, path)`` never leaves a broken file under ``path``.

    Saves version 1; then saves version 2 while ``torch.save`` fails half-way (as a
    full disk or a killed process would) and checks that version 1 still loads; then
    saves version 3 normally and checks that it arrived. Introduced in lab
    06_training_checkpoints.
    """
    import io
    import os
    from unittest import mock

    exercise = "Exercise 1"
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "lab06_atomic_check.pt")
    if os.path.exists(path):
        os.remove(path)
    _, problem = _attempt(exercise, atomic_save, {"version": 1}, path)
    if problem is not None:
        return problem
    if not os.path.exists(path):
        return Feedback(exercise, FAILED, f"atomic_save did not create {path!r}.")
    real_save = torch.save
    before = set(os.listdir(folder))

    def crash_half_way(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        half = buffer.getvalue()[: len(buffer.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as handle:
                handle.write(half)
        else:
            f.write(half)
        raise OSError("simulated crash in the middle of torch.save")

    with mock.patch("torch.save", crash_half_way):
        try:
            atomic_save({"version": 2}, path)
        except OSError:
            pass  # expected: the crash reaches the caller
        except Exception as error:
            return Feedback(exercise, FAILED, f"atomic_save raised {type(error).__name__}: {error}")
    try:
        survived = torch.load(path, weights_only=True)
    except Exception as error:
        return Feedback(exercise, FAILED,
                        f"after a crash mid-save the file no longer loads ({type(error).__name__})."
                        " You wrote straight over the old checkpoint: write to a temporary file "
                        "in the same folder, then os.replace() it onto the final name.")
    leftovers = set(os.listdir(folder)) - before
    for name in leftovers:
        os.remove(os.path.join(folder, name))
    if survived != {"version": 1}:
        return Feedback(exercise, FAILED, f"after the crash the file holds {survived!r}, "
                                          "expected the old {'version': 1}.")
    atomic_save({"version": 3}, path)
    if torch.load(path, weights_only=True) != {"version": 3}:
        return Feedback(exercise, FAILED, "after a successful save the file still holds the old "
                                          "checkpoint: did you forget os.replace()?")
    note = (f" Tidy up on failure too: the crash left {len(leftovers)} temporary file(s) behind."
            if leftovers else "")
    return Feedback(exercise, PASSED, "a crash mid-save leaves the old checkpoint intact, and a "
                                      f"good save replaces it.{note}")
