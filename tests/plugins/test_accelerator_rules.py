"""The accelerator rules on meta: each rule fires where a Mac or a GPU would fail, and only there.

accelerator_rules.py (here) is the mode; accelerator_rules_plugin.py (here) runs it inside
the nbval run of every notebook and lab.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import accelerator_rules as ar
import nbformat
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
META = torch.device("meta")


def _matmul_cpu_at_meta():
    return torch.ones(2, 3) @ torch.ones(3, 2, device=META)


def _conv_meta_weights_cpu_input():
    return nn.Conv2d(1, 1, 3, device=META)(torch.ones(1, 1, 5, 5))


def _linear_meta_weights_cpu_input():
    return nn.Linear(3, 2, device=META)(torch.ones(1, 3))


# (snippet, rule it breaks, does meta itself raise?)
VIOLATIONS = {
    "float64 created on meta": (
        lambda: torch.zeros(2, dtype=torch.float64, device=META), "mps-float64", False),
    "float64 cast to meta with .to(device, dtype)": (
        lambda: torch.ones(2).to(META, torch.float64), "mps-float64", False),
    "float64 by .double() on meta": (
        lambda: torch.ones(2, device=META).double(), "mps-float64", False),
    "float64 by torch.tensor on meta": (
        lambda: torch.tensor([1.0], dtype=torch.float64, device=META), "mps-float64", False),
    "Module.to(meta, float64)": (
        lambda: nn.Linear(2, 2).to(META, torch.float64), "mps-float64", False),
    "cpu @ meta": (_matmul_cpu_at_meta, "cuda-mixed-devices", False),
    "Conv2d with meta weights, CPU input": (
        _conv_meta_weights_cpu_input, "cuda-mixed-devices", False),
    "Embedding on meta, CPU indices": (
        lambda: nn.Embedding(5, 3, device=META)(torch.tensor([1, 2])), "cuda-mixed-devices",
        False),
    "one-element 1-d CPU tensor times meta": (
        lambda: torch.ones(2, device=META) * torch.tensor([0.5]), "cuda-mixed-devices", True),
    "Linear with meta weights, CPU input": (
        _linear_meta_weights_cpu_input, "cuda-mixed-devices", True),
    ".numpy() of meta": (lambda: torch.zeros(2, device=META).numpy(), "cuda-numpy", True),
    "numpy.asarray of meta": (
        lambda: __import__("numpy").asarray(torch.zeros(2, device=META)), "cuda-numpy", True),
}

ALLOWED = {
    "0-dim CPU tensor with a meta tensor": lambda: torch.ones(2, device=META) * torch.tensor(2.0),
    "0-dim CPU tensor in torch.where": lambda: torch.where(
        torch.ones(2, device=META) > 0, torch.ones(2, device=META), torch.tensor(0.0)),
    "CPU index tensor indexing meta": lambda: torch.ones(5, device=META)[torch.tensor([0, 2])],
    "CPU index tensor assigning into meta": lambda: torch.ones(5, device=META).__setitem__(
        torch.tensor([0, 2]), torch.tensor(1.0)),
    "pure CPU work, float64 included": lambda: (
        torch.ones(2, 2, dtype=torch.float64) @ torch.ones(2, 2, dtype=torch.float64)).numpy(),
    "pure CPU Linear and Conv2d": lambda: (nn.Linear(3, 2)(torch.ones(1, 3)),
                                          nn.Conv2d(1, 1, 3)(torch.ones(1, 1, 5, 5))),
    "pure meta float32": lambda: nn.Linear(3, 2, device=META)(torch.ones(4, 3, device=META)),
    "pure meta float16": lambda: torch.ones(2, 3, device=META, dtype=torch.float16) @ torch.ones(
        3, 2, device=META, dtype=torch.float16),
    "pure meta bfloat16 conv": lambda: nn.Conv2d(1, 1, 3, device=META, dtype=torch.bfloat16)(
        torch.ones(1, 1, 5, 5, device=META, dtype=torch.bfloat16)),
    "float64 CPU -> meta as float32 via .to(other, torch.float32)": lambda: torch.ones(
        2, dtype=torch.float64).to(META, torch.float32),
    "torch.tensor float64 on the CPU -> meta with dtype=float32": lambda: torch.tensor(
        [1.0], dtype=torch.float64).to(META, dtype=torch.float32),
    "torch.tensor float32 made on meta": lambda: torch.tensor([1.0], device=META),
    "Module.to(meta)": lambda: nn.Linear(2, 2).to(META),
    "copy_ from CPU into meta": lambda: torch.ones(2, device=META).copy_(torch.ones(2)),
    ".numpy(force=True) of a CPU tensor": lambda: torch.ones(2).numpy(force=True),
}


def _run(snippet, **options):
    """Run ``snippet`` under the rules; return (violations, exception or None)."""
    with ar.enforce(**options) as rules:
        try:
            snippet()
        except Exception as error:  # noqa: BLE001 (the test inspects it)
            return rules.take(), error
        return rules.take(), None


@pytest.mark.parametrize("name", VIOLATIONS)
def test_each_rule_fires_where_a_mac_or_gpu_would_fail(name):
    snippet, rule, meta_raises = VIOLATIONS[name]
    found, error = _run(snippet)
    assert [v.rule for v in found] == [rule], found
    assert error is not None, "the broken rule must stop the code, as the real device would"
    if meta_raises:  # meta's own exception goes on, unchanged, with the rule as a note
        assert not isinstance(error, ar.AcceleratorRuleError)
        assert any(rule in note and "would fail here" in note
                   for note in getattr(error, "__notes__", []))
    else:  # meta allowed it: the mode raises what the real device raises
        assert isinstance(error, ar._ERRORS[rule])
        assert isinstance(error, TypeError if rule == "mps-float64" else RuntimeError)
        assert rule in str(error) and "would fail here" in str(error)


@pytest.mark.parametrize("name", VIOLATIONS)
def test_each_violation_is_found_by_its_own_rule_alone(name):
    snippet, rule, meta_raises = VIOLATIONS[name]
    found, error = _run(snippet, enabled=set(ar.RULES) - {rule})
    assert found == []
    assert (error is not None) == meta_raises  # without the rule, meta lets it pass


@pytest.mark.parametrize("name", ALLOWED)
def test_what_cuda_and_mps_accept_passes(name):
    found, error = _run(ALLOWED[name])
    assert error is None and found == []


def test_the_message_names_the_rule_the_operation_and_the_line():
    found, error = _run(_matmul_cpu_at_meta)
    message = str(error)
    assert "'cuda-mixed-devices'" in message and "mm(...) got self on cpu, mat2 on meta" in message
    assert "tests/plugins/test_accelerator_rules.py" in message and "torch.ones(2, 3) @" in message
    assert "silently allowed" in message and "A GPU (CUDA) or a Mac (MPS) would fail" in message


def test_an_allowed_rule_is_recorded_not_raised():
    found, error = _run(_matmul_cpu_at_meta, allowed={"cuda-mixed-devices"})
    assert error is None
    assert [(v.rule, v.allowed, v.meta_raised) for v in found] == [
        ("cuda-mixed-devices", True, False)]
    found, error = _run(_matmul_cpu_at_meta, allowed={"mps-float64"})
    assert isinstance(error, ar.MixedDevicesRuleError)  # allowing one rule allows no other


def test_float64_is_blamed_where_it_reaches_the_device_not_at_every_later_use():
    def snippet():
        x = torch.zeros(2, dtype=torch.float64, device=META)
        return (x + 1).sum()

    found, error = _run(snippet, allowed={"mps-float64"})
    assert error is None and len(found) == 1 and "zeros" in found[0].what


def test_patches_are_removed_after_the_block():
    original_numpy, original_tensor = torch.Tensor.numpy, torch.tensor
    with ar.enforce():
        assert torch.Tensor.numpy is not original_numpy
    assert torch.Tensor.numpy is original_numpy and torch.tensor is original_tensor


class _Names(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_another_mode_entered_inside_sees_every_op_and_the_rules_still_hold():
    with ar.enforce() as rules, _Names() as ledger:
        torch.ones(2).to(META)
        with pytest.raises(ar.MixedDevicesRuleError):
            _matmul_cpu_at_meta()
    assert ledger.names == ["aten.ones", "aten._to_copy", "aten.ones", "aten.ones", "aten.mm"]
    assert [v.rule for v in rules.take()] == ["cuda-mixed-devices"]


def test_the_rules_entered_inside_another_mode_leave_it_working():
    with _Names() as ledger, ar.enforce() as rules:
        torch.ones(2).to(META)
        with pytest.raises(ar.Float64RuleError):
            torch.zeros(1, dtype=torch.float64, device=META)
    assert ledger.names == ["aten.ones", "aten._to_copy", "aten.zeros"]
    assert [v.rule for v in rules.take()] == ["mps-float64"]


def test_utils_aten_ops_counts_the_same_under_the_rules():
    from utils.ops import aten_ops

    def snippet():
        return torch.zeros(3).to(META)

    plain = aten_ops(snippet)
    with ar.enforce():
        assert aten_ops(snippet) == plain == ["aten.zeros", "aten._to_copy"]


NOTEBOOKS = sorted(p.relative_to(ROOT).as_posix()
                   for p in [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("labs/**/*.ipynb")]
                   if ".ipynb_checkpoints" not in p.parts)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_meta_only_tags_name_real_rules_and_notebooks_never_mention_the_mode(notebook):
    for cell in nbformat.read(ROOT / notebook, as_version=4).cells:
        for tag in cell.metadata.get("tags", []):
            if tag.startswith("meta-only:"):
                assert tag.split(":", 1)[1] in ar.RULES, f"{notebook}: unknown rule in {tag!r}"
        assert "accelerator_rules" not in cell.source and "accelerator rule" not in cell.source


# -- the plugin, end to end, on a small notebook -------------------------------------------------
def _cell(cell_id, source, output=None, tags=(), error=None):
    cell = nbformat.v4.new_code_cell(source, id=cell_id, execution_count=1)
    if tags:
        cell.metadata["tags"] = list(tags)
    if output is not None:
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    if error is not None:
        cell.outputs = [nbformat.v4.new_output("error", ename=error[0], evalue=error[1],
                                               traceback=[])]
    return cell


CELLS = [
    _cell("setup", "import torch\nm = torch.device('meta')"),
    _cell("tagged-mixed", "print((torch.ones(2, 3) @ torch.ones(3, 2, device=m)).device)", "cpu\n",
          tags=["meta-only:cuda-mixed-devices"]),
    _cell("tagged", "print(torch.zeros(1, dtype=torch.float64, device=m).dtype)",
          "torch.float64\n", tags=["meta-only:mps-float64"]),
    _cell("broken", "y = torch.ones(2, 3) @ torch.ones(3, 2, device=m)"),
    _cell("stale", "z = torch.ones(2)", tags=["meta-only:mps-float64"]),
    _cell("swallowed", "try:\n    torch.ones(2, 3) @ torch.ones(3, 2, device=m)\n"
          "except RuntimeError:\n    pass"),
    _cell("meta-raises-too", "torch.nn.Linear(3, 2, device=m)(torch.ones(1, 3))",
          tags=["raises-exception"],
          error=("RuntimeError", "Tensor on device meta is not on the expected device cpu!")),
    _cell("unknown-tag", "x = 1", tags=["meta-only:float64"]),
    _cell("ledger", "from torch.utils._python_dispatch import TorchDispatchMode\n"
          "class Names(TorchDispatchMode):\n"
          "    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
          "        print(func.overloadpacket)\n"
          "        return func(*args, **(kwargs or {}))\n"
          "with Names():\n    x = torch.ones(2).to(m)", "aten.ones\naten._to_copy\n"),
]
EXPECTED = {  # cell id -> None (passes) or a phrase its failure must contain
    "setup": None, "tagged-mixed": None, "tagged": None,
    "broken": "breaks a rule of real accelerators",
    "stale": "no longer breaks 'mps-float64' (remove its tag 'meta-only:mps-float64')",
    "swallowed": "'cuda-mixed-devices' broken: mm(...)",
    "meta-raises-too": None, "ledger": None,
    "unknown-tag": "unknown accelerator rule(s) ['float64']",
}


def test_plugin_fails_broken_and_stale_cells_and_keeps_tagged_ones_green(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=CELLS)
    nbformat.write(notebook, tmp_path / "rules.ipynb")
    env = {**os.environ, "ACCELERATOR_RULES": "enforce",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-p", "tests.plugins.accelerator_rules_plugin", "--nbval",
         "--nbval-current-env",
         "--rootdir", str(tmp_path), "--junitxml", str(tmp_path / "out.xml"),
         str(tmp_path / "rules.ipynb")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    cases = ET.parse(tmp_path / "out.xml").getroot().iter("testcase")
    outcome = {}
    for case in cases:
        failure = case.find("failure")
        outcome[case.get("name")] = None if failure is None else failure.get("message", "") + (
            failure.text or "")
    ids = [c.id for c in CELLS]
    for index, cell_id in enumerate(ids):
        got, want = outcome[f"Cell {index}"], EXPECTED[cell_id]
        if want is None:
            assert got is None, f"{cell_id} should pass: {got}"
        else:
            assert got is not None and want in got, f"{cell_id}: {want!r} not in {got!r}"
