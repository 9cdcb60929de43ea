"""labchecks.gpu_stand_in: a CPU-only grader runs a learner's code as a machine with two GPUs
would, sees which GPU it named, and leaves nothing patched behind."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from labchecks.gpu_stand_in import STAND_IN_GPU, as_if_on_gpu, gpu_placement_problem


def test_what_goes_to_a_gpu_lands_on_meta_and_the_gpu_named_is_recorded():
    batch = torch.ones(2, 3)
    with as_if_on_gpu() as run:
        moved = batch.to(STAND_IN_GPU, non_blocking=True)
        built = nn.Linear(3, 2, device=STAND_IN_GPU)
        pinned = batch.pin_memory()
    assert moved.device.type == "meta" and built.weight.device.type == "meta"
    assert pinned is batch
    assert run.named == [STAND_IN_GPU] * 3 and run.elsewhere() == []


def test_a_cuda_branch_and_a_device_without_its_index_are_named():
    def cuda_branch(batch, device):
        return batch.cuda() if torch.cuda.is_available() else batch.to(device)

    def type_only(batch, device):
        return batch.to(device.type)

    assert "`.cuda()` sends it to the current GPU (cuda:0)" in gpu_placement_problem(
        "Exercise", cuda_branch, torch.ones(2), STAND_IN_GPU).message
    assert "'cuda' without the index" in gpu_placement_problem(
        "Exercise", type_only, torch.ones(2), STAND_IN_GPU).message
    assert gpu_placement_problem("Exercise", lambda b, d: b.to(d), torch.ones(2),
                                 STAND_IN_GPU) is None


def test_synchronize_is_counted_and_code_that_needs_a_real_gpu_judges_nothing():
    def streams(batch, device):
        torch.cuda.synchronize()
        torch.cuda.current_stream().synchronize()
        torch.cuda.Stream()  # needs a real GPU: raises on a CPU-only build
        return batch.cuda()

    with as_if_on_gpu() as run:
        torch.cuda.synchronize()
        torch.cuda.current_stream().synchronize()
    assert run.syncs == 2
    if not torch.cuda.is_available():
        assert gpu_placement_problem("Exercise", streams, torch.ones(2), STAND_IN_GPU) is None


def test_nothing_stays_patched_and_no_warning_leaks():
    available, load = torch.cuda.is_available(), torch.load
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with as_if_on_gpu():
            model = nn.Linear(2, 2).to(STAND_IN_GPU)
            model.load_state_dict(nn.Linear(2, 2).state_dict())  # "copying ... to meta" warns
    assert not caught
    assert torch.cuda.is_available() == available and torch.load is load
    assert torch.ones(1).to("cpu").device.type == "cpu"
