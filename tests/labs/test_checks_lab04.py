"""labchecks, lab 04: the device-agnostic script passes; each planted device bug, left in
alone, fails with its own diagnosis; an exercise still raising NotImplementedError is reported
as not attempted. Run on the CPU with meta as the second device, as on a CPU-only machine."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch import nn

from labchecks import lab04 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED

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


def model_class(init, noise):
    """build_model for exercise 1 from an __init__ body and a noise function of x."""

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            init(self)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            for block in self.blocks:
                x = torch.relu(block(x)) * self.scale
            if self.training:
                x = noise(x)
            return self.head(x)

    return lambda: Model()


def init_buffer(self):
    self.blocks = nn.ModuleList([nn.Linear(4, 16), nn.Linear(16, 16)])
    self.register_buffer("scale", torch.full((16,), 0.5))


def init_float(self):
    self.blocks = nn.ModuleList([nn.Linear(4, 16), nn.Linear(16, 16)])
    self.scale = 0.5  # a Python number multiplies a tensor on any device


def init_sequential(self):
    self.blocks = nn.Sequential(nn.Linear(4, 16), nn.Linear(16, 16))
    self.register_buffer("scale", torch.tensor(0.5), persistent=False)


def init_frozen_parameter(self):
    self.blocks = nn.ModuleList(nn.Linear(n, 16) for n in (4, 16))
    self.scale = nn.Parameter(torch.full((16,), 0.5), requires_grad=False)


def init_scale_changed(self):
    init_buffer(self)
    self.register_buffer("scale", torch.full((16,), 1.0))


def init_outer_device(self):
    init_buffer(self)


RIGHT_MODELS = {
    "buffer + randn_like": model_class(init_buffer, lambda x: x + 0.1 * torch.randn_like(x)),
    "float scale + device=x.device": model_class(
        init_float, lambda x: x + 0.1 * torch.randn(x.shape, device=x.device)),
    "Sequential + randn_like times": model_class(
        init_sequential, lambda x: x + torch.randn_like(x) * 0.1),
    "frozen Parameter + add alpha": model_class(
        init_frozen_parameter, lambda x: x.add(torch.randn_like(x), alpha=0.1)),
    "buffer + normal(0, 0.1)": model_class(
        init_buffer, lambda x: x + torch.normal(0.0, 0.1, x.shape, device=x.device)),
    "buffer + randn(*shape, dtype, device)": model_class(
        init_buffer, lambda x: x + 0.1 * torch.randn(*x.shape, dtype=x.dtype, device=x.device)),
    "float + new_empty().normal_": model_class(
        init_float, lambda x: x + x.new_empty(x.shape).normal_(0, 0.1)),
}


@pytest.mark.parametrize("build", RIGHT_MODELS.values(), ids=RIGHT_MODELS)
def test_model_accepts_every_correct_style(build):
    _status(checks.check_device_agnostic_model(build, DEVICE, OTHER), PASSED)


def build_with_outer_device():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            init_buffer(self)
            self.head = nn.Linear(16, 3)

        def forward(self, x):
            for block in self.blocks:
                x = torch.relu(block(x)) * self.scale
            if self.training:
                x = x + 0.1 * torch.randn(x.shape, device=device)  # the notebook's `device`
            return self.head(x)

    return Model()


device = DEVICE  # a notebook variable, as in the lab's setup cell

WRONG_MODELS = {
    "scale changed": (model_class(init_scale_changed, lambda x: x + 0.1 * torch.randn_like(x)),
                      ["keep the scale of 0.5"]),
    "noise doubled": (model_class(init_buffer, lambda x: x + 0.2 * torch.randn_like(x)),
                      ["the noise changed", "0.1 * torch.randn_like(x)"]),
    "uniform noise": (model_class(init_buffer, lambda x: x + 0.1 * torch.rand_like(x)),
                      ["the noise changed"]),
    "noise dropped": (model_class(init_buffer, lambda x: x), ["you removed the noise"]),
    "outer device name": (build_with_outer_device, ["`device=device` reads the notebook's",
                                                    "randn_like"]),
    "noise without device": (model_class(init_buffer, lambda x: x + 0.1 * torch.randn(x.shape)),
                             ["made inside forward without `device=`"]),
    "wrong layers": (lambda: nn.Sequential(nn.Linear(4, 3)), ["keep the script's layers"]),
}


@pytest.mark.parametrize(("build", "phrases"), WRONG_MODELS.values(), ids=WRONG_MODELS)
def test_model_names_the_misconception_of_each_wrong_answer(build, phrases):
    assert_one_line(_status(checks.check_device_agnostic_model(build, DEVICE, OTHER),
                            FAILED, *phrases))


def test_an_outer_device_name_is_not_blamed_on_a_missing_device_argument():
    feedback = checks.check_device_agnostic_model(build_with_outer_device, DEVICE, OTHER)
    assert "without `device=`" not in feedback.message


def test_the_noise_check_leaves_the_learners_random_numbers_alone():
    from labchecks.lab04 import _what_changed

    model = RIGHT_MODELS["buffer + randn_like"]()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert _what_changed(model) == ""
    assert torch.equal(torch.rand(3), expected)


def test_model_passes_the_device_agnostic_solution():
    _status(checks.check_device_agnostic_model(make_build_model(), DEVICE, OTHER),
            PASSED, "meta")


def test_model_names_the_plain_tensor_attribute():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("attribute"),
                                                          DEVICE, OTHER), FAILED,
                       "`self.scale` is a plain tensor attribute", "register_buffer")
    assert "ModuleList" not in feedback.message


def test_model_names_the_python_list_of_layers_once():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("list"),
                                                          DEVICE, OTHER), FAILED,
                       "`self.blocks` is a Python list of layers", "nn.ModuleList")
    assert feedback.message.count("self.blocks") == 1
    assert "register_buffer" not in feedback.message


def test_model_with_both_init_bugs_names_both():
    class Both(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = [nn.Linear(4, 4)]
            self.scale = torch.ones(4)

    _status(checks.check_device_agnostic_model(Both, DEVICE, OTHER), FAILED,
            "2 problem(s)", "self.scale", "self.blocks")


def test_model_names_the_tensor_made_in_forward_without_device():
    feedback = _status(checks.check_device_agnostic_model(make_build_model("noise"),
                                                          DEVICE, OTHER), FAILED,
                       "made inside forward without `device=`", "randn_like")
    assert "is not on the expected device" in feedback.message  # PyTorch's words, quoted


def test_model_names_a_hard_coded_cuda_in_forward():
    _status(checks.check_device_agnostic_model(make_build_model("cuda-noise"), DEVICE, OTHER),
            FAILED, "hard-coded 'cuda'", "`.to(device)`")


def test_a_mismatch_naming_an_accelerator_nobody_asked_for_is_a_hard_coded_device():
    """On a GPU machine `torch.randn(..., device="cuda")` in a CPU run fails with a mismatch."""
    from labchecks.lab04 import _names_a_third_device

    gpu_message = RuntimeError("Expected all tensors to be on the same device, but got other "
                               "is on cuda:0, different from other tensors on cpu")
    assert _names_a_third_device(gpu_message, torch.device("cpu"))
    assert _names_a_third_device(gpu_message, torch.device("meta"))
    assert not _names_a_third_device(gpu_message, torch.device("cuda:0"))


def test_model_that_dropped_the_noise_is_told_to_keep_it():
    _status(checks.check_device_agnostic_model(make_build_model("no-noise"), DEVICE, OTHER),
            FAILED, "you removed the noise")


@pytest.mark.parametrize("bug", ["stub-init", "stub-forward"])
def test_model_stub_is_not_attempted(bug):
    _status(checks.check_device_agnostic_model(make_build_model(bug), DEVICE, OTHER),
            NOT_ATTEMPTED)


def test_model_stub_factory_is_not_attempted():
    _status(checks.check_device_agnostic_model(stub, DEVICE, OTHER), NOT_ATTEMPTED)


def test_model_given_an_instance_asks_for_the_function():
    _status(checks.check_device_agnostic_model(nn.Linear(4, 3), DEVICE, OTHER), FAILED,
            "without calling it")


def test_model_with_wrong_output_shape_is_caught():
    _status(checks.check_device_agnostic_model(lambda: nn.Linear(4, 2), DEVICE, OTHER),
            FAILED, "shape (batch, 3)")


# --- exercise 2: the setup ---------------------------------------------------------------


WEIGHTS = [1.0, 2.0, 1.0]


def good_build_training(model, device):
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)


def test_setup_passes_the_device_agnostic_solution():
    _status(checks.check_training_setup(good_build_training, DEVICE, OTHER), PASSED)


def test_setup_names_the_bare_cuda():
    def build_training(model, device):
        model = model.cuda()
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS, device=device))
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    feedback = _status(checks.check_training_setup(build_training, DEVICE, OTHER),
                       FAILED, "hard-coded 'cuda'")
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

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), FAILED,
            "ignores its `device` argument")


def test_setup_names_the_loss_weights_left_on_the_cpu():
    def build_training(model, device):
        model.to(device)
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS))
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), FAILED,
            "class weights are on cpu", "loss_fn.to(device)")


def test_setup_names_the_model_not_moved():
    def build_training(model, device):
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), FAILED,
            "the model is still on cpu", "in place")


def test_setup_names_the_optimizer_built_before_the_move():
    def build_training(model, device):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(device)  # cpu -> meta replaces the Parameter objects
        loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
        return model, loss_fn, optimizer

    _status(checks.check_training_setup(build_training, DEVICE, OTHER), FAILED,
            "Move the model first, then build the optimizer")


def test_setup_catches_changed_or_missing_class_weights():
    def changed(model, device):
        model.to(device)
        loss_fn = nn.CrossEntropyLoss(weight=torch.ones(3)).to(device)
        return model, loss_fn, torch.optim.SGD(model.parameters(), lr=0.1)

    def missing(model, device):
        model.to(device)
        return model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1)

    _status(checks.check_training_setup(changed, DEVICE, OTHER), FAILED, "do not change")
    _status(checks.check_training_setup(missing, DEVICE, OTHER), FAILED,
            "keep the class weights")


def test_setup_asks_for_a_triple():
    _status(checks.check_training_setup(lambda model, device: model, DEVICE, OTHER),
            FAILED, "return a triple")


def test_setup_stub_is_not_attempted():
    _status(checks.check_training_setup(stub, DEVICE, OTHER), NOT_ATTEMPTED)


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
    _status(checks.check_train_step(make_train_step(), DEVICE, OTHER), PASSED)


def test_train_step_names_the_inputs_not_moved():
    feedback = _status(checks.check_train_step(make_train_step(move_inputs=False), DEVICE,
                                               OTHER), FAILED,
                       "The inputs stay on the CPU", "inputs = inputs.to(device)")
    assert "targets stay" not in feedback.message


def test_train_step_names_inputs_moved_but_not_kept_as_inputs_not_moved():
    _status(checks.check_train_step(make_train_step(keep=False), DEVICE, OTHER), FAILED,
            "The inputs stay on the CPU", "Tensor.to returns a new tensor")


def test_train_step_names_the_targets_not_moved():
    feedback = _status(checks.check_train_step(make_train_step(move_targets=False), DEVICE,
                                               OTHER), FAILED,
                       "The targets stay on the CPU", "Moving the model never moves the data")
    assert "inputs stay" not in feedback.message


def test_train_step_of_the_script_names_both():
    _status(checks.check_train_step(make_train_step(False, False), DEVICE, OTHER), FAILED,
            "The inputs stay on the CPU", "The targets stay on the CPU")


def test_train_step_names_a_hard_coded_cuda():
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        return make_train_step()(model, loss_fn, optimizer, inputs.cuda(), targets.cuda(), device)

    _status(checks.check_train_step(train_step, DEVICE, OTHER), FAILED,
            "hard-coded 'cuda'")


def test_train_step_without_optimizer_step_is_caught():
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        return loss_fn(model(inputs.to(device)), targets.to(device)).detach()

    _status(checks.check_train_step(train_step, DEVICE, OTHER), FAILED,
            "weights did not change")


def test_train_step_stub_is_not_attempted():
    _status(checks.check_train_step(stub, DEVICE, OTHER), NOT_ATTEMPTED)


# --- exercise 4: predict -----------------------------------------------------------------


def make_predict(ending):
    def predict(model, inputs, device):
        probabilities = model(inputs.to(device)).softmax(dim=1)
        return ending(probabilities)

    return predict


def test_predict_passes_detach_cpu_numpy():
    _status(checks.check_predict(make_predict(lambda p: p.detach().cpu().numpy()), DEVICE,
                                 OTHER), PASSED)


def test_predict_passes_numpy_force():
    _status(checks.check_predict(make_predict(lambda p: p.numpy(force=True)), DEVICE, OTHER),
            PASSED)


def test_predict_names_numpy_on_a_device_tensor():
    feedback = _status(checks.check_predict(make_predict(lambda p: p.detach().numpy()), DEVICE,
                                            OTHER), FAILED,
                       "can't convert meta device type tensor to numpy", "main memory")
    assert "requires grad" not in feedback.message


def test_predict_names_numpy_on_a_tensor_that_requires_grad():
    _status(checks.check_predict(make_predict(lambda p: p.cpu().numpy()), DEVICE, OTHER),
            FAILED, "requires grad", ".detach()")


def test_predict_of_the_script_is_told_about_the_device_first():
    """The script's bare `.numpy()` fails twice on the CPU; the device is named first."""
    _status(checks.check_predict(make_predict(lambda p: p.numpy()), DEVICE, OTHER),
            FAILED, "can't convert meta device type tensor", ".detach().cpu().numpy()")


