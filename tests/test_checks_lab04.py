"""utils.checks, lab 04: the device-agnostic script passes; each planted device bug, left in
alone, fails with its own diagnosis; an exercise still raising NotImplementedError is reported
as not attempted. Run on the CPU with meta as the second device, as on a CPU-only machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import stub
from torch import nn

from utils import checks

DEVICE, OTHER = torch.device("cpu"), torch.device("meta")




# --- exercise 1: the model ---------------------------------------------------------------


def make_build_model(bug: str | None = None):
    """build_model for exercise 1: the solution, or the solution with one script bug left in."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if bug == "list":
                self.blocks = [nn.Linear(4, 16), nn.Linear(16, 16)]
            elif bug == "stub-init":
                raise NotImplementedError()
            else:
                self.blocks = nn.ModuleList([nn.Linear(4, 16), nn.Linear(16, 16)])
            if bug == "attribute":
                self.scale = torch.full((16,), 0.5)
            else:
                self.register_buffer("scale", torch.full((16,), 0.5))
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            for block in self.blocks:
                x = torch.relu(block(x)) * self.scale
            if self.training:
                if bug == "noise":
                    x = x + 0.1 * torch.randn(x.shape)
                elif bug == "stub-forward":
                    raise NotImplementedError()
                elif bug == "cuda-noise":
                    x = x + 0.1 * torch.randn(x.shape, device="cuda")
                elif bug != "no-noise":
                    x = x + 0.1 * torch.randn_like(x)
            return self.head(x)

    return lambda: Model()


def test_model_passes_the_device_agnostic_solution():
    _status(checks.check_device_agnostic_model(make_build_model(), DEVICE, OTHER),
            checks.PASSED, "meta")


def test_model_names_the_plain_tensor_attribute():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("attribute"),
                                                          DEVICE, OTHER), checks.FAILED,
                       "`self.scale` is a plain tensor attribute", "register_buffer")
    assert "ModuleList" not in feedback.message


def test_model_names_the_python_list_of_layers_once():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("list"),
                                                          DEVICE, OTHER), checks.FAILED,
                       "`self.blocks` is a Python list of layers", "nn.ModuleList")
    assert feedback.message.count("self.blocks") == 1
    assert "register_buffer" not in feedback.message


def test_model_with_both_init_bugs_names_both():
    class Both(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = [nn.Linear(4, 4)]
            self.scale = torch.ones(4)

    _status(checks.check_device_agnostic_model(Both, DEVICE, OTHER), checks.FAILED,
            "2 problem(s)", "self.scale", "self.blocks")


def test_model_names_the_tensor_made_in_forward_without_device():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("noise"),
                                                          DEVICE, OTHER), checks.FAILED,
                       "made inside forward without `device=`", "randn_like")
    assert "is not on the expected device" in feedback.message  # PyTorch's words, quoted


def test_model_names_a_hard_coded_cuda_in_forward():
    _status(checks.check_device_agnostic_model(make_build_model("cuda-noise"), DEVICE, OTHER),
            checks.FAILED, "hard-coded 'cuda'", "`.to(device)`")


def test_a_mismatch_naming_an_accelerator_nobody_asked_for_is_a_hard_coded_device():
    """On a GPU machine `torch.randn(..., device="cuda")` in a CPU run fails with a mismatch."""
    from utils.checks.lab04 import _names_a_third_device

    gpu_message = RuntimeError("Expected all tensors to be on the same device, but got other "
                               "is on cuda:0, different from other tensors on cpu")
    assert _names_a_third_device(gpu_message, torch.device("cpu"))
    assert _names_a_third_device(gpu_message, torch.device("meta"))
    assert not _names_a_third_device(gpu_message, torch.device("cuda:0"))


def test_model_that_dropped_the_noise_is_told_to_keep_it():
    _status(checks.check_device_agnostic_model(make_build_model("no-noise"), DEVICE, OTHER),
            checks.FAILED, "you removed the noise")


@pytest.mark.parametrize("bug", ["stub-init", "stub-forward"])
def test_model_stub_is_not_attempted(bug):
    _status(checks.check_device_agnostic_model(make_build_model(bug), DEVICE, OTHER),
            checks.NOT_ATTEMPTED)


def test_model_stub_factory_is_not_attempted():
    _status(checks.check_device_agnostic_model(stub, DEVICE, OTHER), checks.NOT_ATTEMPTED)


