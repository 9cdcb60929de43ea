"""utils.checks, lab 02: right answers pass, each known wrong answer gets its own diagnosis,
and an exercise that still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import stub
from torch import nn

from utils import checks

OTHER = torch.device("meta")  # the second device on a CPU-only machine




# --- exercise 1: where is it now? ---------------------------------------------------------


def test_where_is_it_now_passes_cpu():
    _status(checks.check_where_is_it_now(lambda: "cpu", OTHER), checks.PASSED)


@pytest.mark.parametrize("answer", ["meta", "cuda", "cuda:0", "mps"])
def test_where_is_it_now_names_the_moves_in_place_misconception(answer):
    _status(checks.check_where_is_it_now(lambda: answer, OTHER), checks.FAILED,
            "never changes the tensor you call it on")


@pytest.mark.parametrize("answer", ["CPU", "cpu:0", " cpu "])
def test_where_is_it_now_accepts_any_spelling_of_the_cpu(answer):
    _status(checks.check_where_is_it_now(lambda: answer, OTHER), checks.PASSED)


def test_where_is_it_now_rejects_a_non_device():
    _status(checks.check_where_is_it_now(lambda: "gpu please", OTHER), checks.FAILED,
            "is not a device name")


def test_where_is_it_now_reports_a_stub_as_not_attempted():
    _status(checks.check_where_is_it_now(stub, OTHER), checks.NOT_ATTEMPTED)


# --- exercise 2: prepare -------------------------------------------------------------------


def test_prepare_passes_the_reassigning_version():
    def prepare(batch, device):
        batch = batch.to(device)
        return batch

    _status(checks.check_prepare(prepare, OTHER), checks.PASSED)


def test_prepare_names_the_result_not_kept_misconception():
    def prepare(batch, device):
        batch.to(device)
        return batch

    _status(checks.check_prepare(prepare, OTHER), checks.FAILED,
            "You called `batch.to(device)` but kept using `batch`")


def test_prepare_catches_a_changed_dtype():
    _status(checks.check_prepare(lambda batch, device: batch.to(device, torch.float16), OTHER),
            checks.FAILED, "dtype changed")


def test_prepare_catches_a_needless_copy():
    _status(checks.check_prepare(lambda batch, device: batch.to(device, copy=True), OTHER),
            checks.FAILED, "Did you use copy=True")


def test_prepare_catches_an_ignored_device_argument():
    _status(checks.check_prepare(lambda batch, device: batch.to(OTHER), OTHER), checks.FAILED,
            "use the `device` argument")


def test_prepare_with_cuda_shorthand_is_told_to_use_to_device():
    _status(checks.check_prepare(lambda batch, device: batch.cuda(), OTHER), checks.FAILED,
            "use `.to(device)`")


def test_prepare_catches_a_non_tensor_result():
    _status(checks.check_prepare(lambda batch, device: None, OTHER), checks.FAILED,
            "not a tensor")


def test_prepare_reports_the_learners_own_error_without_crashing():
    def prepare(batch, device):
        return batch.to(devise)  # noqa: F821 - the typo is the point

    _status(checks.check_prepare(prepare, OTHER), checks.FAILED, "NameError")


def test_prepare_reports_a_stub_as_not_attempted():
    _status(checks.check_prepare(stub, OTHER), checks.NOT_ATTEMPTED)


def test_a_check_given_the_result_instead_of_the_function_says_so():
    _status(checks.check_prepare(torch.ones(2), OTHER), checks.FAILED, "without calling it")


# --- exercise 3: is or is not --------------------------------------------------------------


RIGHT = {question: truth for question, (truth, _) in checks.IS_QUESTIONS.items()}


def test_is_predictions_pass_when_all_right():
    _status(checks.check_is_predictions(lambda: dict(RIGHT)), checks.PASSED)


def test_is_predictions_are_true_facts_on_this_torch():
    t, model = torch.ones(3), nn.Linear(3, 2)  # noqa: F841 - used by eval
    for question, truth in RIGHT.items():
        assert eval(question) is truth, question


def test_is_predictions_name_the_always_copies_misconception():
    always_copies = {q: (False if q.startswith("t") else v) for q, v in RIGHT.items()}
    _status(checks.check_is_predictions(lambda: always_copies), checks.FAILED,
            "always copies", "`t.to('cpu') is t` is True")


def test_is_predictions_explain_a_single_wrong_answer():
    one_wrong = dict(RIGHT, **{"model.to('cpu') is model": False})
    feedback = checks.check_is_predictions(lambda: one_wrong)
    _status(feedback, checks.FAILED, "1 of 6 wrong", "in place")
    assert "always copies" not in feedback.message


def test_is_predictions_ask_for_booleans_not_strings():
    as_strings = {q: str(v) for q, v in RIGHT.items()}
    _status(checks.check_is_predictions(lambda: as_strings), checks.FAILED, "use True or False")


def test_is_predictions_name_the_module_to_copies_misconception():
    module_copies = {q: (False if q.startswith("model") else v) for q, v in RIGHT.items()}
    _status(checks.check_is_predictions(lambda: module_copies), checks.FAILED, "works in place")


def test_is_predictions_list_what_is_missing():
    _status(checks.check_is_predictions(lambda: {}), checks.FAILED, "no prediction yet")


def test_is_predictions_report_a_stub_as_not_attempted():
    _status(checks.check_is_predictions(stub), checks.NOT_ATTEMPTED)


# --- exercise 4: model and optimizer -------------------------------------------------------


def test_model_then_optimizer_passes():
    def build(device):
        model = nn.Linear(3, 2).to(device)
        return model, torch.optim.Adagrad(model.parameters())

    _status(checks.check_model_and_optimizer(build, OTHER), checks.PASSED)


def test_adagrad_built_before_the_move_is_caught_by_its_state():
    def build(device):
        model = nn.Linear(3, 2)
        optimizer = torch.optim.Adagrad(model.parameters())
        model.to(device)
        return model, optimizer

    _status(checks.check_model_and_optimizer(build, OTHER), checks.FAILED,
            "optimizer's state is torch.float32 on cpu", "never touches the optimizer")


def test_optimizer_state_of_another_dtype_is_caught():
    def build(device):
        model = nn.Linear(3, 2).to(device)
        optimizer = torch.optim.Adagrad(model.parameters())
        model.to(torch.float64)
        return model, optimizer

    _status(checks.check_model_and_optimizer(build, OTHER), checks.FAILED,
            "torch.float32", "the weights torch.float64")


def test_stateless_optimizer_built_before_a_replacing_move_is_caught():
    def build(device):
        model = nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.to(device)  # cpu -> meta replaces the Parameter objects
        return model, optimizer

    _status(checks.check_model_and_optimizer(build, OTHER), checks.FAILED, "replaced them")


def test_optimizer_over_other_tensors_is_caught():
    def build(device):
        model = nn.Linear(3, 2).to(device)
        return model, torch.optim.SGD([nn.Parameter(torch.zeros(5, device=device))], lr=0.1)

    _status(checks.check_model_and_optimizer(build, OTHER), checks.FAILED,
            "does not hold model.parameters()")


def test_model_left_on_the_cpu_is_caught():
    def build(device):
        model = nn.Linear(3, 2)
        return model, torch.optim.Adagrad(model.parameters())

    _status(checks.check_model_and_optimizer(build, OTHER), checks.FAILED,
            "the model is not on the device")


def test_model_and_optimizer_wrong_shape_of_answer():
    _status(checks.check_model_and_optimizer(lambda device: nn.Linear(3, 2), OTHER),
            checks.FAILED, "return a pair")


def test_model_and_optimizer_stub_is_not_attempted():
    _status(checks.check_model_and_optimizer(stub, OTHER), checks.NOT_ATTEMPTED)


@pytest.mark.parametrize("status", [checks.PASSED, checks.FAILED, checks.NOT_ATTEMPTED])
def test_feedback_is_truthy_only_when_passed(status):
    feedback = checks.Feedback("Exercise 9", status, "message")
    assert bool(feedback) == (status == checks.PASSED)
    assert str(feedback).endswith("Exercise 9: message")


def test_pytorchs_own_not_implemented_error_is_a_failure_not_an_unattempted_exercise():
    def prepare(batch, device):
        return torch.empty(2, device="meta").to("cpu")  # "Cannot copy out of meta tensor"

    _status(checks.check_prepare(prepare, OTHER), checks.FAILED, "Cannot copy out of meta tensor")