@pytest.mark.parametrize(("device", "other", "expected"), [
    ("cpu", "meta", ["meta", "cpu"]), ("cuda:0", "cuda:0", ["cuda:0", "cpu"]),
    ("mps:0", "mps:0", ["mps:0", "cpu"])])
def test_checks_run_on_the_accelerator_first_then_the_cpu(device, other, expected):
    from labchecks.lab04 import _devices

    assert [str(d) for d in _devices(device, other)] == expected


def test_predict_returning_a_tensor_is_told_to_return_numpy():
    _status(checks.check_predict(make_predict(lambda p: p.detach()), DEVICE, OTHER),
            FAILED, "return a NumPy array")


def test_predict_returning_other_numbers_is_caught():
    _status(checks.check_predict(make_predict(lambda p: np.zeros((5, 3), np.float32)), DEVICE,
                                 OTHER), FAILED, "class probabilities")


def test_predict_stub_is_not_attempted():
    _status(checks.check_predict(stub, DEVICE, OTHER), NOT_ATTEMPTED)


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


# --- answer tables for exercises 2-4 ------------------------------------------------------


def setup_in_place(model, device):
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_reassigned(model, device):
    model = model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS, device=device))
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_keyword(model, device):
    model.to(device=device)
    weight = torch.tensor([1.0, 2.0, 1.0]).to(device)
    return model, nn.CrossEntropyLoss(weight=weight), torch.optim.SGD(model.parameters(), lr=1.0)


