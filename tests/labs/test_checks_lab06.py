"""labchecks, lab 06: tables of differently written right answers that must pass, and of
wrong answers that must fail with the message naming their misconception; an exercise that
still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub

import utils
from labchecks import lab06
from labchecks import lab06 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED

# --- exercise 1: atomic_save ----------------------------------------------------------------


def good_atomic_save(obj, path):
    temporary = f"{path}.partial"
    try:
        torch.save(obj, temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def save_fsync(obj, path):
    temporary = f"{path}.tmp"
    try:
        with open(temporary, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def save_named_temporary(obj, path):
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(path) or ".", delete=False) as handle:
        try:
            torch.save(obj, handle)
        except BaseException:
            handle.close()
            os.remove(handle.name)
            raise
    os.replace(handle.name, path)


def save_mkstemp(obj, path):
    descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".pt")
    try:
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(obj, handle)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def save_with_suffix(obj, path):
    path = Path(path)
    temporary = path.with_suffix(".tmp")
    try:
        torch.save(obj, temporary)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def save_rename(obj, path):
    torch.save(obj, f"{path}.new")
    os.rename(f"{path}.new", path)  # atomic and overwriting on POSIX


def save_shutil_move(obj, path):
    temporary = os.path.join(os.path.dirname(path), ".checkpoint.tmp")
    torch.save(obj, temporary)
    shutil.move(temporary, path)


def save_with_utils(obj, path):
    utils.save_atomic(obj, path)


RIGHT_ATOMIC = {f.__name__: f for f in (
    good_atomic_save, save_fsync, save_named_temporary, save_mkstemp, save_with_suffix,
    save_rename, save_shutil_move, save_with_utils)}


def save_plain(obj, path):
    torch.save(obj, path)


def save_in_system_temp(obj, path):
    with tempfile.NamedTemporaryFile(delete=False) as handle:  # the system's temp folder
        torch.save(obj, handle)
    os.replace(handle.name, path)


def save_mkstemp_elsewhere(obj, path):
    descriptor, temporary = tempfile.mkstemp()
    os.close(descriptor)
    torch.save(obj, temporary)
    shutil.move(temporary, path)


def save_remove_then_rename(obj, path):
    temporary = f"{path}.tmp"
    torch.save(obj, temporary)
    if os.path.exists(path):
        os.remove(path)
    os.rename(temporary, path)


def save_never_replaces(obj, path):
    torch.save(obj, f"{path}.partial")
    if not os.path.exists(path):
        os.rename(f"{path}.partial", path)


def save_then_copy(obj, path):
    temporary = f"{path}.tmp"
    torch.save(obj, temporary)
    shutil.copyfile(temporary, path)
    os.remove(temporary)


def save_replace_first(obj, path):
    if os.path.exists(f"{path}.tmp"):
        os.replace(f"{path}.tmp", path)
    torch.save(obj, path)


WRONG_ATOMIC = {f.__name__: (f, phrases) for f, phrases in (
    (save_plain, ["wrote straight over the old checkpoint", "os.replace()"]),
    (save_in_system_temp, ["another folder", "NamedTemporaryFile(dir="]),
    (save_mkstemp_elsewhere, ["another folder"]),
    (save_remove_then_rename, ["no checkpoint at all", "os.replace(temporary, path)"]),
    (save_never_replaces, ["forget os.replace()"]),
    (save_then_copy, ["copies", "os.replace"]),
    (save_replace_first, ["wrote straight over the old checkpoint"]),
)}


@pytest.mark.parametrize("save", RIGHT_ATOMIC.values(), ids=RIGHT_ATOMIC)
def test_atomic_save_accepts_every_correct_way_to_make_and_swap_a_temporary_file(tmp_path, save):
    _status(checks.check_atomic_save(save, folder=tmp_path), PASSED)


@pytest.mark.parametrize(("save", "phrases"), WRONG_ATOMIC.values(), ids=WRONG_ATOMIC)
def test_atomic_save_names_the_misconception(tmp_path, save, phrases):
    assert_one_line(_status(checks.check_atomic_save(save, folder=tmp_path), FAILED,
                            *phrases))


def test_atomic_save_notes_leftover_temporary_files(tmp_path):
    def leaves_litter(obj, path):
        torch.save(obj, f"{path}.partial")
        os.replace(f"{path}.partial", path)

    _status(checks.check_atomic_save(leaves_litter, folder=tmp_path), PASSED, "Tidy up")


def test_atomic_save_with_os_rename_is_told_about_windows(tmp_path):
    _status(checks.check_atomic_save(save_rename, folder=tmp_path), PASSED, "Windows")


def test_atomic_save_leaves_no_files_of_its_own_in_the_system_temp_folder(tmp_path):
    before = set(os.listdir(tempfile.gettempdir()))
    checks.check_atomic_save(good_atomic_save, folder=tmp_path)
    assert set(os.listdir(tempfile.gettempdir())) - before <= {tmp_path.name}


def test_atomic_save_stub_is_not_attempted(tmp_path):
    _status(checks.check_atomic_save(stub, folder=tmp_path), NOT_ATTEMPTED)


# --- exercises 2 and 3: save_checkpoint and load_checkpoint ---------------------------------


def rng_states():
    states = {"cpu": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng(states, skip=""):
    if skip != "cpu":
        torch.set_rng_state(states["cpu"])
    if skip != "python":
        random.setstate(states["python"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def make_save_and_load(skip: str = "", epoch_offset: int = 0, save=good_atomic_save,
                       weights_only: bool = True):
    """A save/load pair that restores everything except ``skip``."""

    def save_checkpoint(path, model, optimizer, scheduler, epoch):
        checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(), "epoch": epoch, "rng": rng_states()}
        save(checkpoint, path)

    def load_checkpoint(path, model, optimizer, scheduler, device):
        checkpoint = torch.load(path, map_location="cpu", weights_only=weights_only)
        if skip != "model":
            model.load_state_dict(checkpoint["model"])
        if skip != "optimizer":
            optimizer.load_state_dict(checkpoint["optimizer"])
        if skip != "scheduler":
            scheduler.load_state_dict(checkpoint["scheduler"])
        restore_rng(checkpoint["rng"], skip)
        return checkpoint["epoch"] + epoch_offset

    return save_checkpoint, load_checkpoint


def flat_pair():
    def save(path, model, optimizer, scheduler, epoch):
        utils.save_atomic({"model_state": model.state_dict(),
                           "optimizer_state": optimizer.state_dict(),
                           "scheduler_state": scheduler.state_dict(), "epochs_done": epoch,
                           "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()},
                          path)

    def load(path, model, optimizer, scheduler, device):
        saved = torch.load(path)  # weights_only=True is the default
        model.load_state_dict(saved["model_state"])
        optimizer.load_state_dict(saved["optimizer_state"])
        scheduler.load_state_dict(saved["scheduler_state"])
        torch.set_rng_state(saved["torch_rng"])
        random.setstate(saved["python_rng"])
        return saved["epochs_done"]

    return save, load


def tuple_pair():
    def save(path, model, optimizer, scheduler, epoch):
        parts = (model.state_dict(), optimizer.state_dict(), scheduler.state_dict(), epoch,
                 torch.get_rng_state(), random.getstate())
        save_named_temporary(parts, path)

    def load(path, model, optimizer, scheduler, device):
        model_sd, optimizer_sd, scheduler_sd, epoch, cpu_rng, python_rng = torch.load(
            path, map_location="cpu")
        for thing, state in ((model, model_sd), (optimizer, optimizer_sd),
                             (scheduler, scheduler_sd)):
            thing.load_state_dict(state)
        torch.set_rng_state(cpu_rng)
        random.setstate(python_rng)
        return epoch

    return save, load


def map_to_device_pair():
    def save(path, model, optimizer, scheduler, epoch):
        good_atomic_save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "scheduler": scheduler.state_dict(), "epoch": epoch,
                          "rng": [torch.get_rng_state(), list(random.getstate())]}, path)

    def load(path, model, optimizer, scheduler, device):
        saved = torch.load(path, map_location=device, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        torch.set_rng_state(saved["rng"][0].cpu())
        version, state, gauss = saved["rng"][1]
        random.setstate((version, tuple(state), gauss))
        return int(saved["epoch"])

    return save, load


def seeded_pair():
    """Reseeding every generator from the epoch is a valid alternative to saving them."""

    def save(path, model, optimizer, scheduler, epoch):
        save_fsync({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "epoch": epoch,
                    "rng": rng_states()}, path)

    def load(path, model, optimizer, scheduler, device):
        with open(path, "rb") as handle:
            saved = torch.load(handle, map_location=torch.device("cpu"))
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        restore_rng(saved["rng"])
        return saved["epoch"]

    return save, load


RIGHT_RESUME = {
    "nested dict, temp + replace": make_save_and_load(),
    "flat dict, utils.save_atomic": flat_pair(),
    "tuple, NamedTemporaryFile": tuple_pair(),
    "map_location=device, state.cpu()": map_to_device_pair(),
    "open handle, fsync": seeded_pair(),
    "Path.with_suffix save": make_save_and_load(save=save_with_suffix),
}


def whole_objects_pair(weights_only):
    def save(path, model, optimizer, scheduler, epoch):
        good_atomic_save({"model": model, "optimizer": optimizer, "scheduler": scheduler,
                          "epoch": epoch, "rng": rng_states()}, path)

    def load(path, model, optimizer, scheduler, device):
        saved = torch.load(path, map_location="cpu", weights_only=weights_only)
        model.load_state_dict(saved["model"].state_dict())
        optimizer.load_state_dict(saved["optimizer"].state_dict())
        scheduler.load_state_dict(saved["scheduler"].state_dict())
        restore_rng(saved["rng"])
        return saved["epoch"]

    return save, load


def returns_nothing_pair():
    save, load = make_save_and_load()
    return save, lambda *args: (load(*args), None)[1]


WRONG_RESUME = {
    "model not restored": (make_save_and_load(skip="model"), ["model's weights"]),
    "optimizer not restored": (make_save_and_load(skip="optimizer"),
                               ["momentum buffers restart"]),
    "scheduler not restored": (make_save_and_load(skip="scheduler"),
                               ["learning-rate schedule restarted"]),
    "CPU generator not restored": (make_save_and_load(skip="cpu"),
                                   ["the CPU's (shuffling) was not restored",
                                    "torch.get_rng_state()"]),
    "Python's random not restored": (make_save_and_load(skip="python"),
                                     ["Python's `random`", "random.getstate()"]),
    "epoch off by one": (make_save_and_load(epoch_offset=1),
                         ["should return 2", "number of epochs finished"]),
    "returns nothing": (returns_nothing_pair(), ["returned None"]),
    "weights_only=False": (make_save_and_load(weights_only=False), ["weights_only=False"]),
    "whole objects, weights_only=False": (whole_objects_pair(False), ["weights_only=False"]),
    "whole objects, safe load": (whole_objects_pair(True),
                                 ["safe loader refused your checkpoint", "state_dict()"]),
    "plain torch.save": (make_save_and_load(save=save_plain),
                         ["writes straight into `path`", "atomic_save"]),
}


@pytest.mark.parametrize(("save", "load"), RIGHT_RESUME.values(), ids=RIGHT_RESUME)
def test_resume_accepts_every_correct_style(tmp_path, save, load):
    _status(checks.check_resume(save, load, "cpu", folder=tmp_path), PASSED, "exactly")


@pytest.mark.parametrize(("pair", "phrases"), WRONG_RESUME.values(), ids=WRONG_RESUME)
def test_resume_names_the_misconception(tmp_path, pair, phrases):
    save, load = pair
    assert_one_line(_status(checks.check_resume(save, load, "cpu", folder=tmp_path),
                            FAILED, *phrases))


def test_resume_stubs_are_not_attempted(tmp_path):
    _status(checks.check_resume(stub, stub, "cpu", folder=tmp_path), NOT_ATTEMPTED)


def test_resume_leaves_the_learners_python_random_alone(tmp_path):
    random.seed(7)
    expected = random.random()
    random.seed(7)
    checks.check_resume(*make_save_and_load(), "cpu", folder=tmp_path)
    assert random.random() == expected


def test_training_harness_is_deterministic_on_the_cpu():
    runs = []
    for _ in range(2):
        random.seed(0)
        runs.append(checks.train_epoch(*checks.tiny_training("cpu")))
    assert runs[0] == runs[1]


def test_training_harness_draws_from_pythons_random():
    losses = []
    for seed in (0, 1):
        random.seed(seed)
        losses.append(checks.train_epoch(*checks.tiny_training("cpu")))
    assert losses[0] != losses[1]


@pytest.mark.parametrize(("device", "getter"), [
    ("mps", torch.mps.get_rng_state), ("cpu", None), ("cuda:0", "cuda"), ("xpu:0", "xpu")])
def test_the_resume_check_reads_the_generator_of_the_device_in_use(device, getter):
    found = lab06.generators(torch.device(device))
    names = [name for name, _, _ in found]
    assert names[:2] == ["the CPU's (shuffling)", "Python's `random` (the sign flips)"]
    if getter is None:
        assert len(found) == 2
    elif callable(getter):  # MPS: torch.mps.get_rng_state itself, as a Mac calls it
        assert found[2][1] is getter and "torch.mps.get_rng_state()" in found[2][2]
    else:
        assert getter.upper() in names[2] and f"torch.{getter}.get_rng_state_all()" in found[2][2]


@pytest.mark.parametrize("table", [RIGHT_ATOMIC, RIGHT_RESUME], ids=["exercise 1", "exercises 2-3"])
def test_every_exercise_has_at_least_six_differently_written_right_answers(table):
    assert len(table) >= 6


def test_a_rename_across_file_systems_is_explained(tmp_path):
    import errno
    from unittest import mock

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link", str(src))

    with mock.patch("os.replace", cross_device):
        feedback = checks.check_atomic_save(save_in_system_temp, folder=tmp_path)
    assert_one_line(_status(feedback, FAILED, "another file system",
                            "NamedTemporaryFile(dir="))