def test_model_given_an_instance_asks_for_the_function():
    _status(checks.check_device_agnostic_model(nn.Linear(4, 3), DEVICE, OTHER), checks.FAILED,
            "without calling it")


def test_model_with_wrong_output_shape_is_caught():
    _status(checks.check_device_agnostic_model(lambda: nn.Linear(4, 2), DEVICE, OTHER),
            checks.FAILED, "shape (batch, 3)")


# --- exercise 2: the setup ---------------------------------------------------------------


WEIGHTS = [1.0, 2.0, 1.0]


def good_build_training(model, device):
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)


def test_setup_passes_the_device_agnostic_solution():
    _status(checks.check_training_setup(good_build_training, DEVICE, OTHER), checks.PASSED)


def test_setup_names_the_bare_cuda():
    def build_training(model, device):
        model = model.cuda()
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS, device=device))
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    feedback = _status(checks.check_training_setup(build_training, DEVICE, OTHER),
                       checks.FAILED, "hard-coded 'cuda'")
    if not torch.cuda.is_available():  # PyTorch's own words, quoted: this build's, whichever
        with pytest.raises(Exception) as raised:  # noqa: B017 - each build raises its own type
            torch.ones(1).cuda()
        assert str(raised.value).splitlines()[0] in feedback.message


def test_setup_names_an_ignored_device_argument():
    """What a GPU machine sees for `.cuda()`: asked for one device, got the model on another."""
    def build_training(model, device):
        model.to(OTHER)  # a device fixed in the function, not the argument
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), checks.FAILED,
            "ignores its `device` argument")


def test_setup_names_the_loss_weights_left_on_the_cpu():
    def build_training(model, device):
        model.to(device)
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS))
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), checks.FAILED,
            "class weights are on cpu", "loss_fn.to(device)")


def test_setup_names_the_model_not_moved():
    def build_training(model, device):
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), checks.FAILED,
            "the model is still on cpu", "in place")


def test_setup_names_the_optimizer_built_before_the_move():
    def build_training(model, device):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(device)  # cpu -> meta replaces the Parameter objects
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
        return model, loss_fn, optimizer

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), checks.FAILED,
            "Move the model first, then build the optimizer")


def test_setup_catches_changed_or_missing_class_weights():
    def changed(model, device):
        model.to(device)
        loss_fn = nn.CrossEntropyLoss(weight=torch.ones(3)).to(device)
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    def missing(model, device):
        model.to(device)
        return model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(changed, DEVICE, OTHER), checks.FAILED, "do not change")
    _status(checks.check_training_setup(missing, DEVICE, OTHER), checks.FAILED,
            "keep the class weights")


def test_setup_asks_for_a_triple():
    _status(checks.check_training_setup(lambda model, device: model, DEVICE, OTHER),
            checks.FAILED, "return a triple")


def test_setup_stub_is_not_attempted():
    _status(checks.check_training_setup(stub, DEVICE, OTHER), checks.NOT_ATTEMPTED)


# --- exercise 3: the training step -------------------------------------------------------


def make_train_step(move_inputs: bool = True, move_targets: bool = True, keep: bool = True):
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        if move_inputs:
            if keep:
                inputs = inputs.to(device)
            else:
                inputs.to(device)  # the result is thrown away
        if move_targets:
            targets = targets.to(device)
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def test_train_step_passes_the_device_agnostic_solution():
    _status(checks.check_train_step(make_train_step(), DEVICE, OTHER), checks.PASSED)


def test_train_step_names_the_inputs_not_moved():
    feedback = _status(checks.check_train_step(make_train_step(move_inputs=False), DEVICE,
                                               OTHER), checks.FAILED,
                       "The inputs stay on the CPU", "inputs = inputs.to(device)")
    assert "targets stay" not in feedback.message


def test_train_step_names_inputs_moved_but_not_kept_as_inputs_not_moved():
    _status(checks.check_train_step(make_train_step(keep=False), DEVICE, OTHER), checks.FAILED,
            "The inputs stay on the CPU", "Tensor.to returns a new tensor")


def test_train_step_names_the_targets_not_moved():
    feedback = _status(checks.check_train_step(make_train_step(move_targets=False), DEVICE,
                                               OTHER), checks.FAILED,
                       "The targets stay on the CPU", "Moving the model never moves the data")
    assert "inputs stay" not in feedback.message


