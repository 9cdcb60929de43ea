"""utils.footprint: one training step on meta gives exact bytes per part, for any model size,
without touching the model you pass; bad input gets a clear error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from utils.footprint import PARTS, Footprint, footprint
from utils.step_memory import mlp

FLOAT = 4


def nbytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def test_linear_stack_matches_the_hand_count():
    with torch.device("meta"):
        model = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)])
    result = footprint(model, torch.randn(64, 4096))
    params = 4 * (4096 * 4096 + 4096) * FLOAT
    assert (result.parameters, result.gradients, result.optimizer_state) == (
        params, params, 2 * params)
    # each Linear saves its input; the first input is the batch, counted as inputs
    assert result.activations == 3 * 64 * 4096 * FLOAT and result.inputs == 64 * 4096 * FLOAT


def test_optimizer_without_state_has_none():
    model = mlp(8, 2)
    assert footprint(model, torch.randn(2, 8), optimizer=torch.optim.SGD).optimizer_state == 0
    momentum = footprint(model, torch.randn(2, 8),
                         optimizer=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9))
    assert momentum.optimizer_state == nbytes(model)


def test_tied_weights_count_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(100, 16)
            self.head = nn.Linear(16, 100, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, tokens):
            return self.head(self.embed(tokens))

    result = footprint(Tied(), torch.tensor([[1, 2, 3]]))
    assert result.parameters == result.gradients == 100 * 16 * FLOAT
    assert result.optimizer_state == 2 * 100 * 16 * FLOAT


def test_buffers_are_their_own_part():
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16))
    result = footprint(model, torch.randn(4, 8))
    assert result.buffers == (16 + 16) * FLOAT + 8  # running mean, var; an int64 counter
    assert result.parameters == nbytes(model)


def test_inference_under_no_grad_keeps_only_weights_and_inputs():
    result = footprint(mlp(32, 3), torch.randn(8, 32), training=False)
    assert result.gradients == result.optimizer_state == result.activations == 0
    assert result.total == nbytes(mlp(32, 3)) + 8 * 32 * FLOAT


def test_bfloat16_halves_every_part():
    full = footprint(mlp(64, 3), torch.randn(8, 64))
    half = footprint(mlp(64, 3), torch.randn(8, 64, dtype=torch.bfloat16), dtype=torch.bfloat16)
    assert half.parameters * 2 == full.parameters and half.activations * 2 == full.activations


def test_the_model_passed_in_is_left_untouched():
    model = mlp(8, 2)
    before = [p.clone() for p in model.parameters()]
    footprint(model, torch.randn(2, 8))
    assert all(p.device.type == "cpu" and p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_seven_billion_parameters_on_meta():
    with torch.device("meta"):
        layers = [nn.TransformerEncoderLayer(4096, 32, 16384, batch_first=True, norm_first=True)
                  for _ in range(32)]
        model = nn.Sequential(nn.Embedding(32000, 4096), *layers, nn.Linear(4096, 32000))
    result = footprint(model, torch.zeros(1, 128, dtype=torch.long), dtype=torch.bfloat16)
    count = sum(p.numel() for p in model.parameters())
    assert 6.5e9 < count < 7e9 and result.parameters == count * 2
    assert result.optimizer_state == 2 * result.parameters
    assert not result.fits(16e9) and result.fits(80e9)  # in bfloat16, without fp32 copies


def test_parts_add_up_and_print():
    result = Footprint(1, 2, 3, 4, 5, 6)
    assert result.total == 21 and list(result.as_dict()) == list(PARTS)
    assert result.fits(21) and not result.fits(20)
    assert result.summary().splitlines()[-1].split() == ["total", "21", "bytes"]


@pytest.mark.parametrize(("model", "optimizer", "message"), [
    ("model", torch.optim.Adam, "needs an nn.Module, got str"),
    (nn.Linear(2, 2), nn.Linear, "is not an optimizer class"),
    (nn.Linear(2, 2), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=1.0), "already built"),
    (nn.Linear(2, 2), 3, "got int"),
    (nn.Linear(2, 2), lambda params: "Adam", "returned str"),
])
def test_bad_input_says_what_to_pass(model, optimizer, message):
    with pytest.raises(TypeError, match=message):
        footprint(model, torch.ones(1, 2), optimizer=optimizer)


def test_inputs_must_be_tensors():
    with pytest.raises(TypeError, match="tensor or a tuple of tensors, got list"):
        footprint(nn.Linear(2, 2), [[1.0, 2.0]])


def test_a_tensor_saved_by_two_layers_counts_once():
    # ReLU saves its output, and the next Linear saves the same tensor as its input
    result = footprint(mlp(32, 3), torch.randn(8, 32))
    assert result.activations == 2 * 8 * 32 * FLOAT


def test_parameters_that_share_one_storage_count_it_once():
    class Halves(nn.Module):
        def __init__(self):
            super().__init__()
            base = torch.zeros(20, 4, device="meta")
            self.first, self.second = nn.Parameter(base[:10]), nn.Parameter(base[10:])

        def forward(self, x):
            return x @ self.first.T + x @ self.second.T

    result = footprint(Halves(), torch.randn(2, 4))
    assert result.parameters == 20 * 4 * FLOAT
