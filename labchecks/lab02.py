"""Checks for lab 02_copy_pitfall: reassignment, `is`, and optimizer order."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    attempt,
    device_name,
    given,
    moved_and_dropped,
    rebinds,
    recorded_to_calls,
    sets_own_device,
    stop_on,
)
from labchecks.gpu_stand_in import STAND_IN_GPU, gpu_placement_problem
from labchecks.grading import graded
from utils.devices import unusable_device


@graded
def check_where_is_it_now(predict: Callable[[], str], other: torch.device) -> Feedback:
    """Exercise 02.1: predict ``batches[0].device`` after a loop of bare ``batch.to(other)``.

    ``predict()`` returns a device name. Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 1"
    answer = given(attempt(exercise, predict))
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


@graded
def check_prepare(prepare: Callable, other: torch.device) -> Feedback:
    """Exercise 02.2: ``prepare(batch, device)`` must return ``batch`` on ``device``.

    Catches: the result of ``.to`` not kept; the ``device`` argument ignored; a dtype
    changed along the way; a forced copy when the batch is already there; ``.cuda()``; and,
    run as a GPU machine would (:mod:`labchecks.gpu_stand_in`, given cuda:1), a ``.cuda()``
    branch or a device without its index.
    Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 2"
    other = torch.device(other)
    batch = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with recorded_to_calls() as moves:
        result, problem = attempt(exercise, prepare, batch, other)
    if problem is not None:
        if unusable_device(problem.message) is not None:  # .cuda() where there is no CUDA
            return Feedback(exercise, FAILED, f"{problem.message.rstrip('.')}. `.cuda()` names "
                                              "one kind of device; use `.to(device)` so the same "
                                              "code runs everywhere.")
        return problem
    if not isinstance(result, torch.Tensor):
        return Feedback(exercise, FAILED, f"prepare returned {type(result).__name__}, not a "
                                          "tensor. Return the batch that is on the device.")
    if result.device.type != other.type:
        return _prepare_not_there(exercise, prepare, batch, result, other, moves)
    # A batch of class labels (int64) as well as one of features (float32): both are
    # dtypes every device supports (MPS has no float64).
    labels = torch.tensor([2, 0, 1, 1])
    moved = given(attempt(exercise, prepare, labels, other))
    for before, after in ((batch, result), (labels, moved)):
        if not isinstance(after, torch.Tensor) or after.dtype != before.dtype:
            got = after.dtype if isinstance(after, torch.Tensor) else type(after).__name__
            return Feedback(exercise, FAILED,
                            f"the device is right but the dtype changed: a {before.dtype} batch "
                            f"came back as {got}. Passing a dtype to "
                            "`.to` converts the batch: `batch.to(device, torch.float32)` turns "
                            "class labels (int64) into floats. Move it, do not convert it: "
                            "`batch.to(device)` keeps each batch's own dtype.")
    on_cpu = given(attempt(exercise, prepare, batch, torch.device("cpu")))
    if not isinstance(on_cpu, torch.Tensor) or on_cpu.device.type != "cpu":
        if isinstance(on_cpu, torch.Tensor):
            return _prepare_not_there(exercise, prepare, batch, on_cpu, torch.device("cpu"), [])
        return Feedback(exercise, FAILED, "prepare(batch, 'cpu') did not return a CPU tensor: "
                                          "use the `device` argument, not a device fixed in "
                                          "the function.")
    already_there = batch.to(other)
    again = given(attempt(exercise, prepare, already_there, other))
    if again is not already_there or on_cpu is not batch:
        return Feedback(exercise, FAILED,
                        "when the batch is already on the device, prepare still made a new "
                        "tensor. Did you use copy=True, .clone() or zeros_like? Tensor.to returns "
                        "the tensor itself when nothing changes: no copy needed.")
    stop_on(gpu_placement_problem(exercise, prepare, batch, STAND_IN_GPU))
    return Feedback(exercise, PASSED, "the batch arrives on the device, and a batch that is "
                                      "already there is passed through without a copy.")


def _prepare_not_there(exercise: str, prepare: Callable, batch: torch.Tensor,
                       result: torch.Tensor, other: torch.device, moves: list) -> Feedback:
    """Name why prepare's result is not on ``other``: result not kept, argument overridden,
    a device fixed in the function, or no move at all."""
    if rebinds(prepare, "device"):
        return Feedback(exercise, FAILED,
                        f"asked for {device_name(other)}, prepare returned a tensor on "
                        f"{result.device}: {sets_own_device()}. Picking the device is the "
                        "caller's job (once, at the top of the script); inside, use the `device` "
                        "argument as it is.")
    if result is batch and moved_and_dropped(moves, batch, other):
        return Feedback(exercise, FAILED,
                        "prepare returned the very same CPU tensor it was given. You called "
                        "`batch.to(device)` but kept using `batch`: Tensor.to returns a new "
                        "tensor, so write `batch = batch.to(device)` (or return it).")
    if result is batch:
        return Feedback(exercise, FAILED, "prepare returned the batch it was given, unmoved: "
                                          "`batch.to(device)` returns the batch on the device; "
                                          "return that.")
    return Feedback(exercise, FAILED, f"asked for {device_name(other)}, the result is on "
                                      f"{result.device}: use the `device` argument, not a "
                                      "device fixed in the function.")


#: The expressions of exercise 02.3. No answer key ships with the lab: the check runs them.
IS_QUESTIONS = (
    "t.to('cpu') is t",
    "t.to(torch.float64) is t",
    "t.to('cpu', copy=True) is t",
    "t.cpu() is t",
    "model.to('cpu') is model",
    "model.to(torch.float64) is model",
)
#: Why each expression comes out as it does, shown next to a wrong prediction: the rule, as
#: notebook 01 states it. The truth itself is not stored: the check runs the expressions.
_WHY = {
    IS_QUESTIONS[0]: "nothing changes, so Tensor.to returns `t` itself",
    IS_QUESTIONS[1]: "the dtype changes, so Tensor.to builds a new tensor",
    IS_QUESTIONS[2]: "copy=True always builds a new tensor",
    IS_QUESTIONS[3]: "`.cpu()` is `.to('cpu')`: nothing changes, so you get `t` back",
    IS_QUESTIONS[4]: "Module.to changes the module in place and returns it",
    IS_QUESTIONS[5]: "Module.to always returns the module itself",
}

#: Points per exercise under nbgrader (tools/nbgrader_cells.py); the six predictions earn
#: their part each.
POINTS = {"check_where_is_it_now": 1, "check_prepare": 2, "check_is_predictions": 3,
          "check_model_and_optimizer": 2, "check_trainable": 1}


def _run_for_real(question: str) -> bool:
    """``question`` evaluated on a fresh float32 CPU tensor and Linear: the truth."""
    t = torch.ones(3, dtype=torch.float32, device="cpu")
    model = nn.Linear(3, 2, dtype=torch.float32, device="cpu")
    return bool(eval(question, {"torch": torch, "t": t, "model": model}))  # our own six


def _as_bool(value: object) -> object:
    """A NumPy or one-element tensor boolean as the Python bool it holds; anything else as it is."""
    numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_")
    if numpy_bool or (isinstance(value, torch.Tensor)
                                          and value.dtype == torch.bool and value.numel() == 1):
        return bool(value)
    return value


@graded
def check_is_predictions(predict: Callable[[], dict]) -> Feedback:
    """Exercise 02.3: predict True/False for each expression in :data:`IS_QUESTIONS`.

    Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 3"
    answers = given(attempt(exercise, predict))
    if not isinstance(answers, dict):
        return Feedback(exercise, FAILED, "return a dict: {expression: True or False}.")
    missing = [q for q in IS_QUESTIONS if answers.get(q) is None]
    if missing:
        return Feedback(exercise, FAILED, f"no prediction yet for: {', '.join(missing)}.")
    answers = {q: _as_bool(answers[q]) for q in IS_QUESTIONS}
    not_bool = [q for q in IS_QUESTIONS if not isinstance(answers[q], bool)]
    if not_bool:
        return Feedback(exercise, FAILED, f"use True or False (not {answers[not_bool[0]]!r}) "
                                          f"for: {', '.join(not_bool)}.")
    truth = {q: _run_for_real(q) for q in IS_QUESTIONS}
    wrong = [q for q in IS_QUESTIONS if answers[q] is not truth[q]]
    if not wrong:
        return Feedback(exercise, PASSED, "all six right. Tensor.to returns self only when "
                                          "nothing changes; Module.to always returns self.")
    hints = []
    if all(answers[q] is False for q in IS_QUESTIONS if q.startswith("t")):
        hints.append("You seem to think Tensor.to always copies: not when nothing changes.")
    if all(answers[q] is False for q in IS_QUESTIONS if q.startswith("model")):
        hints.append("You seem to think Module.to returns a new model, like Tensor.to: it "
                     "works in place and returns the same module.")
    reasons = "; ".join(f"`{q}` is {truth[q]}: {_WHY[q]}" for q in wrong)
    right = len(IS_QUESTIONS) - len(wrong)
    return Feedback(exercise, FAILED, f"{' '.join(hints)} {len(wrong)} of 6 wrong. {reasons}."
                    .strip(), score=right / len(IS_QUESTIONS))


