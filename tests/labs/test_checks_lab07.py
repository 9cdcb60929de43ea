"""labchecks, lab 07: every differently written right answer passes, each known wrong answer
gets the message that names its misconception, and the stub is reported as not attempted.
Run on the CPU with meta as the second device, as on a CPU-only machine."""

from __future__ import annotations

import functools
import math
import time

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch import nn

import utils
from labchecks import lab07
from labchecks import lab07 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED, Feedback
from labchecks.lab07 import exercise3_budgets, largest_batch_reference

OTHER = torch.device("meta")
# a learner's float(loss) on a tensor that requires grad warns; that is their code, not ours
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")
WEIGHTS = lab07.CLASS_WEIGHTS
F = nn.functional


# --- exercise 1: the training loop ---------------------------------------------------------


def fast_total_detach(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    weights = torch.tensor(WEIGHTS, device=device)
    total = torch.zeros((), device=device)
    for step in range(steps):
        rows = slice(step * 32, (step + 1) * 32)
        loss = F.cross_entropy(model(features[rows]), labels[rows], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total.item() / steps


def fast_stack_losses(model, optimizer, features, labels, device, steps):
    inputs = features[: steps * 32].to(device)  # only the rows it needs, once
    targets = labels[: steps * 32].to(device)
    weights = torch.as_tensor(WEIGHTS).to(device)
    losses = []
    for batch, target in zip(inputs.split(32), targets.split(32), strict=True):
        loss = F.cross_entropy(model(batch), target, weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses).mean().item()


def fast_string_device_and_float(model, optimizer, features, labels, device, steps):
    device = str(device)
    data = features.to(device=device), labels.to(device=device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS).to(device))
    running = torch.tensor(0.0).to(device)
    for step in range(steps):
        start = step * 32
        loss = loss_fn(model(data[0][start:start + 32]), data[1][start:start + 32])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running = running + loss.detach()
    return float(running / steps)


def fast_indices(model, optimizer, features, labels, device, steps):
    features = features.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    weights = features.new_tensor(WEIGHTS)  # built from Python data, once
    total = features.new_zeros(())
    for step in range(steps):
        index = torch.arange(step * 32, (step + 1) * 32, device=device)
        loss = F.cross_entropy(model(features[index]), labels[index], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())
    return (total / steps).item()


def fast_returns_cpu_tensor(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    weights = torch.tensor(WEIGHTS, device=device)
    total = 0
    for step in range(steps):
        rows = slice(step * 32, (step + 1) * 32)
        loss = F.cross_entropy(model(features[rows]), labels[rows], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
    return (total / steps).cpu()  # one copy back, after the loop


def fast_with_torch_device(model, optimizer, features, labels, device, steps):
    device = torch.device(device)
    with torch.no_grad():
        pass  # harmless
    batches = list(zip(features.to(device).split(32), labels.to(device).split(32), strict=True))
    weights = torch.full((3,), 1.0, device=device)
    weights[1] = 2.0
    total = torch.zeros((), device=device)
    for inputs, targets in batches[:steps]:
        loss = F.cross_entropy(model(inputs), targets, weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total.item() / steps


def fast_as_tensor_once(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    weights = torch.as_tensor(WEIGHTS, device=device)  # from Python data, once
    total = torch.zeros((), device=device)
    for step in range(steps):
        rows = slice(step * 32, (step + 1) * 32)
        loss = F.cross_entropy(model(features[rows]), labels[rows], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.detach()
    return total.item() / steps


def fast_chunks_and_loss_module(model, optimizer, features, labels, device, steps):
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS, device=device))
    chunks = zip(features.to(device).chunk(16), labels.to(device).chunk(16), strict=True)
    losses = []
    for _, (inputs, targets) in zip(range(steps), chunks, strict=False):
        loss = loss_fn(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return sum(losses).item() / steps


def fast_running_mean(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    weights = torch.tensor(WEIGHTS).to(device)
    mean = torch.zeros((), device=device)
    for step in range(steps):
        rows = slice(step * 32, (step + 1) * 32)
        loss = F.cross_entropy(model(features[rows]), labels[rows], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean += (loss.detach() - mean) / (step + 1)
    return mean.item()


def fast_numpy_weights_once(model, optimizer, features, labels, device, steps):
    import numpy as np

    weights = torch.from_numpy(np.array(WEIGHTS, dtype=np.float32)).to(device)
    features, labels = features.to(device), labels.to(device)
    total = torch.zeros((), device=device)
    for step in range(steps):
        start = 32 * step
        loss = F.cross_entropy(model(features[start:start + 32]), labels[start:start + 32],
                               weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
    return float((total / steps).item())


RIGHT_TRAININGS = [fast_total_detach, fast_stack_losses, fast_string_device_and_float,
                   fast_indices, fast_returns_cpu_tensor, fast_with_torch_device,
                   fast_as_tensor_once, fast_chunks_and_loss_module, fast_running_mean,
                   fast_numpy_weights_once]


# Written fresh, never tuned against. The check also runs each loop as a machine
# with two GPUs would (given cuda:1), so a branch only a GPU takes is judged here too.
def fresh_cat_of_views(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    weights = torch.tensor([1.0, 2.0, 1.0]).to(device)
    losses = []
    for step in range(steps):
        start = 32 * step
        loss = F.cross_entropy(model(features[start:start + 32]), labels[start:start + 32],
                               weight=weights)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().view(1))
    return torch.cat(losses).mean().item()


def fresh_index_made_on_the_device(model, optimizer, features, labels, device, steps):
    features, labels = features.to(device), labels.to(device)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor(WEIGHTS, device=device))
    total = 0
    for step in range(steps):
        index = torch.arange(step * 32, (step + 1) * 32, device=device)
        loss = loss_fn(model(features[index]), labels[index])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = total + loss.detach()
    return (total / steps).item()


def fresh_one_sync_after_the_loop(model, optimizer, features, labels, device, steps):
    features = features.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    weights = torch.tensor(WEIGHTS, device=device)
    total = torch.zeros((), device=device)
    for step in range(steps):
        rows = slice(step * 32, (step + 1) * 32)
        loss = F.cross_entropy(model(features[rows]), labels[rows], weight=weights)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total.add_(loss.detach())
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # once, after the loop: free
    return total.item() / steps


def fresh_loop(sync_each_step="", data_on=None, per_step_gpu_batch=False):
    """The right loop, written afresh, with a mistake only a GPU machine (or an indexed
    device) shows: a synchronize every step, the data sent elsewhere, a per-step copy."""

    def train(model, optimizer, features, labels, device, steps):
        kept_features = features
        if data_on == "cuda branch":
            features = features.cuda() if torch.cuda.is_available() else features.to(device)
            labels = labels.cuda() if torch.cuda.is_available() else labels.to(device)
        elif data_on == "type":
            features, labels = features.to(device.type), labels.to(device.type)
        else:
            features, labels = features.to(device), labels.to(device)
        weights = torch.tensor(WEIGHTS, device=device)
        total = torch.zeros((), device=device)
        for step in range(steps):
            rows = slice(step * 32, (step + 1) * 32)
            inputs = features[rows]
            if per_step_gpu_batch and torch.cuda.is_available():
                inputs = kept_features[rows].pin_memory().to(device, non_blocking=True)
            loss = F.cross_entropy(model(inputs), labels[rows], weight=weights)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach()
            if sync_each_step == "available" and torch.cuda.is_available():
                torch.cuda.synchronize()  # "for accurate timing"
            elif sync_each_step == "type" and device.type == "cuda":
                torch.cuda.synchronize(device)
            elif sync_each_step == "stream" and torch.cuda.is_available():
                torch.cuda.current_stream().synchronize()
        return total.item() / steps

    return train


FRESH_RIGHT_TRAININGS = {f"fresh: {f.__name__}": f for f in (
    fresh_cat_of_views, fresh_index_made_on_the_device, fresh_one_sync_after_the_loop)}
RIGHT_TRAININGS += list(FRESH_RIGHT_TRAININGS.values())
FRESH_WRONG_TRAININGS = {
    "fresh: synchronize every step when CUDA is there": (
        fresh_loop(sync_each_step="available"), ["calls synchronize 1 time(s) every step",
                                                 "`.item()` once"]),
    "fresh: synchronize every step on a cuda device": (
        fresh_loop(sync_each_step="type"), ["calls synchronize 1 time(s) every step"]),
    "fresh: the stream synchronized every step": (
        fresh_loop(sync_each_step="stream"), ["calls synchronize"]),
    "fresh: the data sent with .cuda() when CUDA is there": (
        fresh_loop(data_on="cuda branch"), ["`.cuda()` sends it to the current GPU"]),
    "fresh: the data sent to the device's type": (
        fresh_loop(data_on="type"), ["'cuda' without the index"]),
    "fresh: each batch pinned and copied on a GPU": (
        fresh_loop(per_step_gpu_batch=True), ["copies a batch of features, 2.0 KiB a step"]),
}


@pytest.mark.parametrize(("train", "phrases"), FRESH_WRONG_TRAININGS.values(),
                         ids=FRESH_WRONG_TRAININGS)
def test_fast_training_judges_what_a_gpu_machine_would_run(train, phrases):
    assert_one_line(_status(checks.check_fast_training(train, OTHER), FAILED, *phrases))


@pytest.mark.parametrize("train", RIGHT_TRAININGS)
def test_fast_training_accepts_every_right_style(train):
    _status(checks.check_fast_training(train, OTHER), PASSED, "0 copies", "0 times")


def make_loop(whole_dataset=False, per_batch=False, weights_each_step=False,
              weights_on_device_each_step=False, item_each_step=False, float_each_step=False,
              total_is_sum=False, no_weights=False, ignore_device=False, returns_device=False,
              as_tensor_each_step=False, if_on_loss=False, cpu_each_step=False,
              cpu_index=False, last_loss=False, returns_nothing=False):
    """The right loop with one (or more) of the known mistakes left in."""

    def train(model, optimizer, features, labels, device, steps):
        if ignore_device:
            device = torch.device("cpu")
        if not (whole_dataset or per_batch):
            features, labels = features.to(device), labels.to(device)
        weights = torch.tensor(WEIGHTS, device=device)
        total, losses = torch.zeros((), device=device), []
        for step in range(steps):
            rows = slice(step * 32, (step + 1) * 32)
            if whole_dataset:
                inputs, targets = features.to(device)[rows], labels.to(device)[rows]
            elif per_batch:
                inputs, targets = features[rows].to(device), labels[rows].to(device)
            elif cpu_index:
                index = torch.arange(step * 32, (step + 1) * 32)  # made on the CPU
                inputs, targets = features[index], labels[index]
            else:
                inputs, targets = features[rows], labels[rows]
            if as_tensor_each_step:
                weights = torch.as_tensor([1.0, 2.0, 1.0], device=device)
            if weights_each_step:
                weights = torch.tensor(WEIGHTS).to(device)
            if weights_on_device_each_step:
                weights = torch.tensor(WEIGHTS, device=device)
            loss = F.cross_entropy(model(inputs), targets,
                                   weight=None if no_weights else weights)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if item_each_step:
                losses.append(loss.item())
            elif float_each_step:
                losses.append(float(loss))
            elif cpu_each_step:
                losses.append(loss.detach().cpu())
            else:
                total += loss.detach()
            if if_on_loss and loss > 100:  # a divergence guard, every step
                break
        if returns_nothing:
            return None
        if last_loss:
            return loss.item()
        if cpu_each_step:
            return float(sum(losses) / len(losses))
        if losses:
            return sum(losses) / len(losses)
        if returns_device:
            return total / steps
        return total.item() if total_is_sum else total.item() / steps

    return train


WRONG_TRAININGS = {
    "whole_dataset": ["whole dataset every step", "features, all 512 rows, 32.0 KiB"],
    "per_batch": ["copies each batch every step", "a batch of features, 2.0 KiB", "move it once"],
    "weights_each_step": ["class weights on the CPU every step", "with `.to(device)` (12 bytes"],
    "weights_on_device_each_step": ["`torch.tensor(..., device=device)` every step"],
    "as_tensor_each_step": ["`torch.as_tensor(..., device=device)` every step"],
    "item_each_step": ["reads a value on the host every step (`.item()`)", "loss.detach()"],
    "float_each_step": ["reads a value on the host every step (`float(loss)`)"],
    "if_on_loss": ["an `if` on a tensor"],
    "cpu_each_step": ["copies a result back to the host every step"],
    "cpu_index": ["indexes device tensors with a CPU tensor every step"],
    "total_is_sum": ["the fix changed the result", "That is the sum"],
    "no_weights": ["the fix changed the result", "the mean without the class weights"],
    "last_loss": ["That is the last step's loss alone"],
    "ignore_device": ["device=meta", "move features, labels and the class weights"],
    "returns_device": ["returned a tensor on the device"],
    "returns_nothing": ["train returned NoneType"],
}


@functools.cache
def verdict(check, answer) -> Feedback:
    """``check(answer)``, judged once: a table's test and the test of its distinct messages
    share it."""
    return check(answer)


@functools.cache
def training_verdict(mistake: str) -> Feedback:
    return checks.check_fast_training(make_loop(**{mistake: True}), OTHER)


@pytest.mark.parametrize(("mistake", "phrases"), WRONG_TRAININGS.items(),
                         ids=WRONG_TRAININGS.keys())
def test_fast_training_names_each_mistake(mistake, phrases):
    feedback = assert_one_line(_status(training_verdict(mistake), FAILED, *phrases))
    assert [training_verdict(m).message for m in WRONG_TRAININGS].count(feedback.message) == 1


def test_fast_training_names_every_mistake_of_the_slow_loop():
    feedback = _status(checks.check_fast_training(lab07.train_slow, OTHER), FAILED,
                       "whole dataset", "class weights", "reads a value on the host")
    assert feedback.message.count("; and ") == 2


def test_fast_training_device_mistake_does_not_show_up_on_the_cpu_alone():
    # the device mistake is invisible when the check's second device is the CPU too: it is
    # the run on meta (or the GPU) that exposes it
    _status(checks.check_fast_training(make_loop(ignore_device=True), "cpu"), PASSED)


def test_fast_training_stub_is_not_attempted():
    _status(checks.check_fast_training(stub, OTHER), NOT_ATTEMPTED)


def test_fast_training_rejects_something_that_is_not_a_function():
    _status(checks.check_fast_training(3.14, OTHER), FAILED, "Pass the function itself")


def test_slow_loop_is_deterministic():
    first = lab07.train_slow(*lab07.model_and_optimizer(), *lab07.data(), "cpu", 3)
    assert first == lab07.train_slow(*lab07.model_and_optimizer(), *lab07.data(), "cpu", 3)


# --- exercise 2: predict the bytes of parameters, gradients and Adam's state ----------------


def adam_loop(model):
    total = 0
    for parameter in model.parameters():
        size = parameter.numel() * parameter.element_size()
        total += 4 * size if parameter.requires_grad else size
    return total


def adam_comprehension(model):
    return sum(p.nbytes * (4 if p.requires_grad else 1) for p in model.parameters())


def adam_parts(model):
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return weights + trainable + 2 * trainable  # gradients, then exp_avg and exp_avg_sq


def adam_untyped_storage(model):
    unique = {p.untyped_storage().data_ptr(): p for p in model.parameters()}
    return sum(p.untyped_storage().nbytes() * (1 + 3 * p.requires_grad) for p in unique.values())


def adam_named(model):
    seen, total = set(), 0
    for _, parameter in model.named_parameters():
        if id(parameter) not in seen:
            seen.add(id(parameter))
            total += parameter.element_size() * parameter.numel() * (
                4 if parameter.requires_grad else 1)
    return total


def adam_tensor_result(model):
    return torch.tensor(adam_loop(model))  # a one-element tensor is accepted too


def adam_numpy_prod(model):
    import numpy as np

    return sum(np.prod(p.shape) * p.element_size() * (4 if p.requires_grad else 1)
               for p in model.parameters())


def adam_numpy_int64(model):
    import numpy as np

    return np.int64(adam_loop(model))


def adam_math_prod(model):
    return sum(math.prod(p.shape) * p.element_size() * (1 + 3 * int(p.requires_grad))
               for p in model.parameters())


def adam_float_result(model):
    return float(adam_loop(model))


def adam_state_dict_free(model):
    unique = {id(p): p for p in model.parameters()}.values()
    weights = sum(p.nbytes for p in unique)
    return weights + 3 * sum(p.nbytes for p in unique if p.requires_grad)


RIGHT_ADAMS = [adam_loop, adam_comprehension, adam_parts, adam_untyped_storage, adam_named,
               adam_tensor_result, adam_numpy_prod, adam_numpy_int64, adam_math_prod,
               adam_float_result, adam_state_dict_free]


# Written fresh, never tuned against.
def adam_dedup_by_pointer(model):
    seen, total = set(), 0
    for _, p in model.named_parameters(remove_duplicate=False):
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.nbytes * (1 + 3 * p.requires_grad)
    return total


FRESH_RIGHT_ADAMS = {
    "fresh: nbytes, 4 or 1": lambda m: sum(p.nbytes * (4 if p.requires_grad else 1)
                                           for p in m.parameters()),
    "fresh: deduplicated by data_ptr": adam_dedup_by_pointer,
    "fresh: bits // 8": lambda m: sum(p.numel() * (torch.finfo(p.dtype).bits // 8)
                                      * (4 if p.requires_grad else 1) for p in m.parameters()),
}
FRESH_WRONG_ADAMS = {
    "fresh: the state dict, four times": (
        lambda m: sum(4 * v.nbytes for v in m.state_dict().values()), "counted the buffers"),
    "fresh: trainable four times, plus buffers": (
        lambda m: sum(4 * p.nbytes for p in m.parameters() if p.requires_grad)
        + sum(b.nbytes for b in m.buffers()), "Buffers (BatchNorm's running statistics)"),
    "fresh: three copies, no weight": (
        lambda m: sum(3 * p.nbytes for p in m.parameters() if p.requires_grad),
        "three copies of each parameter; training keeps four"),
}
RIGHT_ADAMS += list(FRESH_RIGHT_ADAMS.values())


@pytest.mark.parametrize(("adam_bytes", "phrase"), FRESH_WRONG_ADAMS.values(),
                         ids=FRESH_WRONG_ADAMS)
def test_adam_bytes_names_fresh_mistakes(adam_bytes, phrase):
    assert_one_line(_status(checks.check_adam_bytes(adam_bytes), FAILED, phrase))


@pytest.mark.parametrize("adam_bytes", RIGHT_ADAMS)
def test_adam_bytes_accepts_every_right_style(adam_bytes):
    _status(checks.check_adam_bytes(adam_bytes), PASSED, "4 copies")


def numbers(model):
    return sum(p.numel() for p in model.parameters())


def weights(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize(("adam_bytes", "phrase"), [
    (weights, "the weights alone"),
    (lambda m: 4 * numbers(m), "counted in numbers, not bytes"),
    (lambda m: 2 * weights(m), "Adam also keeps two running averages"),
    (lambda m: 3 * weights(m), "Adam's *two* running averages"),
    (lambda m: 16 * numbers(m), "assumed 4 bytes per number"),
    (lambda m: 4 * weights(m), "requires_grad=False"),
    (lambda m: adam_loop(m) + 4 * sum(b.nbytes for b in m.buffers()), "counted the buffers"),
    (lambda m: adam_loop(m) + sum(b.nbytes for b in m.buffers()), "Buffers"),
    (lambda m: sum(4 * p.nbytes for _, p in m.named_parameters(remove_duplicate=False)),
     "shared weight twice"),
    (lambda m: adam_loop(m) / 2**20, "in MB or GB; return bytes"),
    (lambda m: adam_loop(m) / 1e9, "in MB or GB; return bytes"),
    (lambda m: adam_loop(m) + 1, "three times that again"),
    (lambda m: str(adam_loop(m)), "return a number of bytes"),
    (lambda m: sum(4 * p.nbytes for p in m.parameters() if p.requires_grad),
     "The frozen layer's weights still take memory"),
    (lambda m: sum(p.nbytes + (12 * p.numel() if p.requires_grad else 0)
                   for p in m.parameters()), "in the parameter's own dtype"),
])
def test_adam_bytes_names_each_mistake(adam_bytes, phrase):
    assert_one_line(_status(verdict(checks.check_adam_bytes, adam_bytes), FAILED, phrase))


def test_adam_bytes_stub_is_not_attempted():
    _status(checks.check_adam_bytes(stub), NOT_ATTEMPTED)


def test_adam_bytes_models_cover_buffers_dtypes_ties_and_frozen_layers():
    models = lab07.exercise2_models()
    assert any(list(m.buffers()) for m, _ in models.values())
    assert any(p.dtype == torch.bfloat16 for m, _ in models.values() for p in m.parameters())
    assert any(not p.requires_grad for m, _ in models.values() for p in m.parameters())
    assert any(len(list(m.named_parameters(remove_duplicate=False))) > len(list(m.parameters()))
               for m, _ in models.values())


# --- exercise 3: the largest batch that fits ----------------------------------------------


def fits(model, rows, features, budget):
    return utils.footprint(model, torch.zeros(rows, features)).total <= budget


def batch_bisect(model, features, budget):
    if not fits(model, 1, features, budget):
        return 0
    low, high = 1, 2
    while fits(model, high, features, budget):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if fits(model, middle, features, budget):
            low = middle
        else:
            high = middle
    return low


def batch_linear_formula(model, features, budget):
    one = utils.footprint(model, torch.zeros(1, features)).total
    two = utils.footprint(model, torch.zeros(2, features)).total
    per_row, fixed = two - one, one - (two - one)
    return max(0, math.floor((budget - fixed) / per_row))


def batch_halve_then_climb(model, features, budget):
    rows = 4096
    while rows and not fits(model, rows, features, budget):
        rows //= 2
    while rows and fits(model, rows + 1, features, budget):
        rows += 1
    return rows


def batch_powers_then_step(model, features, budget):
    rows = 0
    step = 256
    while step:
        if fits(model, rows + step, features, budget):
            rows += step
        else:
            step //= 2
    return rows


def batch_recursive(model, features, budget, low=0, high=4096):
    if high - low <= 1:
        return low
    middle = (low + high) // 2
    if fits(model, middle, features, budget):
        return batch_recursive(model, features, budget, middle, high)
    return batch_recursive(model, features, budget, low, middle)


def batch_bisect_module(model, features, budget):
    import bisect

    sizes = range(1, 4096)
    return bisect.bisect_right(sizes, budget, key=lambda rows: utils.footprint(
        model, torch.zeros(rows, features)).total)


def batch_numpy_formula(model, features, budget):
    import numpy as np

    one = utils.footprint(model, torch.zeros(1, features)).total
    two = utils.footprint(model, torch.zeros(2, features)).total
    rows = np.floor((budget - (2 * one - two)) / (two - one)).astype(np.int64)
    return max(np.int64(0), rows)


def batch_random_inputs(model, features, budget):
    def fits_random(rows):
        return utils.footprint(model, torch.randn(rows, features)).total <= budget

    low, high = 0, 8192  # low fits (or is 0), high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits_random(middle) else (low, middle)
    return low


def batch_meta_inputs(model, features, budget):
    rows = 0
    while utils.footprint(model, torch.empty(rows + 64, features, device="meta")).total <= budget:
        rows += 64
    while utils.footprint(model, torch.empty(rows + 1, features, device="meta")).total <= budget:
        rows += 1
    return rows


def batch_tensor_result(model, features, budget):
    return torch.tensor(batch_bisect(model, features, budget))


RIGHT_BATCHES = [batch_bisect, batch_linear_formula, batch_halve_then_climb,
                 batch_powers_then_step, batch_recursive, batch_bisect_module,
                 batch_numpy_formula, batch_random_inputs, batch_meta_inputs,
                 batch_tensor_result]


def batch_bisect_with_key(model, features, budget):
    import bisect

    def total(rows):
        return utils.footprint(model, torch.empty(rows, features, device="meta")).total

    return bisect.bisect_right(range(1, 1 << 20), budget, key=total)


def batch_from_one_and_three_rows(model, features, budget):
    def total(rows):
        return utils.footprint(model, torch.zeros(rows, features)).total

    one, three = total(1), total(3)
    if one > budget:
        return 0
    per_row = (three - one) // 2
    rows = 1 + int((budget - one) // per_row)
    while total(rows) > budget:  # guard the rounding
        rows -= 1
    return rows


def batch_galloping(model, features, budget):
    def fits_rows(rows):
        return utils.footprint(model, torch.zeros(rows, features)).total <= budget

    if not fits_rows(1):
        return 0
    rows, step = 1, 1
    while step:
        if fits_rows(rows + step):
            rows += step
            step *= 2
        else:
            step //= 2
    return rows


FRESH_RIGHT_BATCHES = {f"fresh: {f.__name__}": f for f in (
    batch_bisect_with_key, batch_from_one_and_three_rows, batch_galloping)}
FRESH_WRONG_BATCHES = {
    "fresh: strictly under the budget": (
        lambda m, f, b: batch_bisect(m, f, b - 0.5), "compare with <=, not <"),
    "fresh: the budget read as megabytes": (
        lambda m, f, b: batch_bisect(m, f, b / 1e6), "By your count not even one row fits"),
    "fresh: the bytes of that batch": (
        lambda m, f, b: utils.footprint(m, torch.zeros(max(batch_bisect(m, f, b), 1), f)).total,
        "That is a number of bytes"),
}
RIGHT_BATCHES += list(FRESH_RIGHT_BATCHES.values())


@pytest.mark.parametrize(("largest_batch", "phrase"), FRESH_WRONG_BATCHES.values(),
                         ids=FRESH_WRONG_BATCHES)
def test_largest_batch_names_fresh_mistakes(largest_batch, phrase):
    assert_one_line(_status(checks.check_largest_batch(largest_batch), FAILED, phrase))


@pytest.mark.parametrize("largest_batch", RIGHT_BATCHES)
def test_largest_batch_accepts_every_right_style(largest_batch):
    _status(checks.check_largest_batch(largest_batch), PASSED, "fills exactly")


def too_big_a_batch(model, features, budget):
    # what PyTorch 2.13 raised when a search here asked for a real batch of 32 GiB (quoted
    # from that run, not re-run: asking a shared test machine for 32 GiB is no test)
    raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                       "can't allocate memory: you tried to allocate 34359738368 bytes. "
                       "Error code 12 (Cannot allocate memory)")


def weights_only(model, features, budget):
    fixed = utils.footprint(model, torch.zeros(1, features))
    per_row = 0
    rows = 0
    base = fixed.parameters + fixed.gradients + fixed.optimizer_state
    while base + per_row * (rows + 1) <= budget and rows < 100_000:
        rows += 1000
    return rows if base <= budget else 0


@pytest.mark.parametrize(("largest_batch", "phrase"), [
    (lambda m, f, b: batch_bisect(m, f, b) + 1, "first batch that does not fit"),
    (lambda m, f, b: batch_bisect(m, f, b - 1), "compare with <=, not <"),
    (lambda m, f, b: max(1, batch_bisect(m, f, b)), "Return 0"),
    (weights_only, "count the whole footprint"),
    (lambda m, f, b: batch_bisect(m, f, b) // 2, "which fits: search further"),
    (lambda m, f, b: float(batch_bisect(m, f, b)), "whole number of rows"),
    (lambda m, f, b: batch_with(m, f, b, optimizer=torch.optim.SGD), "plain SGD"),
    (lambda m, f, b: batch_with(m, f, b, optimizer=None), "optimizer=None"),
    (lambda m, f, b: batch_with(m, f, b, training=False), "largest batch for inference"),
    (lambda m, f, b: batch_with(m, f, b, training=False, optimizer=None),
     "largest batch for inference"),
    (lambda m, f, b: batch_bisect(m, f, b * 1.5) if b > 2**20 else batch_bisect(m, f, b),
     "bytes: over the budget"),
    (too_big_a_batch, "more memory than it has (32.0 GiB)"),
    (lambda m, f, b: [batch_bisect(m, f, b)], "returned [274]; return a whole number"),
    (lambda m, f, b: 10**12, "you answered 1000000000000"),  # judged without making 1e12 rows
    (lambda m, f, b: batch_bisect(m, f, b / 2**20), "By your count not even one row fits"),
    (lambda m, f, b: None, "returned None"),
])
def test_largest_batch_names_each_mistake(largest_batch, phrase):
    assert_one_line(_status(verdict(checks.check_largest_batch, largest_batch), FAILED, phrase))


def batch_with(model, features, budget, **options):
    """The right search, with a footprint of another step than the exercise's."""
    def fits_step(rows):
        return utils.footprint(model, torch.zeros(rows, features), **options).total <= budget

    if not fits_step(1):
        return 0
    low, high = 1, 2
    while fits_step(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits_step(middle) else (low, middle)
    return low


def test_largest_batch_stub_is_not_attempted():
    _status(checks.check_largest_batch(stub), NOT_ATTEMPTED)


def test_largest_batch_budgets_include_an_exact_fit_and_none():
    model = lab07.exercise3_model()
    budgets = exercise3_budgets(model)
    answers = [largest_batch_reference(model, 64, b) for b in budgets.values()]
    assert answers[1] == 100 and answers[2] == 0 and answers[0] > 100


def test_a_function_that_never_returns_gets_a_message_not_a_hang(monkeypatch):
    monkeypatch.setattr(lab07, "CALL_LIMIT_S", 0.5)

    def train_for_ever(model, optimizer, features, labels, device, steps):
        while True:
            time.sleep(0.05)  # (a busy loop would spin on in its thread, slowing the tests)

    def search_for_ever(model, features, budget):
        rows = 1
        while rows > 0:  # meant `rows < budget`
            rows += 1
            time.sleep(0.05)

    for check, answer in [(checks.check_fast_training, train_for_ever),
                          (checks.check_adam_bytes, lambda model: train_for_ever(*[None] * 6)),
                          (checks.check_largest_batch, search_for_ever)]:
        assert_one_line(_status(check(answer), FAILED, "had not returned after"))


@pytest.mark.parametrize(("test", "check", "distinct"), [
    (test_adam_bytes_names_each_mistake, checks.check_adam_bytes, 14),
    (test_largest_batch_names_each_mistake, checks.check_largest_batch, 14),
], ids=["adam_bytes", "largest_batch"])
def test_wrong_answers_get_messages_of_their_own(test, check, distinct):
    # the few that share a message give the same number: the weights alone and 4 bytes a
    # number (float32), or SGD and no optimizer, inference with or without Adam
    answers = [answer for answer, _ in test.pytestmark[0].args[1]]
    assert len({verdict(check, answer).message for answer in answers}) == distinct


def test_the_labs_own_slow_loop_is_the_checks_reference():
    """Lab 07 shows its slow loop in a cell; it must compute what the check compares with."""
    import nbformat

    from tools import lessons

    lab = nbformat.read(lessons.SOLUTIONS / "07_moving_data_fast.ipynb", as_version=4)
    [cell] = [c for c in lab.cells if c.source.startswith("def train_slow(")]
    namespace = {"torch": torch, "nn": nn}
    exec(cell.source, namespace)
    args = (*lab07.data(), "cpu", 3)
    assert namespace["train_slow"](*lab07.model_and_optimizer(), *args) == lab07.train_slow(
        *lab07.model_and_optimizer(), *args)
