"""labchecks, lab 02: tables of differently written right answers that must pass, and of
wrong answers that must fail with the message naming their misconception; an exercise that
still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch import nn

from labchecks import feedback
from labchecks import lab02 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED, Feedback

OTHER = torch.device("meta")  # the second device on a CPU-only machine


# --- exercise 1: where is it now? ---------------------------------------------------------

RIGHT_WHERE = {
    "lowercase": lambda: "cpu",
    "uppercase": lambda: "CPU",
    "padded": lambda: " cpu ",
    "with index": lambda: "cpu:0",
    "a torch.device": lambda: torch.device("cpu"),
    "str of a device": lambda: str(torch.device("cpu")),
    "device of a new tensor": lambda: str(torch.ones(1).device),
}
WRONG_WHERE = {
    "meta": (lambda: "meta", "never changes the tensor you call it on"),
    "str(other)": (lambda: str(OTHER), "never changes the tensor you call it on"),
    "cuda": (lambda: "cuda", "never changes the tensor you call it on"),
    "cuda:0": (lambda: "cuda:0", "never changes the tensor you call it on"),
    "mps": (lambda: "mps", "never changes the tensor you call it on"),
    "not a device": (lambda: "gpu please", "is not a device name"),
}


@pytest.mark.parametrize("answer", RIGHT_WHERE.values(), ids=RIGHT_WHERE)
def test_where_is_it_now_accepts_every_way_of_saying_cpu(answer):
    _status(checks.check_where_is_it_now(answer, OTHER), PASSED)


@pytest.mark.parametrize(("answer", "phrase"), WRONG_WHERE.values(), ids=WRONG_WHERE)
def test_where_is_it_now_names_the_moves_in_place_misconception(answer, phrase):
    _status(checks.check_where_is_it_now(answer, OTHER), FAILED, phrase)


def test_where_is_it_now_reports_a_stub_as_not_attempted():
    _status(checks.check_where_is_it_now(stub, OTHER), NOT_ATTEMPTED)


# --- exercise 2: prepare -------------------------------------------------------------------


def prepare_reassigned(batch, device):
    batch = batch.to(device)
    return batch


def prepare_keyword(batch, device):
    return batch.to(device=device)


def prepare_str_device(batch, device):
    return batch.to(str(device))


def prepare_torch_device(batch, device):
    return batch.to(torch.device(device))


def prepare_normalised_argument(batch, device):
    device = torch.device(device)  # rebinding the argument to itself is fine
    return batch.to(device)


def prepare_non_blocking(batch, device):
    return batch.to(device, non_blocking=True)


def prepare_dtype_kept(batch, device):
    return batch.to(device, batch.dtype)


def prepare_like_another_tensor(batch, device):
    return batch.to(torch.empty(0, dtype=batch.dtype, device=device))


RIGHT_PREPARE = {f.__name__: f for f in (
    prepare_reassigned, prepare_keyword, prepare_str_device, prepare_torch_device,
    prepare_normalised_argument, prepare_non_blocking, prepare_dtype_kept,
    prepare_like_another_tensor)}


def prepare_not_kept(batch, device):
    batch.to(device)
    return batch


def prepare_overrides_device(batch, device):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return batch.to(device)


def prepare_float32(batch, device):
    return batch.to(device, torch.float32)


def prepare_float16(batch, device):
    return batch.to(device, torch.float16)


def prepare_float(batch, device):
    return batch.float().to(device)


def prepare_copy(batch, device):
    return batch.to(device, copy=True)


def prepare_clone(batch, device):
    return batch.clone().to(device)


def prepare_fixed_device(batch, device):
    return batch.to(OTHER)


def prepare_cuda(batch, device):
    return batch.cuda()


def prepare_nothing(batch, device):
    return batch


def prepare_none(batch, device):
    batch = batch.to(device)


def prepare_typo(batch, device):
    return batch.to(devise)  # noqa: F821 - the typo is the point


def prepare_copies_off_meta(batch, device):
    return batch.to(device).cpu()


WRONG_PREPARE = {f.__name__: (f, phrases) for f, phrases in (
    (prepare_not_kept, ["You called `batch.to(device)` but kept using `batch`"]),
    (prepare_overrides_device, ["sets `device = ...` itself", "caller"]),
    (prepare_float32, ["dtype changed", "torch.int64", "`batch.to(device, torch.float32)`"]),
    (prepare_float16, ["dtype changed", "torch.float16"]),
    (prepare_float, ["dtype changed", "Move it, do not convert it"]),
    (prepare_copy, ["Did you use copy=True"]),
    (prepare_clone, ["Did you use copy=True, .clone()"]),
    (prepare_fixed_device, ["use the `device` argument"]),
    (prepare_cuda, ["use `.to(device)`", "CUDA"]),
    (prepare_nothing, ["unmoved"]),
    (prepare_none, ["not a tensor"]),
    (prepare_typo, ["NameError", "cell you have not run"]),
    (prepare_copies_off_meta, ["no data", "does not apply here"]),
)}


@pytest.mark.parametrize("prepare", RIGHT_PREPARE.values(), ids=RIGHT_PREPARE)
def test_prepare_accepts_every_correct_style(prepare):
    _status(checks.check_prepare(prepare, OTHER), PASSED)


@pytest.mark.parametrize(("prepare", "phrases"), WRONG_PREPARE.values(), ids=WRONG_PREPARE)
def test_prepare_names_the_misconception_of_each_wrong_answer(prepare, phrases):
    assert_one_line(_status(checks.check_prepare(prepare, OTHER), FAILED, *phrases))


def test_prepare_reports_a_stub_as_not_attempted():
    _status(checks.check_prepare(stub, OTHER), NOT_ATTEMPTED)


def test_a_check_given_the_result_instead_of_the_function_says_so():
    _status(checks.check_prepare(torch.ones(2), OTHER), FAILED, "without calling it")


def test_an_overridden_device_is_not_blamed_on_the_result_not_kept():
    feedback = checks.check_prepare(prepare_overrides_device, OTHER)
    assert "kept using `batch`" not in feedback.message


# --- exercise 3: is or is not --------------------------------------------------------------


RIGHT = {question: eval(question, {"torch": torch, "t": torch.ones(3), "model": nn.Linear(3, 2)})
         for question in checks.IS_QUESTIONS}


def predictions_literal():
    return {"t.to('cpu') is t": True, "t.to(torch.float64) is t": False,
            "t.to('cpu', copy=True) is t": False, "t.cpu() is t": True,
            "model.to('cpu') is model": True, "model.to(torch.float64) is model": True}


def predictions_update():
    predictions = dict.fromkeys(RIGHT)
    predictions.update(predictions_literal())
    return predictions


def predictions_one_by_one():
    predictions = {}
    for question in reversed(list(RIGHT)):
        predictions[question] = predictions_literal()[question]
    return predictions


def predictions_zip():
    return dict(zip(RIGHT, [True, False, False, True, True, True], strict=True))


def predictions_comprehension():
    copies = {"t.to(torch.float64) is t", "t.to('cpu', copy=True) is t"}
    return {question: question not in copies for question in RIGHT}


def predictions_merged():
    return {**{q: True for q in RIGHT if q.startswith("model")},
            **{q: v for q, v in predictions_literal().items() if q.startswith("t")}}


def predictions_with_an_extra_note():
    return {**predictions_literal(), "note": "model.to is in place"}


RIGHT_IS = {f.__name__: f for f in (
    predictions_literal, predictions_update, predictions_one_by_one, predictions_zip,
    predictions_comprehension, predictions_merged, predictions_with_an_extra_note)}
WRONG_IS = {
    "always copies": ({q: (False if q.startswith("t") else v) for q, v in RIGHT.items()},
                      ["always copies", "`t.to('cpu') is t` is True"]),
    "module copies": ({q: (False if q.startswith("model") else v) for q, v in RIGHT.items()},
                      ["works in place"]),
    "one wrong": (dict(RIGHT, **{"model.to('cpu') is model": False}), ["1 of 6 wrong", "in place"]),
    "copy=True returns self": (dict(RIGHT, **{"t.to('cpu', copy=True) is t": True}),
                               ["copy=True always builds a new tensor"]),
    "dtype change returns self": (dict(RIGHT, **{"t.to(torch.float64) is t": True}),
                                  ["the dtype changes"]),
    "strings": ({q: str(v) for q, v in RIGHT.items()}, ["use True or False"]),
    "empty": ({}, ["no prediction yet"]),
    "left None": (dict.fromkeys(RIGHT), ["no prediction yet"]),
    "a list": ([True] * 6, ["return a dict"]),
}


@pytest.mark.parametrize("predict", RIGHT_IS.values(), ids=RIGHT_IS)
def test_is_predictions_accept_every_way_of_writing_the_right_dict(predict):
    _status(checks.check_is_predictions(predict), PASSED)


@pytest.mark.parametrize(("answers", "phrases"), WRONG_IS.values(), ids=WRONG_IS)
def test_is_predictions_name_the_misconception(answers, phrases):
    _status(checks.check_is_predictions(lambda: answers), FAILED, *phrases)


def test_is_predictions_are_true_facts_on_this_torch():
    t, model = torch.ones(3), nn.Linear(3, 2)  # noqa: F841 - used by eval
    for question, truth in RIGHT.items():
        assert eval(question) is truth, question


def test_a_single_wrong_answer_is_not_called_always_copies():
    one_wrong = dict(RIGHT, **{"model.to('cpu') is model": False})
    feedback = checks.check_is_predictions(lambda: one_wrong)
    assert "always copies" not in feedback.message


def test_is_predictions_report_a_stub_as_not_attempted():
    _status(checks.check_is_predictions(stub), NOT_ATTEMPTED)


# --- exercise 4: model and optimizer -------------------------------------------------------


def build_chained(device):
    model = nn.Linear(3, 2).to(device)
    return model, torch.optim.Adagrad(model.parameters())


def build_in_place(device):
    model = nn.Linear(3, 2)
    model.to(device)
    return model, torch.optim.Adagrad(model.parameters())


def build_on_the_device(device):
    model = nn.Linear(3, 2, device=device)
    return model, torch.optim.Adagrad(model.parameters(), lr=0.1)


def build_keyword(device):
    model = nn.Linear(3, 2).to(device=str(device))
    return model, torch.optim.Adagrad(params=list(model.parameters()))


def build_param_groups(device):
    model = nn.Linear(3, 2).to(torch.device(device))
    return model, torch.optim.Adagrad([{"params": model.parameters()}])


def build_tuple(device):
    model = nn.Linear(3, 2)
    model = model.to(device)
    optimizer = torch.optim.Adagrad(model.parameters())
    return (model, optimizer)


RIGHT_BUILD = {f.__name__: f for f in (build_chained, build_in_place, build_on_the_device,
                                       build_keyword, build_param_groups, build_tuple)}


def build_optimizer_first(device):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adagrad(model.parameters())
    model.to(device)
    return model, optimizer


def build_optimizer_first_sgd(device):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.to(device)  # cpu -> meta replaces the Parameter objects
    return model, optimizer


def build_overrides_device(device):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(3, 2).to(device)
    return model, torch.optim.Adagrad(model.parameters())


def build_not_moved(device):
    model = nn.Linear(3, 2)
    return model, torch.optim.Adagrad(model.parameters())


def build_other_tensors(device):
    model = nn.Linear(3, 2).to(device)
    return model, torch.optim.SGD([nn.Parameter(torch.zeros(5, device=device))], lr=0.1)


def build_state_of_another_dtype(device):
    model = nn.Linear(3, 2).to(device)
    optimizer = torch.optim.Adagrad(model.parameters())
    model.to(torch.float64)
    return model, optimizer


def build_model_only(device):
    return nn.Linear(3, 2).to(device)


def build_cuda(device):
    model = nn.Linear(3, 2).cuda()
    return model, torch.optim.Adagrad(model.parameters())


WRONG_BUILD = {f.__name__: (f, phrases) for f, phrases in (
    (build_optimizer_first, ["optimizer's state is torch.float32 on cpu",
                             "never touches the optimizer"]),
    (build_optimizer_first_sgd, ["replaced them"]),
    (build_overrides_device, ["sets `device = ...` itself"]),
    (build_not_moved, ["the model is not on the device", "call model.to(device)"]),
    (build_other_tensors, ["does not hold model.parameters()"]),
    (build_state_of_another_dtype, ["torch.float32", "the weights torch.float64"]),
    (build_model_only, ["return a pair"]),
    (build_cuda, ["CUDA", "`.to(device)`"]),
)}


@pytest.mark.parametrize("build", RIGHT_BUILD.values(), ids=RIGHT_BUILD)
def test_model_and_optimizer_accepts_every_correct_style(build):
    _status(checks.check_model_and_optimizer(build, OTHER), PASSED)


@pytest.mark.parametrize(("build", "phrases"), WRONG_BUILD.values(), ids=WRONG_BUILD)
def test_model_and_optimizer_names_the_misconception(build, phrases):
    assert_one_line(_status(checks.check_model_and_optimizer(build, OTHER), FAILED,
                            *phrases))


def test_an_overridden_device_is_not_blamed_on_a_missing_model_to():
    feedback = checks.check_model_and_optimizer(build_overrides_device, OTHER)
    assert "call model.to(device)" not in feedback.message


def test_model_and_optimizer_stub_is_not_attempted():
    _status(checks.check_model_and_optimizer(stub, OTHER), NOT_ATTEMPTED)


@pytest.mark.parametrize("status", [PASSED, FAILED, NOT_ATTEMPTED])
def test_feedback_is_truthy_only_when_passed(status):
    feedback = Feedback("Exercise 9", status, "message")
    assert bool(feedback) == (status == PASSED)
    assert str(feedback).endswith("Exercise 9: message")


def test_pytorchs_own_not_implemented_error_is_a_failure_not_an_unattempted_exercise():
    def prepare(batch, device):
        return torch.empty(2, device="meta").to("cpu")  # "Cannot copy out of meta tensor"

    _status(checks.check_prepare(prepare, OTHER), FAILED, "Cannot copy out of meta tensor")


# --- one-line explanations of raised errors ------------------------------------------------


def test_explanations_strip_terminal_escape_codes_and_keep_one_line():
    error = RuntimeError("Weights only load failed. \x1b[1mdo those steps only if you trust "
                         "the source\x1b[0m.\n\t(1) ...\nWeightsUnpickler error: Unsupported "
                         "global: GLOBAL labchecks.lab05.MysteryNet was not an allowed global")
    text = feedback.explain(error)
    assert "\x1b" not in text and "\n" not in text
    assert "labchecks.lab05.MysteryNet" in text and "don't" in text


def test_a_long_first_line_is_cut():
    assert len(feedback.first_line(ValueError("x" * 500))) < 230


def test_a_device_fixed_in_the_function_is_caught_even_when_it_matches_the_device_asked_for():
    """On a GPU machine `device = torch.device('cuda' if ...)` gives the right device for
    `other`; asking for the CPU as well shows that the argument is ignored."""
    def prepare(batch, device):
        device = OTHER  # what the override gives on a machine whose accelerator is `other`
        return batch.to(device)

    def build(device):
        device = OTHER
        model = nn.Linear(3, 2).to(device)
        return model, torch.optim.Adagrad(model.parameters())

    _status(checks.check_prepare(prepare, OTHER), FAILED, "sets `device = ...` itself")
    _status(checks.check_model_and_optimizer(build, OTHER), FAILED, "asked for cpu",
            "sets `device = ...` itself")


# --- exercise 5: a weight you can train ----------------------------------------------------


def trainable_attribute(values, device):
    weight = torch.tensor(values).to(device)
    weight.requires_grad = True
    return weight


def trainable_in_a_device_block(values, device):
    with torch.device(device):
        return torch.tensor(values, requires_grad=True)


def dropped_the_move(values, device):
    weight = torch.tensor(values, requires_grad=True)
    weight.to(device)
    return weight


RIGHT_TRAINABLE = {
    "created there": lambda v, d: torch.tensor(v, device=d, requires_grad=True),
    "moved, then requires_grad_()": lambda v, d: torch.tensor(v).to(d).requires_grad_(),
    "moved, then wrapped in a Parameter": lambda v, d: nn.Parameter(torch.tensor(v).to(d)),
    "a Parameter created there": lambda v, d: nn.Parameter(torch.tensor(v, device=d)),
    "as_tensor, keywords, requires_grad_(True)":
        lambda v, d: torch.as_tensor(v, dtype=torch.float32, device=d).requires_grad_(True),
    "attribute set after the move": trainable_attribute,
    "inside with torch.device": trainable_in_a_device_block,
    "a device string": lambda v, d: torch.tensor(v, device=str(d), requires_grad=True),
    "moved, detached, then marked":
        lambda v, d: torch.tensor(v, requires_grad=True).to(d).detach().requires_grad_(),
}
WRONG_TRAINABLE = {
    "requires_grad, then moved": (lambda v, d: torch.tensor(v, requires_grad=True).to(d),
                                  "made with requires_grad=True, then moved"),
    "a Parameter, then moved": (lambda v, d: nn.Parameter(torch.tensor(v)).to(d),
                                "returns a plain Tensor, not a Parameter"),
    "no requires_grad": (lambda v, d: torch.tensor(v).to(d), "does not require grad"),
    "never moved": (lambda v, d: torch.tensor(v, requires_grad=True), "create it there"),
    "result of .to not kept": (dropped_the_move, "returned the tensor from before it"),
    "new numbers": (lambda v, d: torch.randn(len(v), device=d, requires_grad=True),
                    "did not return those values"),
    "float64": (lambda v, d: torch.tensor(v, dtype=torch.float64).to(d).requires_grad_(),
                "not float32"),
    "not a tensor": (lambda v, d: list(v), "not a tensor"),
}


@pytest.mark.parametrize("make", RIGHT_TRAINABLE.values(), ids=RIGHT_TRAINABLE)
def test_trainable_accepts_every_way_of_making_a_leaf_on_the_device(make):
    _status(checks.check_trainable(make, OTHER), PASSED)


@pytest.mark.parametrize(("make", "phrase"), WRONG_TRAINABLE.values(), ids=WRONG_TRAINABLE)
def test_trainable_names_each_mistake_in_one_line(make, phrase):
    assert_one_line(_status(checks.check_trainable(make, OTHER), FAILED, phrase))


def test_each_trainable_mistake_gets_its_own_message():
    messages = {checks.check_trainable(make, OTHER).message for make, _ in
                WRONG_TRAINABLE.values()}
    assert len(messages) == len(WRONG_TRAINABLE)


def test_trainable_stub_is_not_attempted():
    _status(checks.check_trainable(stub, OTHER), NOT_ATTEMPTED)


def test_every_right_trainable_answer_trains_where_the_tensor_is_made():
    """What the check passes really trains: on the CPU (real numbers) an optimizer step
    changes it; the trap the check names leaves .grad None."""
    for make in RIGHT_TRAINABLE.values():
        weight = make([0.5, -1.0, 2.0], torch.device("cpu"))
        optimizer = torch.optim.SGD([weight], lr=0.1)
        (weight * 2).sum().backward()
        optimizer.step()
        assert torch.allclose(weight.detach(), torch.tensor([0.3, -1.2, 1.8]))
    moved = torch.tensor([0.5], requires_grad=True).to(torch.float16)  # any .to that copies
    (moved * 2).sum().backward()
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert moved.grad is None


@pytest.mark.parametrize("table", [RIGHT_WHERE, RIGHT_PREPARE, RIGHT_IS, RIGHT_BUILD,
                                   RIGHT_TRAINABLE],
                         ids=["exercise 1", "exercise 2", "exercise 3", "exercise 4",
                              "exercise 5"])
def test_every_exercise_has_at_least_six_differently_written_right_answers(table):
    assert len(table) >= 6