@graded
def check_model_and_optimizer(build: Callable, other: torch.device) -> Feedback:
    """Exercise 02.4: ``build(device)`` returns ``(model, optimizer)``, ready to train there.

    Passes when every parameter and every piece of optimizer state is on ``device``
    with the parameter's dtype, and the optimizer holds the model's own Parameter
    objects, every one of them (both directions are checked). Catches: the optimizer built
    before the model was moved (state left behind, or Parameters replaced); an optimizer
    over other tensors, or over some of the parameters; a ``.cuda()`` branch or a device
    without its index (run as a GPU machine would, given cuda:1).
    Introduced in lab 02_copy_pitfall.
    """
    exercise = "Exercise 4"
    result = given(attempt(exercise, build, other))
    if not (isinstance(result, (tuple, list)) and len(result) == 2):  # a list is a pair too
        return Feedback(exercise, FAILED, "return a pair: (model, optimizer).")
    model, optimizer = result
    if not isinstance(model, nn.Module) or not isinstance(optimizer, torch.optim.Optimizer):
        return Feedback(exercise, FAILED, "return (model, optimizer): an nn.Module and a "
                                          "torch.optim optimizer.")
    if not all(p.device.type == other.type for p in model.parameters()):
        found = sorted({str(p.device) for p in model.parameters()})
        if rebinds(build, "device"):
            return Feedback(exercise, FAILED,
                            f"asked for {device_name(other)}, the model is on "
                            f"{', '.join(found)}: {sets_own_device()}. Use the `device` "
                            "argument as it is.")
        if any(d != "cpu" for d in found):
            return Feedback(exercise, FAILED, f"asked for {device_name(other)}, the model is on "
                                              f"{', '.join(found)}: use the `device` argument, "
                                              "not a device fixed in the function.")
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
                                f"the weights {parameter.dtype} on {device_name(other)}: "
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
    owned = list(model.parameters())
    left_out = [name for name, p in model.named_parameters() if not any(h is p for h in held)]
    if left_out:
        return Feedback(exercise, FAILED,
                        f"the optimizer holds {len(owned) - len(left_out)} of the model's "
                        f"{len(owned)} parameters: {', '.join(left_out)} would never train "
                        "(the optimizer updates only what it was given). Give it them all: "
                        "torch.optim.Adagrad(model.parameters()).")
    on_cpu = given(attempt(exercise, build, torch.device("cpu")))
    if (isinstance(on_cpu, tuple) and on_cpu and isinstance(on_cpu[0], nn.Module)
            and any(p.device.type != "cpu" for p in on_cpu[0].parameters())):
        found = sorted({str(p.device) for p in on_cpu[0].parameters()})
        fixed = (sets_own_device() if rebinds(build, "device") else
                 "the function uses a device fixed inside it")
        return Feedback(exercise, FAILED, f"asked for cpu, build put the model on "
                                          f"{', '.join(found)}: {fixed}. Use the `device` "
                                          "argument as it is.")
    stop_on(gpu_placement_problem(exercise, build, STAND_IN_GPU))
    return Feedback(exercise, PASSED, "model on the device, optimizer built after it: its "
                                      "parameters and its state are all where they belong.")