def setup_str_device(model, device):
    model.to(str(device))
    loss_fn = nn.CrossEntropyLoss(weight=torch.as_tensor(WEIGHTS, device=str(device)))
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_torch_device(model, device):
    device = torch.device(device)
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(torch.tensor(WEIGHTS)).to(device)  # weight is positional
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_loss_first(model, device):
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS))
    loss_fn.to(device)
    model.to(device)
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


RIGHT_SETUPS = {f.__name__: f for f in (setup_in_place, setup_reassigned, setup_keyword,
                                        setup_str_device, setup_torch_device, setup_loss_first)}


def setup_overrides_device(model, device):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS)).to(device)
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_weight_moved_not_kept(model, device):
    model.to(device)
    weight = torch.tensor(WEIGHTS)
    weight.to(device)
    return model, nn.CrossEntropyLoss(weight=weight), torch.optim.SGD(model.parameters(), lr=1.0)


def setup_buffer_moved_not_kept(model, device):
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS))
    loss_fn.weight.to(device)  # a new tensor, thrown away; the buffer stays
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


def setup_cuda_weights(model, device):
    model.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS).cuda())
    return model, loss_fn, torch.optim.SGD(model.parameters(), lr=1.0)


WRONG_SETUPS = {
    "overrides device": (setup_overrides_device, ["sets `device = ...` itself"]),
    "weights moved, not kept": (setup_weight_moved_not_kept, ["class weights are on cpu"]),
    "buffer moved, not kept": (setup_buffer_moved_not_kept, ["loss_fn.to(device)"]),
    "cuda weights": (setup_cuda_weights, ["hard-coded 'cuda'"]),
}


