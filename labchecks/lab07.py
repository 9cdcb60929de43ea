"""Checks for lab 07_moving_data_fast: fewer copies, fewer waits, and what fits in memory.

Exercise 1 is judged on its value (on the CPU, against :func:`train_slow`) and on what each
extra step costs on the second device (:mod:`labchecks.step_traffic`); exercises 2 and 3
compare with :func:`utils.footprint`. Introduced in lab 07_moving_data_fast.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    attempt_within,
    device_name,
    given,
)
from labchecks.gpu_stand_in import STAND_IN_GPU, misplaced_gpu
from labchecks.grading import graded
from labchecks.step_traffic import HostReads, extra_copies, recorded_run
from utils.footprint import footprint
from utils.text import format_bytes
from utils.traffic import Ledger

#: The class weights of lab 07's loss.
CLASS_WEIGHTS = (1.0, 2.0, 1.0)
_ROWS, _FEATURES, _BATCH = 512, 16, 32


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """Lab 07's dataset, on the CPU: 512 rows of 16 float32 features, labels 0-2.

    Introduced in lab 07_moving_data_fast."""
    generator = torch.Generator().manual_seed(7)
    features = torch.randn(_ROWS, _FEATURES, generator=generator)
    return features, torch.randint(0, 3, (_ROWS,), generator=generator)


def model_and_optimizer(device: str | torch.device = "cpu"):
    """Return ``(model, optimizer)``: lab 07's small classifier on ``device`` and its SGD.

    The same seed every time, so two runs start from the same weights.
    Introduced in lab 07_moving_data_fast."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(_FEATURES, 32), nn.ReLU(), nn.Linear(32, 3)).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def train_slow(model, optimizer, features, labels, device, steps: int) -> float:
    """Lab 07's slow loop: the right result, with needless copies and waits every step.

    Returns the mean loss over ``steps`` steps of ``_BATCH`` rows, in order.
    Introduced in lab 07_moving_data_fast."""
    losses = []
    for step in range(steps):
        all_inputs = features.to(device)  # the whole dataset, every step
        all_labels = labels.to(device)
        rows = slice(step * _BATCH, (step + 1) * _BATCH)
        weights = torch.tensor(CLASS_WEIGHTS).to(device)  # made on the CPU, then moved
        loss = nn.functional.cross_entropy(model(all_inputs[rows]), all_labels[rows],
                                           weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # a wait, every step
    return sum(losses) / len(losses)


@functools.cache
def _slow_result() -> float:
    """What the slow loop returns for 8 steps on the CPU (computed once)."""
    return train_slow(*model_and_optimizer("cpu"), *data(), torch.device("cpu"), 8)


#: How long a check waits for one call of the learner's function (the right answers take
#: well under a second; exercise 3's search, which measures many batches, gets 3 times this).
CALL_LIMIT_S = 10.0


def _within(exercise: str, function: Callable, *args,
            limit_s: float | None = None) -> tuple[object, Feedback | None]:
    """Call the learner's function with a time limit; return (result, problem)."""
    result, problem, _ = attempt_within(
        exercise, function, *args, limit_s=CALL_LIMIT_S if limit_s is None else limit_s,
        hang=": a loop whose condition never turns false? Check where each loop ends")
    return result, problem


@functools.cache
def _slow_losses(weighted: bool) -> tuple[float, ...]:
    """The 8 per-step losses of the slow loop on the CPU, with or without the class weights."""
    model, optimizer = model_and_optimizer("cpu")
    features, labels = data()
    weight = torch.tensor(CLASS_WEIGHTS) if weighted else None
    losses = []
    for step in range(8):
        rows = slice(step * _BATCH, (step + 1) * _BATCH)
        loss = nn.functional.cross_entropy(model(features[rows]), labels[rows], weight=weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return tuple(losses)


def _why_result(value: float) -> str:
    """Why a loop's result differs from the slow loop's, when it matches a known mistake."""
    losses, unweighted = _slow_losses(True), _slow_losses(False)
    known = [(sum(losses), " That is the sum: divide by the number of steps."),
             (sum(unweighted) / 8, " That is the mean without the class weights: pass "
                                   "weight=weights to the loss, as the slow loop does."),
             (losses[-1], " That is the last step's loss alone: return the mean over all "
                          "the steps."),
             (losses[0], " That is the first step's loss alone: return the mean over all "
                         "the steps.")]
    for number, why in known:
        if math.isclose(value, number, rel_tol=1e-5):
            return why
    return (" Keep everything the loop computes: the same batches in the same order, the "
            "class weights in the loss, and the mean over the steps.")


def _traffic(train: Callable, device: torch.device, steps: int, as_a_gpu: bool = False):
    """Run ``train`` for ``steps`` steps on lab 07's model and data, recorded
    (:func:`labchecks.step_traffic.recorded_run`); return (ledger, result, problem)."""
    model, optimizer = model_and_optimizer("meta" if as_a_gpu else device)
    return recorded_run(functools.partial(_within, "Exercise 1"), train, model, optimizer,
                        *data(), STAND_IN_GPU if as_a_gpu else device, steps, as_a_gpu=as_a_gpu)


def _traffic_as_on_a_gpu(train: Callable) -> tuple[Ledger, Ledger] | None:
    """The ledgers of 4 and 8 steps run as a GPU machine would run them (a branch on
    ``torch.cuda.is_available()`` or ``device.type == 'cuda'`` taken), or None when the loop
    needs a real GPU to run (streams, events): the check then judges it on ``other`` alone."""
    short, _, problem = _traffic(train, STAND_IN_GPU, 4, as_a_gpu=True)
    if problem is not None:
        return None
    long, _, problem = _traffic(train, STAND_IN_GPU, 8, as_a_gpu=True)
    return None if problem is not None else (short, long)


def _as_number(result) -> float | None:
    if isinstance(result, torch.Tensor) and result.numel() == 1 and result.device.type == "cpu":
        return float(result)
    result = _plain(result)
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        return float(result)
    return None


def _plain(value: object) -> object:
    """A NumPy number (``np.int64``, ``np.float32``, a 0-d array) as the Python number it
    holds; a one-element CPU tensor as its number; anything else unchanged."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 and value.device.type != "meta" else value
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) in ((), (1,)):
        item = value.item() if hasattr(value, "item") else value
        return item if isinstance(item, (int, float)) and not isinstance(item, bool) else value
    return value


def _explain_raise(problem: Feedback, device: torch.device) -> Feedback:
    text = problem.message
    if "device" in text and ("expected" in text or "same device" in text):
        return Feedback(problem.exercise, FAILED,
                        f"{text}. The check ran your loop with device={device_name(device)} "
                        "and something stayed on the CPU: move features, labels and the class "
                        "weights to the `device` argument (do not pick a device inside the "
                        "function).")
    return problem


@graded
def check_fast_training(train: Callable, other: str | torch.device = "meta") -> Feedback:
    """Exercise 07.1: ``train(model, optimizer, features, labels, device, steps)``.

    Passes when the result, computed on the CPU, equals :func:`train_slow`'s (the mean
    loss, as a Python float) and each extra step makes no copy between devices and no host
    wait on ``other`` (the second device: meta on a CPU-only machine). Names the copy or
    wait still made every step. Introduced in lab 07_moving_data_fast.
    """
    exercise = "Exercise 1"
    other = torch.device(other)
    expected = _slow_result()
    model, optimizer = model_and_optimizer("cpu")
    result, problem = _within(exercise, train, model, optimizer, *data(),
                              torch.device("cpu"), 8)
    if problem is not None:
        return _explain_raise(problem, torch.device("cpu"))
    if isinstance(result, torch.Tensor) and result.numel() == 1 and result.device.type != "cpu":
        return _on_device(exercise)
    value = _as_number(result)
    if value is None:
        return Feedback(exercise, FAILED, f"train returned {type(result).__name__}; return the "
                                          "mean loss as a Python float.")
    if not math.isclose(value, expected, rel_tol=1e-5):
        hint = _why_result(value)
        return Feedback(exercise, FAILED, f"train returned {value:.6f}, but the slow loop "
                                          f"gives {expected:.6f}: the fix changed the result."
                                          f"{hint}")
    short, _, problem = _traffic(train, other, 4)
    if problem is not None:
        return _explain_raise(problem, other)
    long, result, problem = _traffic(train, other, 8)
    if problem is not None:
        return _explain_raise(problem, other)
    if isinstance(result, torch.Tensor) and result.device.type != "cpu":
        return _on_device(exercise)
    verdict = _judge_traffic(short, long, other)
    on_a_gpu = _traffic_as_on_a_gpu(train) if verdict else None
    if on_a_gpu is None:
        return verdict
    short, long = on_a_gpu
    wrong = misplaced_gpu(long.gpu)
    if wrong is not None:
        return Feedback(exercise, FAILED, f"the result is right, but {wrong}.")
    syncs = (long.gpu.syncs - short.gpu.syncs) / 4
    if syncs > 0:
        return Feedback(exercise, FAILED,
                        f"the result is right, but on a GPU machine the loop calls synchronize "
                        f"{syncs:g} time(s) every step (a branch this machine never takes; the "
                        "check ran it as a GPU machine would): each call makes the host wait "
                        "until the GPU has finished everything queued, so the CPU can no longer "
                        "queue the next step ahead. Drop it: `.item()` once, after the loop, "
                        "already waits for the result.")
    as_on_a_gpu = _judge_traffic(short, long, STAND_IN_GPU)  # a per-step copy only a GPU makes
    return verdict if as_on_a_gpu else as_on_a_gpu


def _on_device(exercise: str) -> Feedback:
    return Feedback(exercise, FAILED, "train returned a tensor on the device. Read it once, "
                                      "after the loop: return `total.item() / steps`.")


def _copied_each_step(extra: Counter, steps: int) -> str:
    """What each extra step copies, named by size: 'features, 32.0 KiB; labels, 4.0 KiB'."""
    features, labels = data()
    names = {features.nbytes: "features, all 512 rows", labels.nbytes: "labels, all 512 rows",
             features[:_BATCH].nbytes: "a batch of features",
             labels[:_BATCH].nbytes: "a batch of labels",
             4 * len(CLASS_WEIGHTS): "the class weights"}
    parts = []
    for (size, kind), count in sorted(extra.items(), reverse=True):
        name = {"back": "a result, to the host", "index": "a CPU index tensor"}.get(
            kind, names.get(size, "a tensor"))
        each = count / steps
        parts.append(f"{name}, {format_bytes(size)}" + ("" if each == 1 else f" x{each:g}"))
    total = sum(size * count for (size, _), count in extra.items()) / steps
    if not parts:
        return "nothing"
    return "; ".join(parts) + (f": {format_bytes(total)} a step" if len(parts) > 1 else
                               " a step")


def _judge_traffic(short: Ledger, long: Ledger, other: torch.device) -> Feedback:
    exercise = "Exercise 1"
    steps = 4
    extra_waits = (len(long.waits) - len(short.waits)) / steps
    extra = extra_copies(short, long)
    if not extra and extra_waits == 0:  # moving only the rows it needs, once, is fine
        return Feedback(exercise, PASSED,
                        f"same result, and each step now makes 0 copies and waits 0 times on "
                        f"{device_name(other)}; what is left happens once, around the loop: "
                        f"{format_bytes(short.bytes_moved)} moved, {len(short.waits)} waits.")
    features, labels = data()
    dataset = features.nbytes + labels.nbytes
    batch = (features.nbytes + labels.nbytes) * _BATCH // _ROWS
    weights = 4 * len(CLASS_WEIGHTS)
    moved = sum(size * n for (size, kind), n in extra.items() if kind == "to") / steps
    seen = _copied_each_step(extra, steps)
    problems = []
    if moved >= dataset:
        problems.append(f"it still copies the whole dataset every step ({seen}): move "
                        "`features` and `labels` to the device once, before the loop, and "
                        "slice batches there")
    elif moved >= batch:
        problems.append(f"it copies each batch every step ({seen}). That "
                        "is the right pattern for data that does not fit on the device; this "
                        f"dataset is {format_bytes(dataset)}, so move it once, before the loop")
    factories = sorted({kind for (size, kind) in extra if size == weights
                        and kind in ("tensor", "as_tensor", "asarray", "new_tensor")})
    if factories:
        made = " and ".join(f"`torch.{k}(..., device=device)`" if k != "new_tensor"
                            else "`new_tensor(...)`" for k in factories)
        problems.append(f"it builds the class weights with {made} every step, which fills "
                        f"a CPU tensor and then copies it ({format_bytes(weights)} a step): "
                        "build them once, before the loop")
    elif any(size == weights and kind == "to" for size, kind in extra):
        problems.append("it makes the class weights on the CPU every step and copies them "
                        f"with `.to(device)` ({format_bytes(weights)} a step): make them once, "
                        "before the loop, with device=device")
    if any(kind == "index" for _, kind in extra):
        problems.append("it indexes device tensors with a CPU tensor every step, which PyTorch "
                        "copies to the device for you: make the index with device=device, or "
                        "slice with a range (`features[start:start + 32]`)")
    if any(kind == "back" for _, kind in extra):
        problems.append("it copies a result back to the host every step (`.cpu()`, "
                        "`.to('cpu')`), and the host waits for it: keep the running total on "
                        "the device and read it once, after the loop")
    reads = long.reads - short.reads
    item_waits = sum(1 for w in long.waits if w.why.startswith(".item()")) - sum(
        1 for w in short.waits if w.why.startswith(".item()"))
    if item_waits > 0 and not any(kind == "back" for _, kind in extra):
        how = " and ".join(HostReads.NAMES[name] for name in reads) or "`.item()`, `float(loss)`"
        problems.append(f"it reads a value on the host every step ({how}): the host waits "
                        "for the device each time. Sum on the device, "
                        "`total += loss.detach()`, and call `.item()` once, after the loop")
    other_waits = extra_waits - item_waits / steps
    if other_waits > 0 and not problems:
        reasons = sorted({w.why for w in long.waits} - {w.why for w in short.waits}
                         or {w.why for w in long.waits})
        problems.append(f"the host still waits every step: {'; '.join(reasons)}")
    if not problems:
        problems.append(f"each step still copies {seen} and waits {extra_waits:g} times")
    return Feedback(exercise, FAILED, "the result is right, but " + "; and ".join(problems) + ".")


# --------------------------------------------------------------------------- exercise 2


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 50, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def _frozen() -> nn.Module:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    model[0].requires_grad_(False)  # a frozen first layer: no gradient, no Adam state
    return model


def exercise2_models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """The models the footprint check tries, each with an input: plain float32, with a
    buffer, bfloat16, tied weights, a frozen layer. Introduced in lab 07_moving_data_fast."""
    torch.manual_seed(0)
    return {
        "a float32 MLP": (nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)),
                          torch.randn(2, 16)),
        "a model with BatchNorm buffers": (nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32)),
                                           torch.randn(2, 16)),
        "a bfloat16 model": (nn.Linear(16, 8).to(torch.bfloat16),
                             torch.randn(2, 16, dtype=torch.bfloat16)),
        "a model with tied weights": (_Tied(), torch.tensor([[1, 2, 3]])),
        "a model with a frozen layer": (_frozen(), torch.randn(2, 16)),
    }


def _adam_bytes(model: nn.Module, inputs: torch.Tensor) -> int:
    result = footprint(model, inputs)
    return result.parameters + result.gradients + result.optimizer_state


@graded
def check_adam_bytes(adam_bytes: Callable) -> Feedback:
    """Exercise 07.2: ``adam_bytes(model)`` predicts the bytes of parameters, gradients and
    Adam's state, checked against :func:`utils.footprint` on five kinds of model.

    Introduced in lab 07_moving_data_fast.
    """
    exercise = "Exercise 2"
    for name, (model, inputs) in exercise2_models().items():
        predicted = given(_within(exercise, adam_bytes, model))
        predicted = _plain(predicted)
        if not isinstance(predicted, (int, float)) or isinstance(predicted, bool):
            return Feedback(exercise, FAILED, f"adam_bytes returned {type(predicted).__name__};"
                                              " return a number of bytes.")
        truth = _adam_bytes(model, inputs)
        if predicted == truth:
            continue
        return Feedback(exercise, FAILED, f"for {name} you predicted {predicted:,} bytes, "
                                          f"utils.footprint counts {truth:,}. "
                                          f"{_why_adam(model, predicted, truth)}")
    return Feedback(exercise, PASSED, "right for every model: 4 copies of each trainable "
                                      "parameter (weight, gradient, Adam's two averages), in the "
                                      "parameter's own dtype, each shared weight once.")


def _why_adam(model: nn.Module, predicted: float, truth: int) -> str:
    parameters = list(model.parameters())
    weights = sum(p.numel() * p.element_size() for p in parameters)
    numbers = sum(p.numel() for p in parameters)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    every = sum(p.numel() * p.element_size()
                for _, p in model.named_parameters(remove_duplicate=False))
    frozen = sum(p.numel() * p.element_size() for p in parameters if not p.requires_grad)
    trainable_numbers = sum(p.numel() for p in parameters if p.requires_grad)
    known = [
        (weights, "That is a quarter of it: the weights alone in bytes (or all four copies "
                  "counted in numbers, not bytes). Training keeps, per parameter, the weight, "
                  "its gradient and Adam's two running averages (exp_avg, exp_avg_sq), each "
                  "p.numel() * p.element_size() bytes."),
        (2 * weights, "Weights and gradients, yes; Adam also keeps two running averages per "
                      "parameter (exp_avg and exp_avg_sq)."),
        (3 * weights, "That is three copies of each parameter; training keeps four: the weight, "
                      "its gradient and Adam's *two* running averages (exp_avg and "
                      "exp_avg_sq)."),
        (4 * weights, "A parameter with requires_grad=False gets no gradient, and Adam keeps no "
                      "state for it: the frozen layer counts once, the others four times."),
        (4 * (weights + buffers), "You counted the buffers (BatchNorm's running statistics) as "
                                  "if they trained; they have no gradient and no optimizer "
                                  "state. Use model.parameters()."),
        (truth + buffers, "Buffers (BatchNorm's running statistics) are not parameters, and this "
                          "count is of parameters, gradients and Adam's state only."),
        (4 * every, "You counted a shared weight twice: the embedding and the output layer share "
                    "one tensor, and model.parameters() lists it once."),
        (16 * numbers, "You assumed 4 bytes per number; a bfloat16 number takes 2. Use "
                       "p.element_size()."),
        (truth - frozen, "The frozen layer's weights still take memory: count them once "
                         "(they get no gradient and no Adam state, but they are there)."),
        (weights + 12 * trainable_numbers, "Adam keeps its state in the parameter's own dtype "
                                           "(bfloat16 here), not in float32: use "
                                           "p.element_size() for the gradient and both "
                                           "averages too."),
    ]
    for value, why in known:
        if value != truth and math.isclose(predicted, value):
            return why
    if any(math.isclose(predicted, truth / unit) for unit in (2**20, 1e6, 2**30, 1e9)):
        return "That is the right amount in MB or GB; return bytes."
    return ("For each p in model.parameters(): p.numel() * p.element_size() bytes for the "
            "weight, and three times that again if p.requires_grad (gradient, exp_avg, "
            "exp_avg_sq).")


# --------------------------------------------------------------------------- exercise 3


def exercise3_model() -> nn.Module:
    """The model of exercise 3: 64 features in, two hidden layers of 256, 10 classes.

    Introduced in lab 07_moving_data_fast."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))


def _total(model: nn.Module, rows: int, features: int) -> int:
    """The footprint total for ``rows`` rows; the batch is made on meta (shape only), so a
    learner's answer of a billion rows costs no memory to judge."""
    if features == 64 and _is_exercise3_model(model):
        return _exercise3_total(rows)
    return footprint(model, torch.empty(rows, features, device="meta")).total


def _is_exercise3_model(model: nn.Module) -> bool:
    shapes = [tuple(p.shape) for p in model.parameters()]
    return shapes == [tuple(p.shape) for p in _exercise3_reference().parameters()]


@functools.cache
def _exercise3_reference() -> nn.Module:
    return exercise3_model()


@functools.cache
def _exercise3_total(rows: int) -> int:
    """The footprint total of the exercise 3 model for ``rows`` rows (computed once each)."""
    return footprint(_exercise3_reference(), torch.empty(rows, 64, device="meta")).total


def largest_batch_reference(model: nn.Module, features: int, budget: float) -> int:
    """The largest batch whose training step (Adam) fits ``budget`` bytes; 0 if none."""
    return _largest_fitting(lambda rows: _total(model, rows, features), budget)


def _largest_fitting(total: Callable[[int], int], budget: float,
                     most: float = float("inf")) -> int:
    """The largest number of rows whose ``total(rows)`` fits ``budget``, 0 if none: doubling
    while it fits (and is under ``most``), then bisecting."""
    if total(1) > budget:
        return 0
    low, high = 1, 2
    while total(high) <= budget and high < most:
        low, high = high, high * 2
    while high - low > 1:  # low fits, high does not
        middle = (low + high) // 2
        low, high = (middle, high) if total(middle) <= budget else (low, middle)
    return low


def exercise3_budgets(model: nn.Module, features: int = 64) -> dict[str, float]:
    """The budgets exercise 3 is checked on: one in between, one that a batch fills
    exactly, one too small for a single row. Introduced in lab 07_moving_data_fast."""
    exact = float(_total(model, 100, features))
    return {"a budget of 1.9 MiB": 1.9 * 2**20, "a budget that 100 rows fill exactly": exact,
            "a budget too small for one row": float(_total(model, 1, features) - 1)}


@graded
def check_largest_batch(largest_batch: Callable) -> Feedback:
    """Exercise 07.3: ``largest_batch(model, features, budget_bytes)`` returns the largest
    batch size whose training step fits the budget (0 if none), as utils.footprint counts.

    Introduced in lab 07_moving_data_fast.
    """
    exercise = "Exercise 3"
    model = exercise3_model()
    for name, budget in exercise3_budgets(model).items():
        answer, problem = _within(exercise, largest_batch, model, 64, budget,
                                  limit_s=3 * CALL_LIMIT_S)
        if problem is not None:
            return _out_of_memory(problem)
        if not isinstance(answer, torch.Tensor) or not answer.is_floating_point():
            answer = _plain(answer)
        truth = largest_batch_reference(model, 64, budget)
        if isinstance(answer, bool) or not isinstance(answer, int):
            return Feedback(exercise, FAILED, f"largest_batch returned {answer!r}; return a "
                                              "whole number of rows.")
        if answer == truth:
            continue
        why = _why_batch(model, answer, truth, budget)
        return Feedback(exercise, FAILED, f"for {name} you answered {answer}, the right answer "
                                          f"is {truth}. {why}")
    return Feedback(exercise, PASSED, "right for every budget, including the one a batch fills "
                                      "exactly and the one where not even one row fits.")


#: Footprints of other steps than the exercise's (Adam training), and what counting them means.
_OTHER_STEPS = (
    ({"optimizer": None},
     "That is the largest batch for a step that keeps no optimizer state (optimizer=None, or "
     "plain SGD, which keeps none); the exercise's step uses Adam, utils.footprint's default, "
     "whose two running averages per parameter count too: leave optimizer= out."),
    ({"training": False, "optimizer": None},
     "That is the largest batch for inference (training=False: no gradients, nothing saved "
     "for backward); the exercise asks for a training step with Adam."),
)


@functools.cache
def _largest_with(budget: float, options: tuple) -> int:
    """The largest batch of the exercise's model whose step, as ``footprint(..., **options)``
    counts it, fits ``budget`` (searched once per budget)."""
    return _largest_fitting(lambda rows: footprint(
        _exercise3_reference(), torch.empty(rows, 64, device="meta"), **dict(options)).total,
        budget, most=2**20)


def _out_of_memory(problem: Feedback) -> Feedback:
    """A failed allocation explained in one line, without PyTorch's C++ location."""
    import re

    found = re.search(r"tried to allocate (\d+) bytes", problem.message)
    if "can't allocate memory" not in problem.message and not found:
        return problem
    asked = f" ({format_bytes(int(found.group(1)))})" if found else ""
    return Feedback(problem.exercise, FAILED,
                    f"your function asked this machine for more memory than it has{asked}: it "
                    "built a real batch to measure. utils.footprint needs only the shape: "
                    "torch.empty(rows, features, device='meta') costs no memory.")


def _why_batch(model: nn.Module, answer: int, truth: int, budget: float) -> str:
    if truth == 0:
        return ("Not even one row fits this budget: the weights, gradients and Adam's state "
                "alone are over it. Return 0.")
    if answer == 0:
        return (f"By your count not even one row fits, but a batch of {truth} needs "
                f"{_total(model, truth, 64):,} bytes, which fits: compare the footprint's "
                ".total, in bytes, with the budget, in bytes too.")
    if answer == truth + 1:
        return (f"A batch of {answer} needs {_total(model, answer, 64):,} bytes, over the "
                "budget: you returned the first batch that does not fit. Return the one before.")
    if answer == truth - 1 and _total(model, truth, 64) == budget:
        return ("A batch that fills the budget exactly fits: compare with <=, not <.")
    if answer > truth and (answer == _total(model, truth, 64)
                           or abs(answer - budget) < budget / 10):
        return ("That is a number of bytes, about the budget itself (a footprint's .total): "
                "return the number of rows, the batch size.")
    if answer > truth:
        for options, why in _OTHER_STEPS:
            if answer == _largest_with(budget, tuple(options.items())):
                return why
        fixed = footprint(model, torch.zeros(1, 64))
        weights_only = fixed.parameters + fixed.gradients + fixed.optimizer_state
        if budget >= weights_only and answer >= 10 * truth:  # far over: per-row costs left out
            return ("The activations and the batch itself grow with every row: count the whole "
                    "footprint (its .total), not only the weights, gradients and optimizer state.")
        return f"A batch of {answer} needs {_total(model, answer, 64):,} bytes: over the budget."
    return (f"A batch of {truth} needs {_total(model, truth, 64):,} bytes, which fits: search "
            "further (double the batch until it no longer fits, then bisect).")