def _leaf_behind(tensor: torch.Tensor) -> torch.Tensor | None:
    """The leaf tensor autograd would send ``tensor``'s gradient to (None if none)."""
    pending = [tensor.grad_fn]
    while pending:
        node = pending.pop()
        if node is None:
            continue
        if hasattr(node, "variable"):  # AccumulateGrad: the leaf that gets the .grad
            return node.variable
        pending.extend(function for function, _ in node.next_functions)
    return None


@graded
def check_trainable(make: Callable, other: torch.device) -> Feedback:
    """Exercise 02.5: ``make(values, device)`` returns a weight to train on ``device``.

    Passes when the result is a float32 tensor on ``device`` with the given values that
    requires grad and is a *leaf* (``.grad`` is filled by ``backward()``, an optimizer takes
    it). Catches: made with ``requires_grad=True`` then moved (a non-leaf), an
    ``nn.Parameter`` moved with ``.to`` (a plain Tensor comes back), no ``requires_grad``,
    the result of ``.to`` not kept, no move at all, other values. Introduced in lab
    02_copy_pitfall (notebook 02 section 6).
    """
    exercise = "Exercise 5"
    other = torch.device(other)
    values = [0.5, -1.0, 2.0]
    with recorded_to_calls() as moves:
        result, problem = attempt(exercise, make, list(values), other)
    if problem is not None:
        if unusable_device(problem.message) is not None:  # .cuda() where there is no CUDA
            return Feedback(exercise, FAILED, f"{problem.message.rstrip('.')}. Use "
                                              "`.to(device)` or `device=device`, so the same "
                                              "code runs everywhere.")
        return problem
    if not isinstance(result, torch.Tensor):
        return Feedback(exercise, FAILED, f"make_trainable returned {type(result).__name__}, "
                                          "not a tensor.")
    if result.device.type != other.type:
        if any(call.result.device.type == other.type and call.result is not result
               for call in moves):
            return Feedback(exercise, FAILED,
                            f"you called `.to(device)` but returned the tensor from before "
                            f"it, still on {result.device}: Tensor.to returns a new tensor, "
                            "keep it (`weight = weight.to(device)`).")
        return Feedback(exercise, FAILED, f"asked for {device_name(other)}, the weight is on "
                                          f"{result.device}: create it there "
                                          "(`device=device`) or move it with `.to(device)`.")
    if not result.requires_grad:
        return Feedback(exercise, FAILED, "the weight does not require grad, so backward() "
                                          "never computes its gradient: pass "
                                          "`requires_grad=True` when you create it on the "
                                          "device, or call `.requires_grad_()` after the move.")
    if not result.is_leaf:
        if isinstance(_leaf_behind(result), nn.Parameter):
            return Feedback(exercise, FAILED,
                            "`nn.Parameter(...).to(device)` returns a plain Tensor, not a "
                            "Parameter: the result of an operation, so not a leaf, its .grad "
                            "stays None, and a Module would not register it. Move first, then "
                            "wrap: `nn.Parameter(tensor.to(device))` (only Module.to keeps "
                            "Parameters).")
        return Feedback(exercise, FAILED,
                        "made with requires_grad=True, then moved: `.to` returned the result "
                        "of an operation, not a leaf, so after backward() its .grad stays None "
                        "and an optimizer refuses it ('can't optimize a non-leaf Tensor'). "
                        "Create it on the device with requires_grad=True, or move it first and "
                        "then call `.requires_grad_()`.")
    if result.dtype != torch.float32:
        return Feedback(exercise, FAILED, f"the weight is {result.dtype}, not float32: keep "
                                          "the dtype of `torch.tensor(values)` (a Mac's GPU "
                                          "has no float64).")
    on_cpu = given(attempt(exercise, make, list(values), torch.device("cpu")))
    if not isinstance(on_cpu, torch.Tensor) or on_cpu.shape != (len(values),) or not \
            torch.equal(on_cpu.detach().to("cpu", torch.float32), torch.tensor(values)):
        return Feedback(exercise, FAILED, f"make_trainable({values}, 'cpu') did not return "
                                          "those values: start from `values`, not new numbers.")
    stop_on(gpu_placement_problem(exercise, make, list(values), STAND_IN_GPU))
    return Feedback(exercise, PASSED, "a leaf on the device that requires grad: backward() "
                                      "fills its .grad and an optimizer can train it.")
