"""Checks and the small training run for lab 06_training_checkpoints: resume anywhere, and a
save that a crash cannot break.
"""

from __future__ import annotations

import io
import os
import random
import shutil
from collections.abc import Callable
from contextlib import contextmanager
from unittest import mock

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    attempt,
    explain,
    first_line,
    given,
    loaded_unsafely,
    recorded_loads,
    stop_on,
    unsafe_load,
)
from labchecks.gpu_stand_in import STAND_IN_GPU, as_if_on_gpu
from labchecks.grading import graded


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
    """Train one epoch (shuffled mini-batches, random sign flips, dropout); return the mean loss.

    Three random number generators drive it, so an exact resume must restore all three:
    the CPU's (``torch.randperm`` shuffles), Python's ``random`` (which batches are
    flipped, as data pipelines often decide) and the model's device's (dropout; on the
    CPU that is the CPU's). Introduced in lab 06_training_checkpoints.
    """
    device = next(model.parameters()).device
    inputs, targets = _lab06_data(device)
    model.train()
    order = torch.randperm(len(inputs))
    losses = []
    for batch in order.split(16):
        sign = -1.0 if random.random() < 0.5 else 1.0  # the target is the sum: flip both
        loss = nn.functional.mse_loss(model(sign * inputs[batch]), sign * targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    return sum(losses) / len(losses)


def _same(a: float, b: float, device: torch.device) -> bool:
    return a == b if device.type == "cpu" else abs(a - b) <= 1e-5 * max(1.0, abs(a))


def generators(device: torch.device) -> list[tuple[str, Callable[[], object], str]]:
    """The random number generators a run on ``device`` uses: ``(name, read state, how to
    save it)``. Always the CPU's and Python's; plus the device's own on CUDA, MPS or XPU.
    Introduced in lab 06_training_checkpoints.
    """
    found: list[tuple[str, Callable[[], object], str]] = [
        ("the CPU's (shuffling)", torch.get_rng_state,
         "torch.get_rng_state() / torch.set_rng_state()"),
        ("Python's `random` (the sign flips)", random.getstate,
         "random.getstate() / random.setstate()"),
    ]
    if device.type == "cuda":
        found.append(("CUDA's (dropout on the GPU)",
                      lambda: torch.cuda.get_rng_state(device),
                      "torch.cuda.get_rng_state_all() / torch.cuda.set_rng_state_all()"))
    elif device.type == "mps":
        found.append(("MPS's (dropout on the Mac's GPU)", torch.mps.get_rng_state,
                      "torch.mps.get_rng_state() / torch.mps.set_rng_state()"))
    elif device.type == "xpu":
        found.append(("XPU's (dropout on the Intel GPU)",
                      lambda: torch.xpu.get_rng_state(device),
                      "torch.xpu.get_rng_state_all() / torch.xpu.set_rng_state_all()"))
    return found


def _equal_state(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.equal(a.cpu(), b.cpu())
    return a == b


def _scramble_generators() -> None:
    """What a new process does: other random numbers everywhere (torch.manual_seed seeds
    every device's generator too)."""
    torch.manual_seed(99)
    random.seed(99)


def _crash_half_way(real_save: Callable):
    """A torch.save that writes half the bytes, then fails, as a full disk or a kill would."""

    def crash(obj, f, *args, **kwargs):
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        half = buffer.getvalue()[: len(buffer.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as handle:
                handle.write(half)
        else:
            f.write(half)
        raise OSError("simulated crash in the middle of torch.save")

    return crash


def _through_a_crash(exercise: str, when: str, function: Callable, *args,
                     crash: tuple[type[BaseException], ...] = (OSError,)) -> None:
    """Call the learner's ``function(*args)`` while the check makes it crash: the ``crash``
    may reach the caller, as a real one would; any other error ends the check, said ``when``."""
    try:
        function(*args)
    except crash:
        pass
    except Exception as error:
        stop_on(Feedback(exercise, FAILED, f"{when}: {explain(error)}"))


def _remove_new(folder: str, before: set[str]) -> None:
    """Remove what was written in ``folder`` since it held ``before``."""
    for name in set(os.listdir(folder)) - before:
        os.remove(os.path.join(folder, name))


NOT_ATOMIC = ("save_checkpoint writes straight into `path`: when the process dies "
              "mid-save (simulated here), the last good checkpoint is gone too. The exercise "
              "asks for your atomic_save from exercise 1: `atomic_save(checkpoint, path)` "
              "instead of `torch.save(checkpoint, path)`.")
UNSAFE = unsafe_load("a checkpoint made of state_dict()s, numbers and RNG states",
                     " and save state_dict()s, not whole objects")


@graded
def check_resume(save_checkpoint: Callable, load_checkpoint: Callable,
                 device: str | torch.device, folder: str = "checkpoints") -> Feedback:
    """Exercises 06.2/06.3: train 4 epochs straight, and 2 + save + load + 2; compare.

    Passes when the resumed losses equal the uninterrupted ones (exactly on the CPU).
    On failure it says which piece the checkpoint did not restore: model, optimizer
    state, scheduler, a random number generator (the CPU's, Python's, and the
    device's own on CUDA, MPS or XPU) or the epoch; it also catches a save that is
    not atomic and a load with ``weights_only=False``.
    Introduced in lab 06_training_checkpoints.
    """
    exercise = "Exercises 2 and 3"
    device = torch.device(device)
    total, stop = 4, 2
    python_state = random.getstate()
    try:
        random.seed(0)
        training = tiny_training(device)
        reference = [train_epoch(*training) for _ in range(total)]

        random.seed(0)
        training = tiny_training(device)
        for _ in range(stop):
            train_epoch(*training)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "lab06_resume_check.pt")
        if os.path.exists(path):
            os.remove(path)
        at_save = [(name, read(), how) for name, read, how in generators(device)]
        saved_model = {k: v.clone() for k, v in training[0].state_dict().items()}
        saved_lr = training[1].param_groups[0]["lr"]
        given(attempt(exercise, save_checkpoint, path, *training, stop))
        if not os.path.exists(path):
            return Feedback(exercise, FAILED, f"save_checkpoint did not create {path!r}: save "
                                              "the checkpoint to the `path` it is given.")
        stop_on(_survives_a_crash(exercise, save_checkpoint, path, training, stop))
        resumed = tiny_training(device, seed=99)  # a new process would start from other numbers
        _scramble_generators()
        with recorded_loads() as loads, _recorded_assign() as assigned:
            start, problem = attempt(exercise, load_checkpoint, path, *resumed, device)
        if loaded_unsafely(loads):
            return Feedback(exercise, FAILED, UNSAFE)
        if problem is not None:
            return _load_failed(exercise, problem)
        verdict = _compare(exercise, resumed, start, stop, saved_model, saved_lr, at_save, device,
                           reference[stop:], total, any(assigned))
        if verdict and device.type == "cpu":  # a GPU grader has just judged it for real
            on_a_gpu = _rng_state_on_a_gpu(exercise, load_checkpoint, path)
            return verdict if on_a_gpu is None else on_a_gpu
        return verdict
    finally:
        random.setstate(python_state)  # leave the learner's random numbers alone


@contextmanager
def _recorded_assign():
    """Record the ``assign`` flag of every ``Module.load_state_dict`` call in the block."""
    flags: list[bool] = []
    real = nn.Module.load_state_dict

    def load_state_dict(self, state_dict, strict=True, assign=False):
        flags.append(bool(assign))
        return real(self, state_dict, strict=strict, assign=assign)

    with mock.patch.object(nn.Module, "load_state_dict", load_state_dict):
        yield flags


RNG_ON_THE_DEVICE = (
    "your load_checkpoint works here, but not on a GPU: given the device cuda:1 (as on a GPU "
    "machine), it hands torch.set_rng_state the CPU generator's state on that device "
    "(map_location=device put it there), and there torch.set_rng_state raises `TypeError: RNG "
    "state must be a torch.ByteTensor`. The CPU's state must stay a CPU ByteTensor: load with "
    "map_location='cpu' (load_state_dict then copies each piece to where the model and "
    "optimizer live), or pass `state.cpu()`.")


def _rng_state_on_a_gpu(exercise: str, load_checkpoint: Callable, path: str) -> Feedback | None:
    """Load ``path`` as a GPU machine would (:func:`as_if_on_gpu`, given cuda:1): failed when
    the CPU generator's state would reach torch.set_rng_state off the CPU, else None. What
    needs a real GPU there (the copy of a stand-in tensor back to the CPU) judges nothing."""
    given: list[object] = []
    kept = torch.get_rng_state(), random.getstate()
    refused = False
    try:
        with as_if_on_gpu(), mock.patch("torch.set_rng_state", given.append), \
                mock.patch("torch.random.set_rng_state", given.append):
            load_checkpoint(path, *tiny_training("meta", seed=99), STAND_IN_GPU)
    except Exception as error:  # noqa: BLE001 - only the RNG's refusal is judged here
        refused = "RNG state must be a torch.ByteTensor" in str(error)
    finally:
        torch.set_rng_state(kept[0])
        random.setstate(kept[1])
    off_cpu = [s for s in given if isinstance(s, torch.Tensor) and s.device.type != "cpu"]
    return Feedback(exercise, FAILED, RNG_ON_THE_DEVICE) if refused or off_cpu else None


def _load_failed(exercise: str, problem: Feedback) -> Feedback:
    if "safe loader" in problem.message:
        return Feedback(exercise, FAILED,
                        "the safe loader refused your checkpoint: it holds a whole object "
                        "(a model or an optimizer, pickled with its class), not just tensors and "
                        "numbers. Save `model.state_dict()`, `optimizer.state_dict()` and "
                        "`scheduler.state_dict()` instead; do not switch to weights_only=False.")
    return problem


def _survives_a_crash(exercise: str, save_checkpoint: Callable, path: str, training,
                      stop: int) -> Feedback | None:
    """Save again while torch.save crashes half-way: the first checkpoint must still load."""
    real_save = torch.save
    before = set(os.listdir(os.path.dirname(path) or "."))
    state = torch.get_rng_state(), random.getstate()
    with mock.patch("torch.save", _crash_half_way(real_save)):
        _through_a_crash(exercise, "saving while the disk fails", save_checkpoint, path,
                         *training, stop)
    torch.set_rng_state(state[0])
    random.setstate(state[1])
    _remove_new(os.path.dirname(path) or ".", before)
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        if "Weights only load failed" in str(error):
            return None  # whole objects pickled: the load step names that mistake
        return Feedback(exercise, FAILED, NOT_ATOMIC)
    return None


def _compare(exercise: str, resumed, start, stop: int, saved_model: dict, saved_lr: float,
             at_save: list, device: torch.device, expected: list[float],
             total: int, assigned: bool = False) -> Feedback:
    model, optimizer, scheduler = resumed
    if start != stop:
        return Feedback(exercise, FAILED,
                        f"load_checkpoint returned {start!r}; it should return {stop}. `epoch` "
                        f"is the number of epochs finished when you save ({stop} here), which is "
                        "also the index of the next epoch to run: save it as it is and return it, "
                        "so the loop continues with `for epoch in range(start, total)`.")
    held = [p for group in optimizer.param_groups for p in group["params"]]
    if any(not any(p is h for h in held) for p in model.parameters()):
        how = ("`model.load_state_dict(..., assign=True)` replaced the model's Parameters "
               "with the loaded tensors" if assigned else
               "the model's Parameters were replaced after the optimizer was built")
        return Feedback(exercise, FAILED,
                        f"{how}, and the optimizer, built before, still holds the old "
                        "Parameters: optimizer.step() would train tensors the model no longer "
                        "uses. Drop assign=True (load_state_dict then copies into the "
                        "Parameters the optimizer holds), or build the optimizer after loading.")
    if any(not torch.equal(saved_model[k], v.detach()) for k, v in model.state_dict().items()):
        return Feedback(exercise, FAILED, "the model's weights after loading differ from the "
                                          "saved ones: save model.state_dict() and restore it "
                                          "with model.load_state_dict().")
    if not optimizer.state:
        return Feedback(exercise, FAILED,
                        "the optimizer starts empty after loading: its momentum buffers restart "
                        "from zero, so the resumed run drifts. Save optimizer.state_dict() and "
                        "restore it with optimizer.load_state_dict() (after building the "
                        "optimizer on the moved model).")
    lr = optimizer.param_groups[0]["lr"]
    if lr != saved_lr and scheduler.last_epoch == stop:
        twice = (" decayed twice: the optimizer's state dict already holds the decayed rate, and "
                 "replaying scheduler.step() decays it again" if lr < saved_lr else
                 " is not the one saved")
        return Feedback(exercise, FAILED,
                        f"the scheduler is back at epoch {stop}, as it should be, but the "
                        f"learning rate is {lr:g}, not {saved_lr:g}: it{twice}. Save "
                        "scheduler.state_dict() and restore it with scheduler.load_state_dict(), "
                        "instead of stepping the scheduler again.")
    if lr != saved_lr or scheduler.last_epoch != stop:
        return Feedback(exercise, FAILED,
                        "the learning-rate schedule restarted: the scheduler is back at epoch "
                        f"{scheduler.last_epoch}. Save scheduler.state_dict() and restore it.")
    now = {name: read() for name, read, _ in generators(device)}
    missed = [(name, how) for name, state, how in at_save if not _equal_state(now[name], state)]
    if missed:
        names = " and ".join(name for name, _ in missed)
        hows = "; ".join(how for _, how in missed)
        return Feedback(exercise, FAILED,
                        f"the random number generator{'s' if len(missed) > 1 else ''} {names} "
                        f"{'were' if len(missed) > 1 else 'was'} not restored, so the shuffling, "
                        "the flips or the dropout differ after the resume. A checkpoint saves "
                        f"the state of every generator in use: {hows}.")
    resumed_losses = [train_epoch(*resumed) for _ in range(stop, total)]
    if not all(_same(a, b, device) for a, b in zip(resumed_losses, expected, strict=True)):
        return Feedback(exercise, FAILED, f"the resumed losses {resumed_losses} differ from the "
                                          f"uninterrupted {expected}.")
    return Feedback(exercise, PASSED, f"the resumed run repeats the uninterrupted one exactly: "
                                      f"losses {[round(x, 4) for x in expected]}.")


# --- Exercise 1 ---------------------------------------------------------------------------


@contextmanager
def _recorded_files():
    """Record torch.save targets, files opened for writing, renames (os.replace, os.rename, and
    what calls them: Path.replace, Path.rename, shutil.move) and removals, while they still
    work."""
    seen: dict[str, list] = {"save": [], "rename": [], "remove": [], "copy": [], "write": []}
    real = {"save": torch.save, "replace": os.replace, "rename": os.rename,
            "remove": os.remove, "unlink": os.unlink, "copyfile": shutil.copyfile}

    def copyfile(src, dst, *args, **kwargs):
        seen["copy"].append(dst)
        return real["copyfile"](src, dst, *args, **kwargs)

    def opener(real_open):
        def open_(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+"):
                seen["write"].append(file)
            return real_open(file, mode, *args, **kwargs)
        return open_

    def save(obj, f, *args, **kwargs):
        seen["save"].append(f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None))
        return real["save"](obj, f, *args, **kwargs)

    def renamer(kind):
        def rename(src, dst, *args, **kwargs):
            seen["rename"].append((kind, src, dst))
            return real[kind](src, dst, *args, **kwargs)
        return rename

    def remover(kind):
        def remove(target, *args, **kwargs):
            seen["remove"].append(target)
            return real[kind](target, *args, **kwargs)
        return remove

    with mock.patch("torch.save", save), mock.patch("os.replace", renamer("replace")), \
            mock.patch("os.rename", renamer("rename")), \
            mock.patch("os.remove", remover("remove")), \
            mock.patch("os.unlink", remover("unlink")), mock.patch("shutil.copyfile", copyfile), \
            mock.patch("builtins.open", opener(open)), mock.patch("io.open", opener(io.open)):
        yield seen


def _folder_of(target) -> str | None:
    if isinstance(target, (str, os.PathLike)):
        return os.path.dirname(os.path.abspath(os.fspath(target)))
    return None


def _same_file(a, b) -> bool:
    try:
        return os.path.abspath(os.fspath(a)) == os.path.abspath(os.fspath(b))
    except TypeError:
        return False


class _KilledAtRename(BaseException):
    """The process "dies" at the rename: not an OSError, so nothing falls back to a copy."""


def _crash_at_rename(crashes: list):
    def crash(src, dst, *args, **kwargs):
        crashes.append(dst)
        raise _KilledAtRename()

    return mock.patch("os.replace", crash), mock.patch("os.rename", crash)


@graded
def check_atomic_save(atomic_save: Callable, folder: str = "checkpoints") -> Feedback:
    """Exercise 06.1: ``atomic_save(obj, path)`` never leaves a broken file under ``path``.

    Saves version 1; saves version 2 while ``torch.save`` fails half-way (as a full
    disk or a killed process would) and checks that version 1 still loads; saves again
    with the process "dying" at the rename (``os.remove`` + ``os.rename`` loses the old
    file there); then saves version 3 normally, checks that it arrived, and that the
    temporary file was in the same folder as ``path`` (a rename across folders may cross
    file systems, where it is a copy, not atomic). Introduced in lab
    06_training_checkpoints.
    """
    exercise = "Exercise 1"
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "lab06_atomic_check.pt")
    if os.path.exists(path):
        os.remove(path)
    given(attempt(exercise, atomic_save, {"version": 1}, path))
    if not os.path.exists(path):
        return Feedback(exercise, FAILED, f"atomic_save did not create {path!r}.")
    before = set(os.listdir(folder))
    with mock.patch("torch.save", _crash_half_way(torch.save)):
        _through_a_crash(exercise, "while the disk fails", atomic_save, {"version": 2}, path)
    stop_on(_still_version_1(exercise, path, "a crash in the middle of torch.save",
                             "You wrote straight over the old checkpoint: write to a "
                             "temporary file in the same folder, then os.replace() it onto "
                             "the final name."))
    leftovers = set(os.listdir(folder)) - before
    _remove_new(folder, before)
    crashes: list = []
    with _recorded_files() as crash_seen:
        crash_replace, crash_rename = _crash_at_rename(crashes)
        with crash_replace, crash_rename:
            _through_a_crash(exercise, "while the rename fails", atomic_save, {"version": 2},
                             path, crash=(_KilledAtRename, OSError))
    removed_first = any(_same_file(target, path) for target in crash_seen["remove"])
    if crashes:  # no os.replace/os.rename: not testable
        stop_on(_still_version_1(
            exercise, path, "a crash at the rename",
            "os.remove(path) then os.rename(...) leaves a moment with no checkpoint at all: a "
            "crash there loses the old one and the new one is not in place. "
            "os.replace(temporary, path) swaps the name in one step, so remove nothing first."
            if removed_first else
            "Write the new file under a temporary name and let one os.replace() put it in place."))
    _remove_new(folder, before)
    with _recorded_files() as seen:
        given(attempt(exercise, atomic_save, {"version": 3}, path))
    try:
        arrived = torch.load(path, weights_only=True)
    except Exception as error:
        return Feedback(exercise, FAILED, f"after a normal save the file does not load: "
                                          f"`{first_line(error)}`.")
    if arrived != {"version": 3}:
        return Feedback(exercise, FAILED, "after a successful save the file still holds the old "
                                          "checkpoint: did you forget os.replace()?")
    stop_on(_temporary_elsewhere(exercise, seen, path))
    if any(_same_file(target, path) for target in seen["copy"]):
        return Feedback(exercise, FAILED, "atomic_save copies the temporary file onto `path`: a "
                                          "copy writes the final file byte by byte, and a crash "
                                          "can cut it in half. Rename it instead: "
                                          "os.replace(temporary, path) swaps the name in one "
                                          "step.")
    if any(_same_file(target, path) for target in seen["save"] + seen["write"]):
        return Feedback(exercise, FAILED, "atomic_save also writes into `path` itself (a "
                                          "torch.save or an open() for writing there): a crash "
                                          "while those bytes are written leaves half a file "
                                          "under the final name. Write only the temporary file, "
                                          "and let os.replace(temporary, path) put it in place.")
    if any(_same_file(target, path) for target in seen["remove"]):
        return Feedback(exercise, FAILED, "atomic_save removes the old checkpoint before the new "
                                          "one is in place: os.replace() overwrites in one step, "
                                          "so remove nothing first.")
    notes = []
    if leftovers:
        notes.append(f"Tidy up on failure too: the crash left {len(leftovers)} temporary "
                     "file(s) behind.")
    if any(kind == "rename" for kind, _, dst in seen["rename"] if _same_file(dst, path)):
        notes.append("os.rename overwrites in one step on Linux and macOS, but refuses to on "
                     "Windows; os.replace does it everywhere.")
    return Feedback(exercise, PASSED, "a crash mid-save or at the rename leaves the old "
                                      "checkpoint intact, and a good save replaces it."
                    + "".join(" " + note for note in notes))


def _still_version_1(exercise: str, path: str, crash: str, advice: str) -> Feedback | None:
    if not os.path.exists(path):
        return Feedback(exercise, FAILED, f"after {crash} there is no checkpoint at all under "
                                          f"the final name. {advice}")
    try:
        survived = torch.load(path, weights_only=True)
    except Exception as error:
        return Feedback(exercise, FAILED, f"after {crash} the file no longer loads "
                                          f"({type(error).__name__}). {advice}")
    if survived != {"version": 1}:
        return Feedback(exercise, FAILED, f"after {crash} the file holds {survived!r}, "
                                          "expected the old {'version': 1}.")
    return None


def _temporary_elsewhere(exercise: str, seen: dict, path: str) -> Feedback | None:
    """Failed when the temporary file was written in another folder than ``path``."""
    home = os.path.dirname(os.path.abspath(path))
    sources = [src for _, src, dst in seen["rename"] if _same_file(dst, path)]
    folders = {_folder_of(src) for src in sources} | {
        _folder_of(target) for target in seen["save"]
        if target is not None and not _same_file(target, path)}
    away = sorted(f for f in folders if f is not None and f != home)
    if not away:
        return None
    return Feedback(exercise, FAILED,
                    "the temporary file was written in another folder than the checkpoint "
                    "(e.g. the system's temp folder). A rename is one atomic step only within "
                    "one file system; across two, os.replace fails, and a move copies, which a "
                    "crash can cut in half. Make it next to `path`: "
                    "`tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False)`, or "
                    "the name `f'{path}.tmp'`.")
