"""Checks for lab 08_libraries: devices in transformers, accelerate and safetensors.

Each check builds its own tiny inputs in ``folder`` (a two-layer GPT-2 from a config, a
tokenizer's batch, a safetensors file, a model with a tied weight); nothing is downloaded, and
the libraries are imported when a check runs, not when ``labchecks`` is imported.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    call,
    device_name,
    explain,
    moved_and_dropped,
    not_a_function,
    recorded_loads,
    recorded_to_calls,
    seeded,
    stop_on,
)
from labchecks.grading import graded
from labchecks.library_stand_ins import (
    NO_DEVICE,
    rebind,
    safetensors_anywhere,
    to_empty_shows_its_junk,
)

SCRATCH = "scratch_lab08_libraries"
SENTENCES = ["the model lives on the cpu", "the batch moves to the device",
             "a tensor lives where it was made"]


# --- what the checks build ---------------------------------------------------------------


def tiny_config():
    """Return the two-layer GPT-2 config of lab 08 (and notebook 08): 32 numbers per token,
    a vocabulary of 100. Introduced in lab 08_libraries."""
    import transformers

    return transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64,
                                   vocab_size=100, bos_token_id=0, eos_token_id=0)


def save_tiny_model(folder: str | os.PathLike, seed: int = 0) -> Path:
    """Build the tiny GPT-2 with weights drawn from ``seed``, ``save_pretrained`` it into
    ``folder`` and return the folder. Introduced in lab 08_libraries."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    model = seeded(lambda: transformers.GPT2LMHeadModel(tiny_config()).eval(), seed)
    folder = Path(folder)
    model.save_pretrained(folder)
    return folder


def tiny_tokenizer():
    """Return a word-level tokenizer trained on three sentences, wrapped as transformers'
    ``PreTrainedTokenizerFast``. Introduced in lab 08_libraries."""
    import tokenizers
    import transformers

    word_level = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    word_level.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    vocabulary = tokenizers.trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"])
    word_level.train_from_iterator(SENTENCES, vocabulary)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=word_level,
                                                pad_token="[PAD]", unk_token="[UNK]")


SPLIT_MAP = {"transformer.wte": "cpu", "transformer.wpe": "cpu", "transformer.h.0": "cpu",
             "transformer.h.1": "disk", "transformer.ln_f": "cpu", "lm_head": "cpu"}


def load_split(folder: str | os.PathLike):
    """Return the tiny GPT-2 saved in ``folder``, split by :data:`SPLIT_MAP` (block 1 on the
    disk, the rest on the CPU). Introduced in lab 08_libraries."""
    import logging

    import transformers

    logging.getLogger("accelerate").setLevel(logging.ERROR)
    return transformers.AutoModelForCausalLM.from_pretrained(
        folder, device_map=SPLIT_MAP, offload_folder=Path(folder) / "offload")


