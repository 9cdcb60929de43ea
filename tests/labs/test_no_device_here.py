"""Every form of "this device cannot be used here" is recognised, on every torch build.

`pip install torch` on Linux gives the CUDA build, also on machines without an NVIDIA GPU;
its `.cuda()` raises "Found no NVIDIA driver on your system", not the CPU-only build's
"Torch not compiled with CUDA enabled". utils.unusable_device recognises each of PyTorch's
forms, and the checks of labs 02 and 04 use it, so a learner's `.cuda()` gets the same
helpful diagnosis on every build. Each message is fed to them as PyTorch raises it, on a
machine made to lack that device (and, as a control, on one made to have it).
"""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from torch import nn

import utils
from labchecks import lab02, lab04
from labchecks.feedback import FAILED
from utils import devices

OTHER = torch.device("meta")
NVIDIA_URL = "http://www.nvidia.com/Download/index.aspx"

#: (exception PyTorch raises, the device type it says is missing), one per form. The texts are
#: PyTorch's (and the CUDA runtime's) as raised; the first is the CPU-only build's, the second
#: the CUDA build's on a machine without a driver (torch 2.14.1+cu130 and 2.15.0+cu132 here).
FORMS = [
    (AssertionError("Torch not compiled with CUDA enabled"), "cuda"),
    (RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
                  f"GPU and installed a driver from {NVIDIA_URL}"), "cuda"),
    (RuntimeError("The NVIDIA driver on your system is too old (found version 11040). Please "
                  "update your GPU driver by downloading and installing a new version from the "
                  f"URL: {NVIDIA_URL}"), "cuda"),
    (RuntimeError("CUDA error: CUDA driver version is insufficient for CUDA runtime version"),
     "cuda"),
    (RuntimeError("No CUDA GPUs are available"), "cuda"),
    (RuntimeError("CUDA error: no CUDA-capable device is detected"), "cuda"),
    (RuntimeError("CUDA driver initialization failed, you might not have a CUDA gpu."), "cuda"),
    (RuntimeError("No HIP GPUs are available"), "cuda"),
    (RuntimeError("PyTorch is not linked with support for cuda devices"), "cuda"),
    (RuntimeError("PyTorch is not linked with support for mps devices"), "mps"),
    (RuntimeError("The MPS backend is supported on MacOS 12.3+.Current OS version can be "
                  "queried using `sw_vers`"), "mps"),
    (RuntimeError("The MPS backend is supported on macOS 14.0+. Current OS version can be "
                  "queried using `sw_vers`"), "mps"),
    (RuntimeError("Cannot execute deviceSynchronize() without MPS backend."), "mps"),
    (NotImplementedError("Could not run 'aten::empty.memory_format' with arguments from the "
                         "'MPS' backend. This could be because the operator doesn't exist for "
                         "this backend"), "mps"),
    (AssertionError("Torch not compiled with XPU enabled"), "xpu"),
    (RuntimeError("No XPU devices are available."), "xpu"),
    (RuntimeError("Device pool initialization failed, you might not have an XPU device."), "xpu"),
]
IDS = [f"{kind}: {str(error)[:40]}" for error, kind in FORMS]


@pytest.fixture
def nothing_here(monkeypatch):
    """A machine with no usable cuda, mps or xpu device, whatever this torch is."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)


def raising(error: BaseException):
    def raise_it(*args, **kwargs):
        raise error
    return raise_it


@pytest.mark.parametrize(("error", "kind"), FORMS, ids=IDS)
def test_every_form_of_no_device_here_is_recognised(nothing_here, error, kind):
    assert utils.unusable_device(error) == kind
    assert utils.unusable_device(str(error)) == kind  # the message alone, as a check holds it


@pytest.mark.parametrize(("error", "kind"), FORMS, ids=IDS)
def test_a_device_this_machine_has_is_never_called_missing(monkeypatch, error, kind):
    """Asks torch first: on a machine where that device works, the error is about something else."""
    monkeypatch.setattr(devices, "_count", lambda device_type: 1)
    assert utils.unusable_device(error) is None


@pytest.mark.parametrize("message", [
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
    "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
    "name 'cuda' is not defined",
    "CUDA out of memory. Tried to allocate 2.00 GiB",
    "Cannot copy out of meta tensor; no data!",
    "Expected one of cpu, cuda, mps, xpu, meta device type at start of device string: gpu",
])
def test_other_errors_that_mention_a_device_are_not_no_device_here(nothing_here, message):
    assert utils.unusable_device(RuntimeError(message)) is None


# --- lab 02, exercise 2: `.cuda()` instead of `.to(device)` --------------------------------


@pytest.mark.parametrize(("error", "kind"), [f for f in FORMS if f[1] == "cuda"],
                         ids=[i for i, f in zip(IDS, FORMS, strict=True) if f[1] == "cuda"])
def test_lab02_cuda_shorthand_gets_the_to_device_advice_on_every_build(
        nothing_here, monkeypatch, error, kind):
    monkeypatch.setattr(torch.Tensor, "cuda", raising(error))  # what .cuda() raises here
    feedback = _status(lab02.check_prepare(lambda batch, device: batch.cuda(), OTHER),
                       FAILED, "use `.to(device)`")
    assert str(error).split(".")[0] in feedback.message  # PyTorch's own words, quoted


def test_lab02_cuda_shorthand_gets_the_to_device_advice_on_this_torch():
    """No mocks: whatever this build raises for `.cuda()` without a GPU."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: .cuda() works")
    _status(lab02.check_prepare(lambda batch, device: batch.cuda(), OTHER), FAILED,
            "use `.to(device)`")


# --- lab 04, exercise 2: a bare 'cuda' in build_training ---------------------------------


def build_training_with_cuda(model, device):
    model = model.cuda()
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0], device=device))
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)


@pytest.mark.parametrize(("error", "kind"), [f for f in FORMS if f[1] == "cuda"],
                         ids=[i for i, f in zip(IDS, FORMS, strict=True) if f[1] == "cuda"])
def test_lab04_bare_cuda_is_diagnosed_on_every_build(nothing_here, monkeypatch, error, kind):
    monkeypatch.setattr(nn.Module, "cuda", raising(error))
    feedback = _status(
        lab04.check_training_setup(build_training_with_cuda, torch.device("cpu"), OTHER),
        FAILED, "hard-coded 'cuda'")
    assert str(error).split(".")[0] in feedback.message


@pytest.mark.parametrize(("error", "kind"), [f for f in FORMS if f[1] != "cuda"],
                         ids=[i for i, f in zip(IDS, FORMS, strict=True) if f[1] != "cuda"])
def test_lab04_hard_coded_mps_or_xpu_is_diagnosed(nothing_here, monkeypatch, error, kind):
    monkeypatch.setattr(nn.Module, "cuda", raising(error))  # stands in for .to('mps'/'xpu')
    _status(lab04.check_training_setup(build_training_with_cuda, torch.device("cpu"), OTHER),
            FAILED, "hard-coded 'cuda'")


def test_lab04_bare_cuda_is_diagnosed_on_this_torch():
    """No mocks: whatever this build raises for `.cuda()` without a GPU."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: .cuda() works")
    _status(lab04.check_training_setup(build_training_with_cuda, torch.device("cpu"), OTHER),
            FAILED, "hard-coded 'cuda'")