@pytest.mark.parametrize("build", RIGHT_SETUPS.values(), ids=RIGHT_SETUPS)
def test_setup_accepts_every_correct_style(build):
    _status(checks.check_training_setup(build, DEVICE, OTHER), PASSED)


@pytest.mark.parametrize(("build", "phrases"), WRONG_SETUPS.values(), ids=WRONG_SETUPS)
def test_setup_names_the_misconception(build, phrases):
    assert_one_line(_status(checks.check_training_setup(build, DEVICE, OTHER), FAILED,
                            *phrases))


def test_an_overridden_device_is_not_blamed_on_a_missing_model_to():
    feedback = checks.check_training_setup(setup_overrides_device, DEVICE, OTHER)
    assert "Call `model.to(device)`" not in feedback.message


def step_with(move):
    def train_step(model, loss_fn, optimizer, inputs, targets, device):
        inputs, targets = move(inputs, targets, device)
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return train_step


def step_overrides_device(model, loss_fn, optimizer, inputs, targets, device):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return step_with(lambda i, t, d: (i.to(d), t.to(d)))(model, loss_fn, optimizer, inputs,
                                                          targets, device)


RIGHT_STEPS = {
    "tuple assignment": step_with(lambda i, t, d: (i.to(d), t.to(d))),
    "keyword": step_with(lambda i, t, d: (i.to(device=d), t.to(device=d))),
    "non_blocking": step_with(lambda i, t, d: (i.to(d, non_blocking=True),
                                               t.to(d, non_blocking=True))),
    "str device": step_with(lambda i, t, d: (i.to(str(d)), t.to(str(d)))),
    "comprehension": step_with(lambda i, t, d: tuple(x.to(d) for x in (i, t))),
    "like the model": step_with(lambda i, t, d: (i.to(d), t.to(i.to(d).device))),
}
WRONG_STEPS = {
    "overrides device": (step_overrides_device, ["sets `device = ...` itself"]),
    "targets moved, not kept": (step_with(lambda i, t, d: (i.to(d), (t.to(d), t)[1])),
                                ["The targets stay on the CPU"]),
    "targets cast to float": (step_with(lambda i, t, d: (i.to(d), t.to(d, torch.float32))),
                              ["on meta"]),
}