class TiedNet(nn.Module):
    """Two layers that share one weight (``decoder.weight`` is ``encoder.weight``), as a
    language model's output layer shares its embedding. Introduced in lab 08_libraries."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 4)
        self.decoder = nn.Linear(4, 4)
        self.decoder.weight = self.encoder.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.relu(self.encoder(x)))


def _second_device(device: torch.device) -> torch.device:
    return torch.device("meta") if device.type == "cpu" else device


def _first_error_line(error: BaseException) -> str:
    return " ".join(str(error).split()).split(". ")[0][:160]


def _cuda_asked(error: BaseException) -> bool:
    text = str(error)
    return "pin_memory=True requires a CUDA" in text or "Torch not compiled with CUDA" in text \
        or "Found no NVIDIA driver" in text


# --- Exercise 1: a tokenizer's batch --------------------------------------------------------


@graded
def check_move_batch(move_batch: Callable, device: str | torch.device) -> Feedback:
    """Exercise 08.1: ``move_batch(batch, device)`` returns the batch, every tensor on ``device``.

    Runs it on a tokenizer's ``BatchEncoding`` (input_ids, token_type_ids, attention_mask),
    moved to ``device`` and to the second device. Catches: a tensor moved by attribute
    (``batch.input_ids = ...``), one key moved and the others left, ``.to`` results thrown
    away, the device argument ignored, the token ids cast to float, a list or one tensor
    returned, nothing returned. Introduced in lab 08_libraries.
    """
    exercise = "Exercise 1"
    stop_on(not_a_function(exercise, move_batch))
    tokenizer = tiny_tokenizer()
    device = torch.device(device)
    for target in dict.fromkeys([_second_device(device), device]):
        batch = tokenizer(["the model moves", "a tensor lives on the device"], padding=True,
                          return_tensors="pt")
        keys, before = list(batch.keys()), {k: v.clone() for k, v in batch.items()}
        with recorded_to_calls() as moves:
            result, error = call(move_batch, batch, target)
        if error is not None:
            return Feedback(exercise, FAILED, f"moving a batch to {device_name(target)}: "
                            f"{_explain(error)}")
        verdict = _judge_batch(result, batch, keys, before, target, moves)
        if verdict:
            return Feedback(exercise, FAILED, verdict)
    return Feedback(exercise, PASSED, "every tensor of the batch is on the device you asked for, "
                                      "under its key, where model(**batch) reads it: "
                                      "batch.to(device) moves them all and returns the batch.")


def _judge_batch(result, batch, keys, before, target, moves) -> str | None:
    if result is None:
        return ("your function returned None. BatchEncoding.to moves the tensors and returns "
                "the batch: return it (`return batch.to(device)`).")
    if isinstance(result, torch.Tensor):
        return ("you returned one tensor; the model needs the whole batch (input_ids, "
                "attention_mask, ...) as keyword arguments: return the batch, moved.")
    if not isinstance(result, Mapping):
        return (f"you returned a {type(result).__name__}; model(**batch) needs a mapping from "
                "names to tensors: return the batch itself, moved (`batch.to(device)`).")
    if set(result.keys()) != set(keys):
        lost = sorted(set(keys) - set(result.keys()))
        return (f"the batch you returned has lost {lost}: the model needs every key the "
                "tokenizer made. Move them all: batch.to(device).")
    where = {key: value.device for key, value in result.items() if isinstance(value, torch.Tensor)}
    if any(result[key].dtype != before[key].dtype for key in keys):
        return ("your batch's token ids are no longer integers: a dtype in `.to(device, dtype)` "
                "casts them, and an embedding needs integer ids. Move the batch to the device "
                "only.")
    left = sorted(key for key, place in where.items() if place.type != target.type)
    if not left:
        if target.type != "meta" and any(not torch.equal(result[k].cpu(), before[k]) for k in keys):
            return "the tensors you returned are not the batch's: move them, don't replace them."
        return None
    moved_attributes = sorted(k for k in vars(result) if k in keys) if hasattr(result, "__dict__") \
        else []
    if moved_attributes:
        return (f"you set `batch.{moved_attributes[0]} = ...`: that makes a new attribute beside "
                f"the batch's dict, and model(**batch) reads the keys, where {left} are still on "
                f"{where[left[0]]}. Use batch.to(device), or batch[key] = ... for one key.")
    if any(moved_and_dropped(moves, before_tensor, target) for before_tensor in batch.values()) \
            or any(moved_and_dropped(moves, value, target) for value in result.values()):
        return ("you called `.to(device)` on the tensors and threw the results away: Tensor.to "
                "returns a new tensor and leaves the one in the batch where it was. Keep the "
                "result (batch[key] = value.to(device)), or call batch.to(device), which "
                "replaces them all.")
    if len(left) < len(keys):
        moved = sorted(set(keys) - set(left))
        return (f"you moved {moved} and left {left} on {where[left[0]]}: the model gets them "
                "all, and mixing devices fails in the first layer. Move every tensor: "
                "batch.to(device).")
    told = {c.device.type for c in moves if c.device is not None}
    if told and target.type not in told:
        return (f"asked for {device_name(target)}, your batch went to {', '.join(sorted(told))}: "
                "your function ignores its `device` argument. Move to the device you are given.")
    return (f"asked for {device_name(target)}, every tensor stayed on {where[left[0]]}: nothing "
            "moved them. A tokenizer's output is a BatchEncoding: batch.to(device) moves it.")


def _explain(error: BaseException) -> str:
    if _cuda_asked(error):
        return (f"your code raised `{type(error).__name__}: {_first_error_line(error)}`: it asks "
                "for CUDA, and this machine has none. Use the `device` you were given.")
    return explain(error)


# --- Exercise 2: a model split by device_map ----------------------------------------------


@graded
def check_run_split(run_split: Callable, folder: str | os.PathLike = SCRATCH) -> Feedback:
    """Exercise 08.2: ``run_split(model, input_ids)`` returns the logits of a split model.

    The model is the tiny GPT-2 loaded with a ``device_map`` that keeps block 1 on the disk
    (its weights show as meta). Catches: ``model.to``/``.cpu()``/``to_empty`` on the split
    model, the output object or predictions or probabilities returned instead of the logits,
    training mode left on, CUDA asked for. Introduced in lab 08_libraries.
    """
    exercise = "Exercise 2"
    stop_on(not_a_function(exercise, run_split))
    import transformers

    path = save_tiny_model(Path(folder) / "split_check", seed=82)
    reference = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    input_ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        expected = reference(input_ids).logits
    model = load_split(path)
    with to_empty_shows_its_junk():
        result, error = call(run_split, model, input_ids.clone())
    if error is not None:
        return Feedback(exercise, FAILED, _split_error(error))
    offloaded = model.transformer.h[1].mlp.c_fc.weight
    if offloaded.device.type != "meta":
        return Feedback(exercise, FAILED, "your function changed where block 1's weights are "
                        f"(now on {offloaded.device}; they were on meta, offloaded to disk). "
                        "`to_empty` gives memory, not the weights: the disk's values are gone. "
                        "Leave a split model's placement to its hooks; just call it.")
    kept = reference.state_dict()
    changed = sorted(name for name, tensor in model.state_dict().items()
                     if not tensor.is_meta and not torch.equal(tensor, kept[name]))
    if changed:
        return Feedback(exercise, FAILED, f"your function changed the model's weights ({changed[0]}"
                        f" and {len(changed) - 1} more): `to_empty` gives memory, not the weights, "
                        "so the loaded values are gone. Leave a split model's placement to its "
                        "hooks; just call it.")
    if model.training:
        return Feedback(exercise, FAILED, "you put the model in training mode (model.train()): "
                        "its dropout layers now drop values at random, so the logits change from "
                        "run to run. from_pretrained gives a model in eval() mode: keep it.")
    if hasattr(result, "logits") and not isinstance(result, torch.Tensor):
        return Feedback(exercise, FAILED, f"you returned the whole {type(result).__name__}; "
                        "return its logits: model(input_ids).logits.")
    if not isinstance(result, torch.Tensor):
        return Feedback(exercise, FAILED, f"return the logits tensor; got {type(result).__name__}.")
    if result.shape != expected.shape:
        return Feedback(exercise, FAILED, f"your tensor has shape {tuple(result.shape)}; the "
                        f"logits have {tuple(expected.shape)} (batch, tokens, vocabulary). "
                        "Return the logits, not the predicted tokens (no argmax).")
    if result.device.type != "cpu":
        return Feedback(exercise, FAILED, f"your logits are on {result.device}: the model's hook "
                        "already brings them back to the input's device (the CPU). Return them "
                        "as they come.")
    if torch.allclose(result.detach().sum(-1), torch.ones(1), atol=1e-4):
        return Feedback(exercise, FAILED, "your values sum to 1 over the vocabulary: you "
                        "returned probabilities (softmax). Return the logits themselves.")
    if not torch.allclose(result.detach(), expected, atol=1e-5):
        return Feedback(exercise, FAILED, "your logits differ from the model's: call the model "
                        "on the input_ids you were given, and return .logits unchanged.")
    return Feedback(exercise, PASSED, "the split model ran where its device_map put it: its hooks "
                                      "move the inputs and read block 1 from the disk, so you "
                                      "never call .to on it.")


def _split_error(error: BaseException) -> str:
    text = str(error)
    said = f"`{type(error).__name__}: {_first_error_line(error)}`"
    if "You can't move a model that has some modules offloaded" in text:
        return (f"your code raised {said}. A model loaded with a device_map that splits it "
                "(here block 1 stays on the disk) refuses `.to`: its hooks already move each "
                "input to where each part runs. Call the model; send inputs to model.device.")
    if "Cannot copy out of meta tensor" in text:
        return (f"your code raised {said}: block 1's weights are offloaded and show as meta, so "
                "a move (`.cpu()`, `.float()`, a loop over parameters) has nothing to copy. "
                "Leave a split model where its device_map put it; just call it.")
    if _cuda_asked(error) or "cuda" in text.lower():
        return (f"your code raised {said}: it asks for CUDA, which this machine lacks. Send "
                "inputs to model.device, the device the model says it runs on.")
    return explain(error)


# --- Exercise 3: a model built on meta ----------------------------------------------------


@graded
def check_fill_model(fill_model: Callable, device: str | torch.device,
                     folder: str | os.PathLike = SCRATCH) -> Feedback:
    """Exercise 08.3: ``fill_model(empty_model, folder, device)`` returns the model saved in
    ``folder`` with its real weights on ``device``; ``empty_model`` was built on meta.

    Catches: ``.to(device)`` on a meta model, ``to_empty`` alone (junk weights), a strict
    load that misses the tied ``lm_head.weight``, a load that leaves it junk or meta, a
    ``load_state_dict`` into meta tensors without ``assign=True``, a fresh model from the
    config (random weights), the file read with ``torch.load``. Introduced in lab 08_libraries.
    """
    exercise = "Exercise 3"
    stop_on(not_a_function(exercise, fill_model))
    import accelerate
    import transformers

    device = torch.device(device)
    path = save_tiny_model(Path(folder) / "fill_check", seed=83)
    saved = transformers.AutoModelForCausalLM.from_pretrained(path).state_dict()
    with accelerate.init_empty_weights():
        empty = transformers.AutoModelForCausalLM.from_config(tiny_config())
    assigned = []
    real_load_state_dict = nn.Module.load_state_dict

    def recording(module, state_dict, *args, **kwargs):
        assigned.append(bool(kwargs.get("assign", args[1] if len(args) > 1 else False)))
        return real_load_state_dict(module, state_dict, *args, **kwargs)

    with mock.patch.object(nn.Module, "load_state_dict", recording), \
            to_empty_shows_its_junk():
        result, error = call(fill_model, empty, path, device)
    if error is not None:
        return Feedback(exercise, FAILED, _fill_error(error))
    if not isinstance(result, nn.Module):
        return Feedback(exercise, FAILED, "return the model, with its weights in it; got "
                        f"{type(result).__name__}.")
    state = result.state_dict()
    on_meta = sorted(name for name, tensor in state.items() if tensor.is_meta)
    if on_meta and len(on_meta) == len(state):
        if assigned and not any(assigned):
            return Feedback(exercise, FAILED, "every weight is still on meta: load_state_dict "
                            "copies values into the model's own tensors, and meta tensors hold "
                            "none. Pass assign=True (the file's tensors replace them), or load "
                            "with from_pretrained(folder, device_map=device).")
        return Feedback(exercise, FAILED, "every weight is still on meta: a model built under "
                        "init_empty_weights has shapes and no data until you load the real "
                        "weights (from_pretrained(folder, device_map=device)).")
    if on_meta:
        return Feedback(exercise, FAILED, f"{on_meta} still on meta: the file holds GPT-2's tied "
                        "weight once, as transformer.wte.weight, so nothing filled lm_head.weight. "
                        "Call model.tie_weights() after loading (or use from_pretrained).")
    elsewhere = sorted({str(t.device) for t in state.values() if t.device.type != device.type})
    if elsewhere:
        return Feedback(exercise, FAILED, f"asked for {device}, the weights are on "
                        f"{', '.join(elsewhere)}: load onto the device you are given "
                        "(device_map=device, or to_empty(device=device) before loading).")
    wrong = sorted(name for name, tensor in state.items()
                   if name in saved and not torch.equal(tensor.cpu(), saved[name]))
    if wrong == ["lm_head.weight"]:
        return Feedback(exercise, FAILED, "every weight is the saved one except lm_head.weight, "
                        "which holds whatever to_empty left there: the file holds the tied weight "
                        "once, as transformer.wte.weight. Call model.tie_weights() after loading.")
    matrices = {name for name, tensor in saved.items() if tensor.ndim >= 2}
    all_junk = matrices <= set(wrong)  # norms and biases may start as the saved ones (1 and 0)
    if all_junk and result is empty:
        return Feedback(exercise, FAILED, "the weights are not the saved ones. to_empty() gives "
                        "memory on the device, not the weights: whatever bytes were there. Load "
                        "the file: from_pretrained(folder, device_map=device).")
    if all_junk:
        return Feedback(exercise, FAILED, "the weights are not the saved ones: a model built from "
                        "the config has random ones. Load the file: "
                        "from_pretrained(folder, device_map=device).")
    if wrong:
        return Feedback(exercise, FAILED, f"{wrong[:3]} are not the saved weights: load the whole "
                        "file.")
    return Feedback(exercise, PASSED, "the model holds the saved weights, on your device: meta "
                                      "gives the shapes, and only loading the file gives the "
                                      "numbers (to_empty gives memory, not weights).")


def _fill_error(error: BaseException) -> str:
    text = str(error)
    said = f"`{type(error).__name__}: {_first_error_line(error)}`"
    if "Cannot copy out of meta tensor" in text:
        return (f"your code raised {said}. A model built under init_empty_weights is on meta: "
                "shapes, no numbers, so `.to(device)` has nothing to copy. PyTorch's hint, "
                "to_empty(), gives memory but not the weights. Load them: "
                "from_pretrained(folder, device_map=device); if you fill it yourself with "
                "load_checkpoint_and_dispatch, call model.tie_weights() first.")
    if "Missing key(s) in state_dict" in text and "lm_head.weight" in text:
        return (f"your code raised {said}: the file holds GPT-2's tied weight once, as "
                "transformer.wte.weight, so lm_head.weight is missing from it. Load with "
                "strict=False, then call model.tie_weights() (or use from_pretrained).")
    if "Weights only load failed" in text or "invalid load key" in text \
            or "failed finding central directory" in text:
        return (f"your code raised {said}: model.safetensors is a safetensors file: read it "
                "with safetensors.torch.load_file(path, device=...), or let from_pretrained "
                "read the folder.")
    if "is a directory" in text.lower() or "IsADirectoryError" in type(error).__name__:
        return (f"your code raised {said}: `folder` is a folder (config.json, "
                "model.safetensors); from_pretrained(folder) reads it, load_file needs the "
                "file folder / 'model.safetensors'.")
    return _explain(error)


# --- Exercise 4: a safetensors file ------------------------------------------------------


@graded
def check_load_weights(load_weights: Callable, device: str | torch.device,
                       folder: str | os.PathLike = SCRATCH) -> Feedback:
    """Exercise 08.4: ``load_weights(path, device)`` returns a safetensors file's tensors on
    ``device``.

    Runs it onto ``device`` and onto the second device (meta on a CPU-only machine; the check
    lets safetensors load there). Catches: no ``device=`` (safetensors records none, so the
    CPU), the CPU named by hand, ``torch.load`` without ``map_location``, ``.to`` results
    thrown away, a dtype cast, keys dropped, CUDA asked for. Introduced in lab 08_libraries.
    """
    exercise = "Exercise 4"
    stop_on(not_a_function(exercise, load_weights))
    import safetensors
    import safetensors.torch

    device = torch.device(device)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    saved = seeded(lambda: {"layer.weight": torch.randn(3, 4), "layer.bias": torch.randn(3)}, 84)
    path = folder / "weights.safetensors"
    safetensors.torch.save_file(saved, path)
    for target in dict.fromkeys([_second_device(device), device]):
        opened: list = []
        with safetensors_anywhere(opened) as stand_ins, \
                rebind(load_weights, stand_ins), \
                recorded_loads() as loads, recorded_to_calls() as moves:
            result, error = call(load_weights, path, target)
        if error is not None:
            return Feedback(exercise, FAILED, f"loading onto {device_name(target)}: "
                            f"{_load_error(error)}")
        verdict = _judge_weights(result, saved, target, opened, loads, moves)
        if verdict:
            return Feedback(exercise, FAILED, verdict)
    return Feedback(exercise, PASSED, "the tensors landed on the device you asked for: a "
                                      "safetensors file records no device, so "
                                      "load_file(path, device=...) decides.")


def _judge_weights(result, saved, target, opened, loads, moves) -> str | None:
    if not isinstance(result, Mapping):
        return (f"return the dict of tensors (names to tensors); got {type(result).__name__}.")
    if set(result) != set(saved):
        return (f"your dict has the keys {sorted(result)}; the file holds {sorted(saved)}: "
                "return every tensor.")
    if any(result[k].dtype != saved[k].dtype for k in saved):
        return ("your tensors changed dtype: load them as saved (float32), and move them to "
                "the device only.")
    where = sorted({str(t.device) for t in result.values() if t.device.type != target.type})
    if not where:
        if target.type != "meta" and any(not torch.equal(result[k].cpu(), saved[k]) for k in saved):
            return "the tensors you returned are not the file's: return what you loaded."
        return None
    asked = f"asked for {device_name(target)}, the tensors landed on {', '.join(where)}"
    if loads:
        return (f"{asked}: torch.load reads this file, but without map_location it puts the "
                "tensors on the CPU. For a safetensors file use "
                "safetensors.torch.load_file(path, device=str(device)).")
    if any(moved_and_dropped(moves, tensor, target) for tensor in result.values()):
        return (f"{asked}: you called `.to(device)` on each tensor and threw the result away: "
                "Tensor.to returns a new tensor. Pass device= to load_file instead.")
    if NO_DEVICE in opened:
        return (f"{asked}: a safetensors file records no device (its header holds dtypes, "
                "shapes and byte offsets only), so load_file / safe_open put everything on "
                "the CPU unless you pass device=str(device).")
    if opened and all(str(d) == "cpu" for d in opened):
        return (f"{asked}: you named the CPU yourself; your function ignores its `device` "
                "argument. Pass device=str(device).")
    return f"{asked}: pass device=str(device) to load_file."


def _load_error(error: BaseException) -> str:
    text = str(error)
    said = f"`{type(error).__name__}: {_first_error_line(error)}`"
    if "is invalid" in text and "device(type=" in text:
        return (f"your code raised {said}: safetensors 0.8 takes the device as a string or an "
                "index, not a torch.device. Pass device=str(device).")
    if _cuda_asked(error):
        return (f"your code raised {said}: it asks for CUDA (safetensors pins memory to load "
                "onto a GPU), and this machine has none. Use the `device` you were given.")
    return explain(error)


# --- Exercise 5: shared tensors ---------------------------------------------------------


@graded
def check_save_tied(save_tied: Callable, folder: str | os.PathLike = SCRATCH) -> Feedback:
    """Exercise 08.5: ``save_tied(model, path)`` writes ``model`` (whose decoder shares the
    encoder's weight) to a safetensors file that ``load_model`` restores.

    Catches: ``save_file`` refusing shared tensors, clones that write the shared weight twice,
    ``torch.save`` instead of safetensors, no file or another path, keys renamed or dropped,
    a dtype cast, the learner's model untied. Introduced in lab 08_libraries.
    """
    exercise = "Exercise 5"
    stop_on(not_a_function(exercise, save_tied))
    import safetensors
    import safetensors.torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tied.safetensors"
    path.unlink(missing_ok=True)
    model = seeded(TiedNet, 85)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    _, error = call(save_tied, model, path)
    if error is not None:
        text = str(error)
        if "Some tensors share memory" in text:
            return Feedback(exercise, FAILED, "save_file refused: encoder.weight and "
                            "decoder.weight are one tensor under two names, and save_file will "
                            "not write it twice. safetensors.torch.save_model(model, path) "
                            "writes it once and load_model ties it again.")
        return Feedback(exercise, FAILED, explain(error))
    if model.decoder.weight is not model.encoder.weight:
        return Feedback(exercise, FAILED, "your function untied the model you were given "
                        "(decoder.weight is no longer encoder.weight): it now trains two weights. "
                        "Save without changing the model: save_model(model, path).")
    if not path.exists():
        return Feedback(exercise, FAILED, f"no file at {path.name}: write to the path you are "
                        "given (and a save_file that raised inside a try/except writes nothing).")
    try:
        with safetensors.safe_open(str(path), framework="pt") as file:
            keys = set(file.keys())
            dtypes = {key: file.get_tensor(key).dtype for key in keys}
    except Exception:  # not a safetensors file: say which format it is
        return Feedback(exercise, FAILED, "the file is not safetensors (torch.save writes a "
                        "pickle in a zip): use safetensors.torch.save_model(model, path).")
    if any(dtype != torch.float32 for dtype in dtypes.values()):
        return Feedback(exercise, FAILED, "you saved the weights in another dtype: save them as "
                        "they are.")
    if keys >= set(expected):
        return Feedback(exercise, FAILED, "the file holds encoder.weight and decoder.weight as "
                        "two copies (you cloned them to get past save_file): twice the bytes on "
                        "disk, and load_model refuses the extra key. save_model(model, path) "
                        "writes the shared weight once.")
    fresh = TiedNet()
    try:
        missing, unexpected = safetensors.torch.load_model(fresh, path)
    except RuntimeError as refused:
        if "Unexpected key" not in str(refused) and "Missing key" in str(refused):
            lacks = sorted(set(expected) - keys - {"decoder.weight"})
            return Feedback(exercise, FAILED, f"the file lacks {lacks}: save every weight "
                            "(save_model(model, path)).")
        return Feedback(exercise, FAILED, "load_model cannot restore your file: "
                        f"{_first_error_line(refused)}. Keep the model's own key names: "
                        "save_model(model, path).")
    if missing:
        return Feedback(exercise, FAILED, f"the file lacks {sorted(missing)}: save every weight.")
    if not all(torch.equal(fresh.state_dict()[k], expected[k]) for k in expected):
        return Feedback(exercise, FAILED, "the weights loaded back are not the model's.")
    return Feedback(exercise, PASSED, "one shared weight, written once: save_model drops the "
                                      "duplicate name, and load_model fills both through the "
                                      "model's own tie.")