def test_train_step_of_the_script_names_both():
    _status(checks.check_train_step(make_train_step(False, False), DEVICE, OTHER), checks.FAILED,
            "The inputs stay on the CPU", "The targets stay on the CPU")


def test_train_step_names_a_hard_coded_cuda():
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        return make_train_step()(model, loss_fn, optimizer, inputs.cuda(), targets.cuda(), device)

    _status(checks.check_train_step(train_step, DEVICE, OTHER), checks.FAILED,
            "hard-coded 'cuda'")


def test_train_step_without_optimizer_step_is_caught():
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        return loss_fn(model(inputs.to(device)), targets.to(device)).detach()

    _status(checks.check_train_step(train_step, DEVICE, OTHER), checks.FAILED,
            "weights did not change")


def test_train_step_stub_is_not_attempted():
    _status(checks.check_train_step(stub, DEVICE, OTHER), checks.NOT_ATTEMPTED)


# --- exercise 4: predict -----------------------------------------------------------------


def make_predict(ending):
    def predict(model, inputs, device):
        probabilities = model(inputs.to(device)).softmax(dim=1)
        return ending(probabilities)

    return predict


def test_predict_passes_detach_cpu_numpy():
    _status(checks.check_predict(make_predict(lambda p: p.detach().cpu().numpy()), DEVICE,
                                 OTHER), checks.PASSED)


def test_predict_passes_numpy_force():
    _status(checks.check_predict(make_predict(lambda p: p.numpy(force=True)), DEVICE, OTHER),
            checks.PASSED)


def test_predict_names_numpy_on_a_device_tensor():
    feedback = _status(checks.check_predict(make_predict(lambda p: p.detach().numpy()), DEVICE,
                                            OTHER), checks.FAILED,
                       "can't convert meta device type tensor to numpy", "main memory")
    assert "requires grad" not in feedback.message


def test_predict_names_numpy_on_a_tensor_that_requires_grad():
    _status(checks.check_predict(make_predict(lambda p: p.cpu().numpy()), DEVICE, OTHER),
            checks.FAILED, "requires grad", ".detach()")


def test_predict_of_the_script_is_told_about_the_device_first():
    """The script's bare `.numpy()` fails twice on the CPU; the device is named first."""
    _status(checks.check_predict(make_predict(lambda p: p.numpy()), DEVICE, OTHER),
            checks.FAILED, "can't convert meta device type tensor", ".detach().cpu().numpy()")


@pytest.mark.parametrize(("device", "other", "expected"), [
    ("cpu", "meta", ["meta", "cpu"]), ("cuda:0", "cuda:0", ["cuda:0", "cpu"]),
    ("mps:0", "mps:0", ["mps:0", "cpu"])])
def test_checks_run_on_the_accelerator_first_then_the_cpu(device, other, expected):
    from utils.checks.lab04 import _devices

    assert [str(d) for d in _devices(device, other)] == expected


def test_predict_returning_a_tensor_is_told_to_return_numpy():
    _status(checks.check_predict(make_predict(lambda p: p.detach()), DEVICE, OTHER),
            checks.FAILED, "return a NumPy array")


def test_predict_returning_other_numbers_is_caught():
    _status(checks.check_predict(make_predict(lambda p: np.zeros((5, 3), np.float32)), DEVICE,
                                 OTHER), checks.FAILED, "class probabilities")


def test_predict_stub_is_not_attempted():
    _status(checks.check_predict(stub, DEVICE, OTHER), checks.NOT_ATTEMPTED)


def test_meta_raises_where_the_checks_rely_on_it():
    """The checks use meta only where it raises for real, as a GPU does."""
    on_meta = torch.randn(2, 4, device=OTHER)
    for operation in (lambda: on_meta * torch.ones(4), lambda: on_meta + torch.randn(2, 4),
                      lambda: nn.Linear(4, 3).to(OTHER)(torch.randn(2, 4)),
                      lambda: nn.CrossEntropyLoss()(on_meta[:, :3], torch.tensor([0, 1])),
                      lambda: nn.CrossEntropyLoss(weight=torch.ones(3))(
                          on_meta[:, :3], torch.tensor([0, 1], device=OTHER))):
        with pytest.raises(RuntimeError, match="is not on the expected device"):
            operation()
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        on_meta.numpy()
