"""labchecks, lab 08 (libraries): tables of differently written right answers that must pass,
and of wrong answers that must fail with the message naming their misconception; an exercise
that still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

from collections.abc import Mapping

import accelerate
import pytest
import safetensors
import safetensors.torch
import torch
import transformers
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from safetensors import safe_open
from safetensors.torch import load_file, save_file, save_model
from transformers import AutoModelForCausalLM

from labchecks import lab08 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED

DEVICE = torch.device("cpu")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --- Exercise 1: a tokenizer's batch ------------------------------------------------------


def batch_returned(batch, device):
    return batch.to(device)


def batch_in_place(batch, device):
    batch.to(device)
    return batch


def batch_reassigned(batch, device):
    batch = batch.to(device)
    return batch


def batch_dict_comprehension(batch, device):
    return {key: value.to(device) for key, value in batch.items()}


def batch_by_key(batch, device):
    for key in batch:
        batch[key] = batch[key].to(device)
    return batch


def batch_send_to_device(batch, device):
    return accelerate.utils.send_to_device(batch, device)


def batch_string_device(batch, device):
    return batch.to(str(device))


def batch_rebuilt(batch, device):
    return transformers.BatchEncoding({k: v.to(device=device) for k, v in batch.items()})


def batch_non_blocking(batch, device):
    return batch.to(device, non_blocking=True)


def batch_recursive(batch, device):
    def to_device(data):
        if isinstance(data, torch.Tensor):
            return data.to(device)
        if isinstance(data, Mapping):
            return {key: to_device(value) for key, value in data.items()}
        return data

    return to_device(batch)


RIGHT_BATCH = {f.__name__: f for f in (
    batch_returned, batch_in_place, batch_reassigned, batch_dict_comprehension, batch_by_key,
    batch_send_to_device, batch_string_device, batch_rebuilt, batch_non_blocking,
    batch_recursive)}


def by_attribute(batch, device):
    batch.input_ids = batch.input_ids.to(device)
    return batch


def every_attribute(batch, device):
    for key in list(batch.keys()):
        setattr(batch, key, getattr(batch, key).to(device))
    return batch


def one_key(batch, device):
    batch["input_ids"] = batch["input_ids"].to(device)
    return batch


def results_dropped(batch, device):
    for value in batch.values():
        value.to(device)
    return batch


def returns_nothing(batch, device):
    batch.to(device)


def returns_input_ids(batch, device):
    return batch["input_ids"].to(device)


def returns_list(batch, device):
    return [value.to(device) for value in batch.values()]


def hard_coded_cpu(batch, device):
    return batch.to("cpu")


def hard_coded_cuda(batch, device):
    return batch.to("cuda")


def ids_to_float(batch, device):
    return {key: value.to(device, torch.float32) for key, value in batch.items()}


def keys_dropped(batch, device):
    return {"input_ids": batch["input_ids"].to(device)}


def nothing_moved(batch, device):
    return dict(batch)


def typo(batch, device):
    return bacth.to(device)  # noqa: F821


WRONG_BATCH = {f.__name__: (f, phrases) for f, phrases in (
    (by_attribute, ["you set `batch.input_ids = ...`", "new attribute"]),
    (every_attribute, ["new attribute", "model(**batch) reads the keys"]),
    (one_key, ["you moved ['input_ids'] and left", "attention_mask"]),
    (results_dropped, ["threw the results away"]),
    (returns_nothing, ["returned None"]),
    (returns_input_ids, ["you returned one tensor"]),
    (returns_list, ["you returned a list"]),
    (hard_coded_cpu, ["ignores its `device` argument"]),
    (hard_coded_cuda, ["asks for CUDA"]),
    (ids_to_float, ["no longer integers"]),
    (keys_dropped, ["has lost", "attention_mask"]),
    (nothing_moved, ["nothing moved them"]),
    (typo, ["NameError", "a typo"]),
)}


@pytest.mark.parametrize("answer", RIGHT_BATCH.values(), ids=RIGHT_BATCH)
def test_move_batch_accepts_every_way_of_moving_the_whole_batch(answer):
    _status(checks.check_move_batch(answer, DEVICE), PASSED)


@pytest.mark.parametrize(("answer", "phrases"), WRONG_BATCH.values(), ids=WRONG_BATCH)
def test_move_batch_names_the_mistake(answer, phrases):
    assert_one_line(_status(checks.check_move_batch(answer, DEVICE), FAILED, *phrases))


def test_move_batch_reports_the_stub_as_not_attempted():
    _status(checks.check_move_batch(stub, DEVICE), NOT_ATTEMPTED)


# --- Exercise 2: a split model ----------------------------------------------------------


RIGHT_SPLIT = {
    "to model.device": lambda model, ids: model(ids.to(model.device)).logits,
    "as it is": lambda model, ids: model(ids).logits,
    "keyword": lambda model, ids: model(input_ids=ids).logits,
    "no_grad": lambda model, ids: _no_grad(model, ids),
    "return_dict": lambda model, ids: model(ids, return_dict=True)["logits"],
    "index 0": lambda model, ids: model(ids)[0],
    "detached": lambda model, ids: model(ids).logits.detach(),
    "eval first": lambda model, ids: model.eval()(ids).logits,
    "inference_mode": lambda model, ids: _inference(model, ids),
}


def _no_grad(model, ids):
    with torch.no_grad():
        return model(ids).logits


def _inference(model, ids):
    with torch.inference_mode():
        return model(input_ids=ids.to(model.device)).logits


def moves_model(model, ids):
    model.to(DEVICE)
    return model(ids).logits


def moves_model_with_cpu(model, ids):
    return model.cpu()(ids).logits


def moves_each_parameter(model, ids):
    for parameter in model.parameters():
        parameter.data = parameter.data.to("cpu")
    return model(ids).logits


def fills_with_to_empty(model, ids):
    model.to_empty(device="cpu")
    return model(ids).logits


def returns_output(model, ids):
    return model(ids)


def returns_predictions(model, ids):
    return model(ids).logits.argmax(-1)


def returns_probabilities(model, ids):
    return model(ids).logits.softmax(-1)


def train_mode(model, ids):
    model.train()
    return model(ids).logits


def asks_cuda(model, ids):
    return model(ids.to("cuda")).logits


def wrong_input(model, ids):
    return model(ids.flip(-1)).logits


def returns_loss(model, ids):
    return model(ids, labels=ids).loss


WRONG_SPLIT = {f.__name__: (f, phrases) for f, phrases in (
    (moves_model, ["refuses `.to`", "You can't move a model"]),
    (moves_model_with_cpu, ["Cannot copy out of meta tensor", "offloaded"]),
    (moves_each_parameter, ["Cannot copy out of meta tensor"]),
    (fills_with_to_empty, ["`to_empty` gives memory, not the weights"]),
    (returns_output, ["you returned the whole CausalLMOutputWithCrossAttentions"]),
    (returns_predictions, ["not the predicted tokens"]),
    (returns_probabilities, ["probabilities"]),
    (train_mode, ["training mode", "dropout"]),
    (asks_cuda, ["asks for CUDA"]),
    (wrong_input, ["your logits differ"]),
    (returns_loss, ["has shape ()"]),
)}


@pytest.mark.parametrize("answer", RIGHT_SPLIT.values(), ids=RIGHT_SPLIT)
def test_run_split_accepts_every_way_of_calling_the_model(answer, tmp_path):
    _status(checks.check_run_split(answer, folder=tmp_path), PASSED)


@pytest.mark.parametrize(("answer", "phrases"), WRONG_SPLIT.values(), ids=WRONG_SPLIT)
def test_run_split_names_the_mistake(answer, phrases, tmp_path):
    assert_one_line(_status(checks.check_run_split(answer, folder=tmp_path), FAILED, *phrases))


def test_run_split_reports_the_stub_as_not_attempted(tmp_path):
    _status(checks.check_run_split(stub, folder=tmp_path), NOT_ATTEMPTED)


# --- Exercise 3: a meta model -----------------------------------------------------------


def fill_from_pretrained(empty, folder, device):
    return AutoModelForCausalLM.from_pretrained(folder, device_map=device)


def fill_from_pretrained_string(empty, folder, device):
    return AutoModelForCausalLM.from_pretrained(str(folder), device_map=str(device))


def fill_gpt2_class(empty, folder, device):
    return transformers.GPT2LMHeadModel.from_pretrained(folder, device_map={"": str(device)})


def fill_then_to(empty, folder, device):
    return AutoModelForCausalLM.from_pretrained(folder).to(device)


def fill_dispatch(empty, folder, device):
    empty.tie_weights()
    return accelerate.load_checkpoint_and_dispatch(empty, str(folder / "model.safetensors"),
                                                   device_map={"": str(device)})


def fill_to_empty_then_load(empty, folder, device):
    empty.to_empty(device=device)
    empty.load_state_dict(load_file(folder / "model.safetensors", device=str(device)),
                          strict=False)
    empty.tie_weights()
    return empty


def fill_assign(empty, folder, device):
    state = load_file(folder / "model.safetensors", device=str(device))
    empty.load_state_dict(state, strict=False, assign=True)
    empty.tie_weights()
    return empty


def fill_load_model(empty, folder, device):
    empty.to_empty(device=device)
    safetensors.torch.load_model(empty, folder / "model.safetensors", strict=False,
                                 device=str(device))
    empty.tie_weights()
    return empty


def fill_dtype(empty, folder, device):
    return AutoModelForCausalLM.from_pretrained(folder, device_map=device, dtype=torch.float32)


RIGHT_FILL = {f.__name__: f for f in (
    fill_from_pretrained, fill_from_pretrained_string, fill_gpt2_class, fill_then_to,
    fill_dispatch, fill_to_empty_then_load, fill_assign, fill_load_model, fill_dtype)}


def moved_with_to(empty, folder, device):
    return empty.to(device)


def to_empty_only(empty, folder, device):
    return empty.to_empty(device=device)


def strict_load(empty, folder, device):
    empty.to_empty(device=device)
    empty.load_state_dict(load_file(folder / "model.safetensors", device=str(device)))
    return empty


def not_retied(empty, folder, device):
    empty.to_empty(device=device)
    empty.load_state_dict(load_file(folder / "model.safetensors", device=str(device)),
                          strict=False)
    return empty


def dispatch_untied(empty, folder, device):
    return accelerate.load_checkpoint_and_dispatch(empty, str(folder / "model.safetensors"),
                                                   device_map={"": str(device)})


def returned_untouched(empty, folder, device):
    return empty


def copied_into_meta(empty, folder, device):
    empty.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    return empty


def from_config(empty, folder, device):
    return AutoModelForCausalLM.from_config(empty.config)


def assign_not_retied(empty, folder, device):
    empty.load_state_dict(load_file(folder / "model.safetensors"), strict=False, assign=True)
    return empty


def returns_state_dict(empty, folder, device):
    return load_file(folder / "model.safetensors")


def reads_folder_with_torch_load(empty, folder, device):
    return torch.load(folder, map_location=device)


WRONG_FILL = {f.__name__: (f, phrases) for f, phrases in (
    (moved_with_to, ["Cannot copy out of meta tensor", "to_empty(), gives memory"]),
    (to_empty_only, ["to_empty() gives memory on the device, not the weights"]),
    (strict_load, ["lm_head.weight is missing", "strict=False"]),
    (not_retied, ["except lm_head.weight", "tie_weights"]),
    (dispatch_untied, ["Cannot copy out of meta tensor", "tie_weights() first"]),
    (returned_untouched, ["still on meta", "init_empty_weights"]),
    (copied_into_meta, ["still on meta", "assign=True"]),
    (from_config, ["a model built from the config has random ones"]),
    (assign_not_retied, ["['lm_head.weight'] still on meta", "tie_weights"]),
    (returns_state_dict, ["return the model", "got dict"]),
    (reads_folder_with_torch_load, ["is a folder"]),
)}


@pytest.mark.parametrize("answer", RIGHT_FILL.values(), ids=RIGHT_FILL)
def test_fill_model_accepts_every_way_of_loading_the_real_weights(answer, tmp_path):
    _status(checks.check_fill_model(answer, DEVICE, folder=tmp_path), PASSED)


# copied_into_meta: PyTorch warns once per parameter that copying into meta does nothing (the
# learner sees those warnings too; the check's message is what is tested here).
@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter:UserWarning")
@pytest.mark.parametrize(("answer", "phrases"), WRONG_FILL.values(), ids=WRONG_FILL)
def test_fill_model_names_the_mistake(answer, phrases, tmp_path):
    feedback = checks.check_fill_model(answer, DEVICE, folder=tmp_path)
    assert_one_line(_status(feedback, FAILED, *phrases))


def test_fill_model_reports_the_stub_as_not_attempted(tmp_path):
    _status(checks.check_fill_model(stub, DEVICE, folder=tmp_path), NOT_ATTEMPTED)


# --- Exercise 4: a safetensors file -----------------------------------------------------


def load_keyword(path, device):
    return load_file(path, device=str(device))


def load_positional(path, device):
    return load_file(path, str(device))


def load_module_attribute(path, device):
    return safetensors.torch.load_file(str(path), device=str(device))


def load_then_move(path, device):
    return {name: tensor.to(device) for name, tensor in load_file(path).items()}


def load_safe_open(path, device):
    with safe_open(path, framework="pt", device=str(device)) as file:
        return {name: file.get_tensor(name) for name in file.keys()}


def load_safe_open_module(path, device):
    with safetensors.safe_open(str(path), "pt", device=str(device)) as file:
        return {name: file.get_tensor(name) for name in file.keys()}


def load_bytes(path, device):
    with open(path, "rb") as handle:
        state = safetensors.torch.load(handle.read())
    return {name: tensor.to(device) for name, tensor in state.items()}


def load_and_update(path, device):
    state = load_file(path)
    for name in state:
        state[name] = state[name].to(device)
    return state


def load_torch_load_mapped(path, device):
    return {name: tensor.to(device) for name, tensor in
            torch.load(path, map_location="cpu", weights_only=True).items()}


RIGHT_LOAD = {f.__name__: f for f in (
    load_keyword, load_positional, load_module_attribute, load_then_move, load_safe_open,
    load_safe_open_module, load_bytes, load_and_update, load_torch_load_mapped)}


def no_device(path, device):
    return load_file(path)


def safe_open_no_device(path, device):
    with safe_open(path, framework="pt") as file:
        return {name: file.get_tensor(name) for name in file.keys()}


def names_the_cpu(path, device):
    return load_file(path, device="cpu")


def torch_device_object(path, device):
    return load_file(path, device=torch.device(device))


def asks_for_cuda(path, device):
    return load_file(path, device="cuda:0")


def moves_dropped(path, device):
    state = load_file(path)
    for tensor in state.values():
        tensor.to(device)
    return state


def torch_load_plain(path, device):
    return torch.load(path, weights_only=True)


def halves(path, device):
    return {k: v.half() for k, v in load_file(path, device=str(device)).items()}


def weights_only_keys(path, device):
    return {k: v for k, v in load_file(path, device=str(device)).items() if "weight" in k}


def returns_model(path, device):
    model = torch.nn.Linear(4, 3)
    safetensors.torch.load_model(model, path, strict=False)
    return model


def returns_list_of_tensors(path, device):
    return list(load_file(path, device=str(device)).values())


WRONG_LOAD = {f.__name__: (f, phrases) for f, phrases in (
    (no_device, ["records no device", "device=str(device)"]),
    (safe_open_no_device, ["records no device"]),
    (names_the_cpu, ["you named the CPU yourself"]),
    (torch_device_object, ["not a torch.device", "str(device)"]),
    (asks_for_cuda, ["asks for CUDA"]),
    (moves_dropped, ["threw the result away"]),
    (torch_load_plain, ["without map_location it puts the tensors on the CPU"]),
    (halves, ["changed dtype"]),
    (weights_only_keys, ["return every tensor"]),
    (returns_model, ["got Linear"]),
    (returns_list_of_tensors, ["got list"]),
)}


@pytest.mark.parametrize("answer", RIGHT_LOAD.values(), ids=RIGHT_LOAD)
def test_load_weights_accepts_every_way_of_naming_the_device(answer, tmp_path):
    _status(checks.check_load_weights(answer, DEVICE, folder=tmp_path), PASSED)


@pytest.mark.parametrize(("answer", "phrases"), WRONG_LOAD.values(), ids=WRONG_LOAD)
def test_load_weights_names_the_mistake(answer, phrases, tmp_path):
    feedback = checks.check_load_weights(answer, DEVICE, folder=tmp_path)
    assert_one_line(_status(feedback, FAILED, *phrases))


def test_load_weights_reports_the_stub_as_not_attempted(tmp_path):
    _status(checks.check_load_weights(stub, DEVICE, folder=tmp_path), NOT_ATTEMPTED)


# --- Exercise 5: a shared weight --------------------------------------------------------


def unique_storages(model):
    seen, kept = set(), {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            kept[name] = tensor
    return kept


RIGHT_SAVE = {
    "save_model": lambda model, path: save_model(model, path),
    "save_model str": lambda model, path: save_model(model, str(path)),
    "save_model metadata": lambda model, path: save_model(model, path, {"format": "pt"}),
    "save_model keyword": lambda model, path: safetensors.torch.save_model(
        model=model, filename=str(path), force_contiguous=True),
    "dedup by storage": lambda model, path: save_file(unique_storages(model), path),
    "explicit keys": lambda model, path: save_file(
        {k: v for k, v in model.state_dict().items() if k != "decoder.weight"}, path),
    "detached dedup": lambda model, path: save_file(
        {k: v.detach() for k, v in unique_storages(model).items()}, path),
    "on the cpu": lambda model, path: save_model(model.cpu(), path),
}


def plain_save_file(model, path):
    save_file(model.state_dict(), path)


def clones(model, path):
    save_file({k: v.clone() for k, v in model.state_dict().items()}, path)


def torch_save(model, path):
    torch.save(model.state_dict(), path)


def swallowed(model, path):
    try:
        save_file(model.state_dict(), path)
    except RuntimeError:
        pass


def other_path(model, path):
    save_model(model, path.with_name("elsewhere.safetensors"))


def unties(model, path):
    model.decoder.weight = torch.nn.Parameter(model.decoder.weight.detach().clone())
    save_model(model, path)


def renamed(model, path):
    save_file({f"model.{k}": v for k, v in unique_storages(model).items()}, path)


def half_precision(model, path):
    save_file({k: v.half() for k, v in unique_storages(model).items()}, path)


def encoder_only(model, path):
    save_file({"encoder.weight": model.encoder.weight.detach()}, path)


def contiguous_is_no_copy(model, path):
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)


def returns_bytes(model, path):
    return safetensors.torch.save(unique_storages(model))


WRONG_SAVE = {f.__name__: (f, phrases) for f, phrases in (
    (plain_save_file, ["save_file refused", "save_model"]),
    (clones, ["two copies", "cloned"]),
    (torch_save, ["not safetensors", "torch.save"]),
    (swallowed, ["no file at tied.safetensors", "try/except"]),
    (other_path, ["no file at tied.safetensors", "the path you are given"]),
    (unties, ["untied the model"]),
    (renamed, ["load_model cannot restore", "Keep the model's own key names"]),
    (half_precision, ["another dtype"]),
    (encoder_only, ["the file lacks", "encoder.bias"]),
    (contiguous_is_no_copy, ["save_file refused"]),
    (returns_bytes, ["no file at tied.safetensors"]),
)}


@pytest.mark.parametrize("answer", RIGHT_SAVE.values(), ids=RIGHT_SAVE)
def test_save_tied_accepts_every_way_of_writing_the_shared_weight_once(answer, tmp_path):
    _status(checks.check_save_tied(answer, folder=tmp_path), PASSED)


@pytest.mark.parametrize(("answer", "phrases"), WRONG_SAVE.values(), ids=WRONG_SAVE)
def test_save_tied_names_the_mistake(answer, phrases, tmp_path):
    assert_one_line(_status(checks.check_save_tied(answer, folder=tmp_path), FAILED, *phrases))


def test_save_tied_reports_the_stub_as_not_attempted(tmp_path):
    _status(checks.check_save_tied(stub, folder=tmp_path), NOT_ATTEMPTED)


# --- every exercise ----------------------------------------------------------------------


@pytest.mark.parametrize("table", [WRONG_BATCH, WRONG_SPLIT, WRONG_FILL, WRONG_LOAD, WRONG_SAVE],
                         ids=["batch", "split", "fill", "load", "save"])
def test_each_table_holds_at_least_ten_wrong_answers(table):
    assert len(table) >= 10


@pytest.mark.parametrize("table", [RIGHT_BATCH, RIGHT_SPLIT, RIGHT_FILL, RIGHT_LOAD, RIGHT_SAVE],
                         ids=["batch", "split", "fill", "load", "save"])
def test_each_table_holds_at_least_eight_right_answers(table):
    assert len(table) >= 8


def test_a_check_given_a_value_instead_of_a_function_says_so():
    _status(checks.check_move_batch(42, DEVICE), FAILED, "expected the function you wrote")
