"""The second test environment (make test-torch-next): what it relaxes, it relaxes on purpose.

tests/nbval_sanitize_torch_next.cfg lists the stored outputs that legitimately differ on the
next torch's CUDA build. Each entry names its cells; it must match those cells' stored outputs
and nothing else in any notebook or lab, so it can never hide a difference elsewhere.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRA = ROOT / "tests" / "nbval_sanitize_torch_next.cfg"
NOTEBOOKS = sorted([*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("labs/*.ipynb"),
                    *ROOT.glob("labs/solutions/*.ipynb")])


def _entries() -> list[tuple[str, str]]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(EXTRA, encoding="utf-8")
    return [(name, parser[name]["regex"]) for name in parser.sections()]


def _outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
        parts.append("\n".join(output.get("traceback", [])))
        parts.append(output.get("evalue", ""))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


@pytest.mark.parametrize(("name", "regex"), _entries(), ids=[n for n, _ in _entries()])
def test_each_torch_next_sanitizer_matches_only_the_cell_it_names(name, regex):
    # "notebooks/01_tensor_to.ipynb cell-39" or several, comma-separated
    target = sorted(t.strip() for t in name.split(":")[0].split(","))
    pattern = re.compile(regex)
    matched = []
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and pattern.search(_outputs_text(cell)):
                matched.append(f"{path.relative_to(ROOT).as_posix()} {cell.get('id')}")
    assert sorted(matched) == target, f"{name!r} should match only {target}, matched {matched}"


def test_the_torch_next_sanitizers_exist_and_are_few():
    assert 1 <= len(_entries()) <= 5, "relax only the cells that differ between torch builds"


def test_the_environment_runs_the_torch_it_claims():
    """make test-torch-next sets EXPECT_TORCH from requirements-torch-next.txt."""
    import os

    import torch

    expected = os.environ.get("EXPECT_TORCH")
    if not expected:
        pytest.skip("only in make test-torch-next")
    assert torch.__version__.split("+")[0] == expected
    assert torch.backends.cuda.is_built(), "the second environment is meant to be a CUDA build"