@pytest.mark.parametrize("step", RIGHT_STEPS.values(), ids=RIGHT_STEPS)
def test_train_step_accepts_every_correct_style(step):
    _status(checks.check_train_step(step, DEVICE, OTHER), PASSED)


@pytest.mark.parametrize(("step", "phrases"), WRONG_STEPS.values(), ids=WRONG_STEPS)
def test_train_step_names_the_misconception(step, phrases):
    assert_one_line(_status(checks.check_train_step(step, DEVICE, OTHER), FAILED,
                            *phrases))


def test_an_overridden_device_is_not_blamed_on_unmoved_inputs():
    feedback = checks.check_train_step(step_overrides_device, DEVICE, OTHER)
    assert "inputs stay" not in feedback.message


def predict_no_grad(model, inputs, device):
    with torch.no_grad():
        return model(inputs.to(device)).softmax(dim=1).cpu().numpy()


def predict_overrides_device(model, inputs, device):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return model(inputs.to(device)).softmax(dim=1).detach().cpu().numpy()


RIGHT_PREDICTS = {
    "detach cpu numpy": make_predict(lambda p: p.detach().cpu().numpy()),
    "numpy(force=True)": make_predict(lambda p: p.numpy(force=True)),
    "cpu detach numpy": make_predict(lambda p: p.cpu().detach().numpy()),
    "to('cpu')": make_predict(lambda p: p.detach().to("cpu").numpy()),
    "np.asarray": make_predict(lambda p: np.asarray(p.detach().cpu())),
    "no_grad": predict_no_grad,
}
WRONG_PREDICTS = {
    "overrides device": (predict_overrides_device, ["sets `device = ...` itself"]),
    "list of numbers": (make_predict(lambda p: [row.tolist() for row in p.detach().cpu()]),
                        ["return a NumPy array"]),
    "tolist": (make_predict(lambda p: p.detach().cpu().tolist()), ["return a NumPy array"]),
}


@pytest.mark.parametrize("predict", RIGHT_PREDICTS.values(), ids=RIGHT_PREDICTS)
def test_predict_accepts_every_correct_style(predict):
    _status(checks.check_predict(predict, DEVICE, OTHER), PASSED)


@pytest.mark.parametrize(("predict", "phrases"), WRONG_PREDICTS.values(), ids=WRONG_PREDICTS)
def test_predict_names_the_misconception(predict, phrases):
    assert_one_line(_status(checks.check_predict(predict, DEVICE, OTHER), FAILED,
                            *phrases))


@pytest.mark.parametrize("table", [RIGHT_MODELS, RIGHT_SETUPS, RIGHT_STEPS, RIGHT_PREDICTS],
                         ids=["exercise 1", "exercise 2", "exercise 3", "exercise 4"])
def test_every_exercise_has_at_least_six_differently_written_right_answers(table):
    assert len(table) >= 6
