"""Checks for lab 04_cross_device_errors: make a small training script device-agnostic.

Each check runs the learner's code on the second device, then the CPU (meta and cpu on a
CPU-only machine), audits what it built with :func:`utils.audit` and names the device bug still
there. Meta stands in for a GPU only where it raises the same error for real (``nn.Linear``,
``add``, ``mul``, ``cross_entropy``, ``.numpy()``), never for ``cpu @ meta`` or convolutions,
which meta lets through. Introduced in lab 04_cross_device_errors.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    call,
    device_name,
    explain,
    first_line,
    not_a_function,
    reads_outer_name,
    rebinds,
    seeded,
    sets_own_device,
    stop_on,
)
from labchecks.gpu_stand_in import STAND_IN_GPU, gpu_placement_problem
from labchecks.grading import graded
from utils.devices import unusable_device
from utils.placement import IN_DICT, IN_LIST, TENSOR_ATTRIBUTE, audit
from utils.traffic import Ledger

#: The class weights of the lab's loss (class 1 is rarer, so it counts twice).
CLASS_WEIGHTS = (1.0, 2.0, 1.0)

_MISMATCH = ("Expected all tensors to be on the same device", "is not on the expected device",
             "should be the same")
_HARD_CODED = ("Invalid device",)  # besides every "no such device here" (unusable_device)


def _said(error: BaseException) -> str:
    """PyTorch's message, first line only, as the learner would read it."""
    return f"`{first_line(error)}`"


#: How a script usually sets its own device, named where a function does it inside.
_EXAMPLE = " (e.g. `torch.device('cuda' if torch.cuda.is_available() else 'cpu')`)"


def _overridden(exercise: str, function: Callable, target: torch.device) -> Feedback | None:
    """The failed Feedback for a function that sets its own ``device = ...``, else None."""
    if not rebinds(function, "device"):
        return None
    return Feedback(exercise, FAILED,
                    f"asked for {device_name(target)}, {sets_own_device(_EXAMPLE)}. Pick the "
                    "device once, at the top of the script; inside, use the `device` argument "
                    "as it is.")


def _audited(exercise: str, function: Callable, module: nn.Module, target: torch.device) -> list:
    """``utils.audit(module, target)``; when it found something and ``function`` sets its own
    device (the likelier cause), the check ends with :func:`_overridden`'s Feedback."""
    left = audit(module, target)
    stop_on(_overridden(exercise, function, target) if left else None)
    return left


def _failed(exercise: str, error: BaseException, target: torch.device) -> Feedback:
    return Feedback(exercise, FAILED, f"on {device_name(target)}, {explain(error)}")


def _is_mismatch(error: BaseException | None) -> bool:
    return error is not None and any(text in str(error) for text in _MISMATCH)


def _is_hard_coded(error: BaseException | None) -> bool:
    return error is not None and (unusable_device(error) is not None
                                  or any(text in str(error) for text in _HARD_CODED))


def _names_a_third_device(error: BaseException | None, target: torch.device) -> bool:
    """A device mismatch that names an accelerator the check did not ask for.

    With the model and data on ``target``, a tensor on another accelerator can only come
    from a device written into the code (on a GPU machine, ``.cuda()`` in a CPU run).
    """
    if not _is_mismatch(error):
        return False
    named = re.findall(r"\b(cuda|mps|xpu)(?::\d+)?\b", str(error))
    return any(device_type != target.type for device_type in named)


def _hard_coded(exercise: str, what: str) -> Feedback:
    return Feedback(exercise, FAILED,
                    f"{what}. A hard-coded 'cuda' (or `.cuda()`) breaks on machines without "
                    "CUDA, and a bare 'cuda' means the *current* GPU (cuda:0), which is how a "
                    "model on cuda:1 meets a batch on cuda:0. Use the `device` argument: "
                    "`.to(device)` everywhere.")


def _devices(device: torch.device | str, other: torch.device | str) -> list[torch.device]:
    """The devices a check runs on, once each: the picked and the second device, then the CPU.

    The CPU comes last, so a device bug is named before anything the CPU alone would show.
    """
    found: list[torch.device] = []
    for candidate in sorted((torch.device(device), torch.device(other)),
                            key=lambda d: d.type == "cpu") + [torch.device("cpu")]:
        if candidate not in found:
            found.append(candidate)
    return found


