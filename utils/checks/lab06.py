"""Checks and the small training run for lab 06_training_checkpoints: resume anywhere."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from utils.checks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    attempt,
)


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
    _, problem = attempt(exercise, save_checkpoint, path, *training, stop)
    if problem is not None:
        return problem

    resumed = tiny_training(device, seed=99)  # a new process would start from other numbers
    torch.manual_seed(99)
    start, problem = attempt(exercise, load_checkpoint, path, *resumed, device)
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
    _, problem = attempt(exercise, atomic_save, {"version": 1}, path)
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
