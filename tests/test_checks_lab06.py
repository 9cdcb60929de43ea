"""utils.checks, lab 06: right answers pass, each known wrong answer gets its own diagnosis,
and an exercise that still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import stub

from utils import checks


def good_atomic_save(obj, path):
    import os

    temporary = f"{path}.partial"
    try:
        torch.save(obj, temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def test_atomic_save_passes_temp_file_then_replace(tmp_path):
    _status(checks.check_atomic_save(good_atomic_save, folder=tmp_path), checks.PASSED)


def test_atomic_save_catches_writing_straight_over_the_old_file(tmp_path):
    _status(checks.check_atomic_save(lambda obj, path: torch.save(obj, path), folder=tmp_path),
            checks.FAILED, "wrote straight over the old checkpoint", "os.replace()")


def test_atomic_save_catches_a_missing_replace(tmp_path):
    def never_replaces(obj, path):
        import os

        torch.save(obj, f"{path}.partial")
        if not os.path.exists(path):
            os.rename(f"{path}.partial", path)

    _status(checks.check_atomic_save(never_replaces, folder=tmp_path), checks.FAILED,
            "forget os.replace()")


def test_atomic_save_notes_leftover_temporary_files(tmp_path):
    def leaves_litter(obj, path):
        import os

        torch.save(obj, f"{path}.partial")
        os.replace(f"{path}.partial", path)

    _status(checks.check_atomic_save(leaves_litter, folder=tmp_path), checks.PASSED, "Tidy up")


def test_atomic_save_stub_is_not_attempted(tmp_path):
    _status(checks.check_atomic_save(stub, folder=tmp_path), checks.NOT_ATTEMPTED)


PARTS = ("model", "optimizer", "scheduler", "rng")


def make_save_and_load(skip: str = "", epoch_offset: int = 0):
    """A save/load pair that restores everything except ``skip``."""

    def save(path, model, optimizer, scheduler, epoch):
        checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(), "epoch": epoch,
                      "rng": torch.get_rng_state()}
        good_atomic_save(checkpoint, path)

    def load(path, model, optimizer, scheduler, device):
        checkpoint = torch.load(path, map_location=device, weights_only=True)
        if skip != "model":
            model.load_state_dict(checkpoint["model"])
        if skip != "optimizer":
            optimizer.load_state_dict(checkpoint["optimizer"])
        if skip != "scheduler":
            scheduler.load_state_dict(checkpoint["scheduler"])
        if skip != "rng":
            torch.set_rng_state(checkpoint["rng"])
        return checkpoint["epoch"] + epoch_offset

    return save, load


def test_resume_passes_when_everything_is_restored(tmp_path):
    save, load = make_save_and_load()
    _status(checks.check_resume(save, load, "cpu", folder=tmp_path), checks.PASSED, "exactly")


@pytest.mark.parametrize(
    ("skip", "diagnosis"),
    [("model", "model's weights"), ("optimizer", "momentum buffers restart"),
     ("scheduler", "learning-rate schedule restarted"), ("rng", "random number generator")],
)
def test_resume_names_the_piece_that_was_not_restored(tmp_path, skip, diagnosis):
    save, load = make_save_and_load(skip=skip)
    _status(checks.check_resume(save, load, "cpu", folder=tmp_path), checks.FAILED, diagnosis)


def test_resume_catches_an_off_by_one_epoch(tmp_path):
    save, load = make_save_and_load(epoch_offset=1)
    _status(checks.check_resume(save, load, "cpu", folder=tmp_path), checks.FAILED,
            "should return 2")


def test_resume_stubs_are_not_attempted(tmp_path):
    _status(checks.check_resume(stub, stub, "cpu", folder=tmp_path), checks.NOT_ATTEMPTED)


def test_training_harness_is_deterministic_on_the_cpu():
    first = [checks.train_epoch(*checks.tiny_training("cpu")) for _ in range(1)]
    second = [checks.train_epoch(*checks.tiny_training("cpu")) for _ in range(1)]
    assert first == second