def _reference_model() -> nn.Module:
    """A correct model with the lab's shapes (4 features in, 3 classes out), on the CPU."""
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _reference_training(device: torch.device):
    model = _reference_model().to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(CLASS_WEIGHTS, device=device))
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)


def _batch(size: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """A CPU batch, as a data loader hands it over: inputs (size, 4) and class targets."""
    generator = torch.Generator().manual_seed(4)
    inputs = torch.randn(size, 4, generator=generator)
    return inputs, torch.arange(size) % 3


# --------------------------------------------------------------------------- exercise 1


def _audit_messages(model: nn.Module, device: torch.device) -> list[str]:
    """One message per kind of tensor that ``model.to(device)`` left behind."""
    messages, lists_named = [], set()
    for finding in audit(model, device):
        top = finding.name.split(".")[0]
        if finding.kind == TENSOR_ATTRIBUTE:
            messages.append(
                f"`self.{finding.name}` is a plain tensor attribute, so it stayed on "
                f"{finding.device}: Module.to moves only registered tensors (parameters and "
                f"buffers) and does not see it. Register it: "
                f"`self.register_buffer({top!r}, ...)`.")
        elif "plain list" in finding.kind or "plain dict" in finding.kind:
            if top not in lists_named:
                lists_named.add(top)
                container = "list" if "plain list" in finding.kind else "dict"
                holder = "nn.ModuleList" if container == "list" else "nn.ModuleDict"
                messages.append(
                    f"`self.{top}` is a Python {container} of layers, so their weights "
                    f"stayed on {finding.device}: layers in a plain {container} are not "
                    f"submodules, and Module.to (like parameters() and state_dict()) never "
                    f"sees them. Use `{holder}([...])`.")
        elif finding.kind in (IN_LIST, IN_DICT) and top not in lists_named:
            lists_named.add(top)
            messages.append(
                f"`self.{top}` keeps tensors in a Python container, and Module.to does not "
                f"look inside lists or dicts: use nn.ParameterList / nn.ParameterDict, or "
                f"register_buffer.")
        elif finding.moved_by_to:
            messages.append(f"`{finding.name}` is on {finding.device}, not on {device}.")
    return messages


def _trained_besides_layers(model: nn.Module) -> list[str]:
    """The names of parameters that require grad outside the nn.Linear layers (a trainable
    scale, where the script's is fixed)."""
    return [f"{prefix}.{name}".lstrip(".") for prefix, module in model.named_modules()
            if not isinstance(module, nn.Linear)
            for name, p in module.named_parameters(recurse=False) if p.requires_grad]


def _what_changed(model: nn.Module) -> str:
    """On the CPU: '' when ``model`` computes what the script computes (the two blocks, the
    scale of 0.5, and 0.1 times standard normal noise while training), else what changed."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if [(m.in_features, m.out_features) for m in linears] != [(4, 16), (16, 16), (16, 3)]:
        return ("keep the script's layers: nn.Linear(4, 16) and nn.Linear(16, 16) in "
                "self.blocks, then the head nn.Linear(16, 3).")
    inputs = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    kept_state = torch.get_rng_state()
    try:
        with torch.no_grad():
            hidden = inputs
            for block in linears[:2]:
                hidden = torch.relu(block(hidden)) * 0.5
            quiet = linears[2](hidden)
            if not torch.allclose(model.eval()(inputs), quiet, atol=1e-5):
                return ("the model no longer computes what the script computes (checked "
                        "without noise, in eval mode): keep the scale of 0.5 after each "
                        "block. Move it; do not change it.")
            torch.manual_seed(11)
            noisy = model.train()(inputs)
            torch.manual_seed(11)
            expected = linears[2](hidden + 0.1 * torch.randn(hidden.shape))
    finally:
        torch.set_rng_state(kept_state)  # leave the learner's random numbers alone
    if torch.allclose(noisy, quiet, atol=1e-6):
        return ("the output no longer changes while training: you removed the noise. Keep "
                "it (it regularises the model), and make it on x's device with "
                "`torch.randn_like(x)`.")
    if not torch.allclose(noisy, expected, atol=1e-5):
        return ("the noise changed: the script adds `0.1 * torch.randn(x.shape)`, standard "
                "normal noise scaled by 0.1. Keep that; only make it where x is: "
                "`0.1 * torch.randn_like(x)`.")
    return ""


@graded
def check_device_agnostic_model(build_model: Callable[[], nn.Module],
                                device: torch.device | str,
                                other: torch.device | str) -> Feedback:
    """Exercise 04.1: ``build_model()`` returns a model that ``.to(d)`` puts wholly on ``d``.

    For each device: builds a fresh model, moves it, audits it (plain tensor
    attribute, layers in a Python list) and runs a training-mode forward pass on an
    input there (a tensor made in ``forward`` without ``device=``, a hard-coded
    ``'cuda'``, a tensor made on the CPU and copied there every forward, counted by a
    :class:`utils.Ledger`), and names a trainable scale where the script's is fixed. On the
    CPU it also checks that the noise is still added.
    Introduced in lab 04_cross_device_errors.
    """
    exercise = "Exercise 1"
    stop_on(not_a_function(exercise, build_model))
    devices = _devices(device, other)
    for target in devices:
        model, error = call(build_model)
        if error is not None:
            return Feedback(exercise, FAILED, f"build_model(): {explain(error)}")
        if not isinstance(model, nn.Module):
            return Feedback(exercise, FAILED, f"build_model() returned "
                                              f"{type(model).__name__}: return Model().")
        model.to(target)
        messages = _audit_messages(model, target)
        if messages:
            return Feedback(exercise, FAILED, f"after model.to({str(target)!r}), "
                            f"utils.audit found {len(messages)} problem(s). "
                            + " ".join(messages))
        trained = _trained_besides_layers(model)
        if trained:
            return Feedback(exercise, FAILED,
                            f"`self.{trained[0]}` is an nn.Parameter that requires grad: "
                            "Module.to moves it, but an optimizer given "
                            "model.parameters() trains it, and the script's scale is fixed "
                            "at 0.5. Register it as a buffer, which moves with the model "
                            f"and is never trained: `self.register_buffer({trained[0]!r}, "
                            "...)`.")
    for target in devices:
        model = build_model().to(target).train()
        inputs = torch.randn(5, 4, device=target)
        with Ledger() as ledger:
            outputs, error = call(model, inputs)
        if _is_hard_coded(error) or _names_a_third_device(error, target):
            return _hard_coded(exercise, f"forward failed on {device_name(target)}: "
                                         f"{_said(error)}")
        if _is_mismatch(error) and reads_outer_name(build_model, "device"):
            outer = getattr(build_model, "__globals__", {}).get("device")
            value = f" (here {outer})" if outer is not None else ""
            return Feedback(exercise, FAILED,
                            f"the audit is clean, but forward fails on "
                            f"{device_name(target)}: {_said(error)}. Inside forward, "
                            f"`device=device` reads the notebook's variable{value}, not "
                            "the device the model was moved to: the model does not know "
                            "that name, and `model.to(...)` does not change it. Make the "
                            "tensor where x is: `torch.randn_like(x)` or "
                            "`device=x.device`.")
        if _is_mismatch(error):
            return Feedback(exercise, FAILED,
                            f"the audit is clean, but forward fails on "
                            f"{device_name(target)}: {_said(error)}. A tensor made inside "
                            "forward without `device=` (like `torch.randn(x.shape)`) is "
                            "born on the CPU, the default device, wherever x is; "
                            "Module.to cannot move it, because it does not exist until "
                            "forward runs. Make it where x is: `torch.randn_like(x)` or "
                            "`torch.randn(x.shape, device=x.device)`.")
        if error is not None:
            return _failed(exercise, error, target)
        if not isinstance(outputs, torch.Tensor) or outputs.shape != (5, 3):
            return Feedback(exercise, FAILED, "forward should return the head's output, "
                                              "shape (batch, 3).")
        if outputs.device != target:
            return Feedback(exercise, FAILED, f"the output is on {outputs.device}, the "
                                              f"model on {device_name(target)}.")
        copied = [c for c in ledger.copies if c.source.type == "cpu" and c.target == target]
        if copied:
            return Feedback(exercise, FAILED,
                            f"forward runs on {device_name(target)}, but it makes a tensor "
                            f"on the CPU and copies it there on every call "
                            f"({copied[0].bytes} bytes each forward, e.g. "
                            "`torch.randn(x.shape).to(x.device)`): one copy from main "
                            "memory per training step, and the host waits for it. Make the "
                            "noise where x is: `torch.randn_like(x)`.")
    changed = _what_changed(build_model())
    if changed:
        return Feedback(exercise, FAILED, changed)
    shown = ", ".join(device_name(d) for d in devices)
    return Feedback(exercise, PASSED, f"utils.audit finds nothing left behind and forward runs "
                                      f"on {shown}: register_buffer, nn.ModuleList and "
                                      "randn_like keep everything where the model is.")


# --------------------------------------------------------------------------- exercise 2


@graded
def check_training_setup(build_training: Callable, device: torch.device | str,
                         other: torch.device | str) -> Feedback:
    """Exercise 04.2: ``build_training(model, device)`` returns ``(model, loss_fn, optimizer)``.

    For each device: hands over a fresh CPU model and audits what comes back. Catches
    a hard-coded ``'cuda'`` (an error without CUDA, or a model on a GPU when the CPU
    was asked for), the model not moved, the loss's class weights left on the CPU,
    and an optimizer that does not hold the model's parameters; then runs it as a GPU
    machine would, given cuda:1 (:mod:`labchecks.gpu_stand_in`: a ``.cuda()`` branch, a
    device without its index). Introduced in lab 04_cross_device_errors.
    """
    exercise = "Exercise 2"
    stop_on(not_a_function(exercise, build_training))
    devices = _devices(device, other)
    for target in devices:
        result, error = call(build_training, _reference_model(), target)
        if _is_hard_coded(error):
            return _hard_coded(exercise, f"asked for {device_name(target)}, "
                                         f"build_training raised {_said(error)}")
        if error is not None:
            return _failed(exercise, error, target)
        if not (isinstance(result, (tuple, list)) and len(result) == 3):
            return Feedback(exercise, FAILED, "return a triple: (model, loss_fn, optimizer).")
        model, loss_fn, optimizer = result
        if not isinstance(model, nn.Module) or not isinstance(loss_fn, nn.Module):
            return Feedback(exercise, FAILED, "the model and the loss should both be "
                                              "nn.Modules: return the CrossEntropyLoss "
                                              "object, not a function.")
        left = _audited(exercise, build_training, model, target)
        if left:
            found = sorted({str(f.device) for f in left})
            if any(f.device.type != "cpu" for f in left):  # it arrived on the CPU
                return _hard_coded(exercise, f"asked for {device_name(target)}, the model "
                                             f"came back on {', '.join(found)}: the "
                                             f"function ignores its `device` argument")
            return Feedback(exercise, FAILED,
                            f"the model is still on {', '.join(found)}, not on "
                            f"{device_name(target)}. Call `model.to(device)`: Module.to "
                            "moves the model in place (no reassignment needed).")
        weights = _audited(exercise, build_training, loss_fn, target)
        if weights:
            return Feedback(exercise, FAILED,
                            f"the loss's class weights are on {weights[0].device}, the model "
                            f"on {device_name(target)}: the loss step would fail. "
                            "CrossEntropyLoss keeps `weight` as a buffer, and a loss is an "
                            "nn.Module, so `loss_fn.to(device)` moves it (or make the "
                            "weights with `device=device`).")
        weight = getattr(loss_fn, "weight", None)
        if not isinstance(weight, torch.Tensor) or weight.shape != (3,):
            return Feedback(exercise, FAILED, f"keep the class weights: "
                                              f"nn.CrossEntropyLoss(weight=...) with "
                                              f"{list(CLASS_WEIGHTS)}.")
        if target.type != "meta" and weight.cpu().tolist() != list(CLASS_WEIGHTS):
            return Feedback(exercise, FAILED, f"the class weights changed to "
                                              f"{weight.cpu().tolist()}: move them, "
                                              "do not change them.")
        if not isinstance(optimizer, torch.optim.Optimizer):
            return Feedback(exercise, FAILED, "the third item should be the optimizer.")
        held = [p for group in optimizer.param_groups for p in group["params"]]
        owned = list(model.parameters())
        if len(held) != len(owned) or not all(any(h is p for p in owned) for h in held):
            return Feedback(exercise, FAILED,
                            "the optimizer does not hold the model's parameters (on "
                            f"{device_name(target)} moving the model replaced them). "
                            "Move the model first, then build the optimizer.")
    stop_on(gpu_placement_problem(exercise, build_training, _reference_model(), STAND_IN_GPU))
    shown = ", ".join(device_name(d) for d in devices)
    return Feedback(exercise, PASSED, f"the model and the loss's class weights land on the "
                                      f"device you ask for ({shown}), and the optimizer holds "
                                      "the moved parameters.")


# --------------------------------------------------------------------------- exercise 3


def _step_fails(train_step: Callable, target: torch.device, move_inputs: bool,
                move_targets: bool) -> bool:
    """Whether the step fails with a device mismatch when only the named tensors arrive moved."""
    inputs, targets = _batch()
    inputs = inputs.to(target) if move_inputs else inputs
    targets = targets.to(target) if move_targets else targets
    _, error = call(train_step, *_reference_training(target), inputs, targets, target)
    return _is_mismatch(error)


@graded
def check_train_step(train_step: Callable, device: torch.device | str,
                     other: torch.device | str) -> Feedback:
    """Exercise 04.3: ``train_step(model, loss_fn, optimizer, inputs, targets, device)``.

    For each device: a correct model, loss and optimizer on it, and a CPU batch (as a
    data loader gives it). On a device mismatch it replays the step with only the
    targets, then only the inputs, moved for the learner, to say which one stayed on
    the CPU. On a real device it checks that the step updated the weights.
    Introduced in lab 04_cross_device_errors.
    """
    exercise = "Exercise 3"
    stop_on(not_a_function(exercise, train_step))
    devices = _devices(device, other)
    for target in devices:
        model, loss_fn, optimizer = _reference_training(target)
        before = [p.detach().clone() for p in model.parameters()]
        inputs, targets = _batch()
        loss, error = call(train_step, model, loss_fn, optimizer, inputs, targets, target)
        if _is_hard_coded(error) or _names_a_third_device(error, target):
            return _hard_coded(exercise, f"on {device_name(target)} train_step raised "
                                         f"{_said(error)}")
        stop_on(_overridden(exercise, train_step, target) if _is_mismatch(error) else None)
        if _is_mismatch(error):
            where = device_name(target)
            inputs_left = _step_fails(train_step, target, False, True)
            targets_left = _step_fails(train_step, target, True, False)
            messages = []
            if inputs_left:
                messages.append(
                    f"The inputs stay on the CPU while the model is on {where}: a data "
                    "loader hands you CPU tensors, so move each batch, "
                    "`inputs = inputs.to(device)`. (`inputs.to(device)` alone changes "
                    "nothing: Tensor.to returns a new tensor.)")
            if targets_left:
                messages.append(
                    f"The targets stay on the CPU: the loss compares them with the "
                    f"model's output on {where}, so they must be there too, "
                    "`targets = targets.to(device)`. Moving the model never moves "
                    "the data.")
            if not messages:
                messages.append("Only the model, the loss and the batch should meet "
                                "here; make sure nothing else is created on the CPU.")
            return Feedback(exercise, FAILED, f"on {where} the step fails with "
                                              f"{_said(error)}. " + " ".join(messages))
        if error is not None:
            return _failed(exercise, error, target)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            return Feedback(exercise, FAILED, "return the loss, a tensor with one number "
                                              "(the skeleton's last line does).")
        stop_on(_overridden(exercise, train_step, target) if loss.device != target else None)
        if loss.device != target:
            return Feedback(exercise, FAILED, f"the loss is on {loss.device}, not on "
                                              f"{device_name(target)}.")
        if target.type != "meta" and all(
            torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)
        ):
            return Feedback(exercise, FAILED, "the weights did not change: keep "
                                              "optimizer.step() in the step.")
    stop_on(gpu_placement_problem(exercise, train_step, *_reference_training("meta"),
                                  *_batch(), STAND_IN_GPU))
    shown = ", ".join(device_name(d) for d in devices)
    return Feedback(exercise, PASSED, f"a CPU batch trains a model on {shown}: inputs and "
                                      "targets move to where the model and the loss are.")


# --------------------------------------------------------------------------- exercise 4


def _predict_model() -> nn.Module:
    """A trained-looking model with dropout (the noise of exercise 1's kind), on the CPU and in
    training mode, as a model is when training ends: predictions need ``model.eval()``."""
    return seeded(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5),
                                        nn.Linear(8, 3)), 40).train()


@graded
def check_predict(predict: Callable, device: torch.device | str,
                  other: torch.device | str) -> Feedback:
    """Exercise 04.4: ``predict(model, inputs, device)`` returns NumPy probabilities.

    The model comes in training mode, with dropout. Catches ``.numpy()`` on a device tensor
    (meta raises that TypeError for real, as a GPU does), ``.numpy()`` on a tensor that
    requires grad (found on the CPU), and predictions made in training mode (dropout on).
    On meta, a correct answer stops at ``.cpu()``, since meta has no data to copy: that is
    accepted. On a real device the array must hold the eval-mode probabilities.
    Introduced in lab 04_cross_device_errors.
    """
    exercise = "Exercise 4"
    stop_on(not_a_function(exercise, predict))
    devices = _devices(device, other)
    inputs, _ = _batch(5)
    for target in devices:
        model = _predict_model().to(target)
        kept_state = torch.get_rng_state()
        array, error = call(predict, model, inputs, target)
        torch.set_rng_state(kept_state)
        stop_on(_overridden(exercise, predict, target) if _is_mismatch(error) else None)
        if target.type == "meta" and isinstance(error, NotImplementedError):
            continue  # it reached .cpu(): a GPU would copy here, meta has no data to copy
        if _is_hard_coded(error) or _names_a_third_device(error, target):
            return _hard_coded(exercise, f"on {device_name(target)} predict raised "
                                         f"{_said(error)}")
        if isinstance(error, TypeError) and "to numpy" in str(error):
            return Feedback(exercise, FAILED,
                            f"on {device_name(target)}: {_said(error)}. NumPy arrays live "
                            "in main memory, so `.numpy()` works only on a CPU tensor. "
                            "Copy it there first: `.cpu().numpy()`.")
        if isinstance(error, RuntimeError) and "requires grad" in str(error):
            return Feedback(exercise, FAILED,
                            f"on {device_name(target)}: {_said(error)}. The probabilities "
                            "come from the weights, so they carry autograd history, and "
                            "`.numpy()` refuses them even on the CPU. Predict under "
                            "`torch.inference_mode()` (or `torch.no_grad()`), or add "
                            "`.detach()`, then `.cpu().numpy()`.")
        if error is not None:
            return _failed(exercise, error, target)
        if isinstance(array, torch.Tensor):
            return Feedback(exercise, FAILED, f"predict returned a tensor on "
                                              f"{array.device}; return a NumPy array.")
        if not isinstance(array, np.ndarray) or array.shape != (5, 3):
            return Feedback(exercise, FAILED, "return a NumPy array of shape (batch, 3).")
        if target.type == "meta":
            continue  # no data on meta to compare with; the CPU run compares
        with torch.inference_mode():
            expected = model.eval()(inputs.to(target)).softmax(dim=1).cpu().numpy()
        if not np.allclose(array, expected, atol=1e-5):
            if _predicts_in_training_mode(predict, target):
                return Feedback(exercise, FAILED,
                                "the model predicted in training mode, so its dropout (or "
                                "noise) was on and the probabilities are random: keep "
                                "`model.eval()` before predicting.")
            return Feedback(exercise, FAILED, "the array does not hold the model's class "
                                              "probabilities: keep the skeleton's "
                                              "softmax line.")
    stop_on(gpu_placement_problem(exercise, predict, _predict_model().to("meta"), inputs,
                                  STAND_IN_GPU))
    return Feedback(exercise, PASSED, "in eval mode, with no autograd history, the "
                                      "probabilities reach NumPy through `.cpu()`: NumPy reads "
                                      "main memory only.")


def _predicts_in_training_mode(predict: Callable, target: torch.device) -> bool:
    """Whether ``predict`` leaves a model in training mode while it runs it."""
    seen: list[bool] = []
    model = _predict_model().to(target)
    model.register_forward_pre_hook(lambda module, args: seen.append(module.training))
    kept_state = torch.get_rng_state()
    try:
        call(predict, model, _batch(5)[0], target)
    finally:
        torch.set_rng_state(kept_state)
    return any(seen)
