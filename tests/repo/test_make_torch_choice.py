"""`make lab TORCH=cpu` installs PyTorch's CPU-only build; the default installs requirements.txt.

The commands make would run are read with `make -n` (nothing is installed), for a throw-away
environment folder, so the tests never touch .venv.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tools import torch_build_hint
from utils import devices

ROOT = Path(__file__).resolve().parents[2]

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIN = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")


def planned(tmp_path, *arguments: str) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    return subprocess.run(["make", "-n", "-B", f"{venv}/.installed", f"VENV={venv}", *arguments],
                          cwd=ROOT, capture_output=True, text=True, check=False)


@needs_make
def test_torch_cpu_installs_the_cpu_only_build_of_the_pinned_version_first(tmp_path):
    plan = planned(tmp_path, "TORCH=cpu")
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    cpu = [i for i, line in enumerate(lines) if f"--index-url {CPU_INDEX}" in line]
    assert len(cpu) == 1 and f'"torch=={PIN}+cpu"' in lines[cpu[0]]
    requirements = [i for i, line in enumerate(lines) if "-r requirements.txt" in line]
    assert requirements and cpu[0] < requirements[0]  # then requirements.txt: torch satisfied


@needs_make
def test_the_default_installs_requirements_txt_as_it_is(tmp_path):
    plan = planned(tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "-r requirements.txt" in plan.stdout
    assert CPU_INDEX not in plan.stdout
    assert "tools.torch_build_hint" in plan.stdout  # says when the CPU build would suit


@needs_make
def test_an_unknown_torch_choice_is_refused_with_what_to_write(tmp_path):
    plan = planned(tmp_path, "TORCH=gpu")
    assert plan.returncode != 0
    assert "TORCH=gpu: use TORCH=cpu" in plan.stderr


@pytest.mark.parametrize(("case", "advised"), [
    ("CUDA build, but no NVIDIA driver found", True),
    ("this torch is a CPU-only build", False),
    ("CUDA build and an NVIDIA driver, but no GPU it can use (check CUDA_VISIBLE_DEVICES)", False),
    (None, False),  # CUDA works: the CUDA build is the right one
])
def test_install_advises_the_cpu_build_only_for_a_cuda_build_without_a_driver(
        monkeypatch, case, advised):
    monkeypatch.setattr(devices, "why_no_cuda", lambda: case)
    line = torch_build_hint.hint(".venv")
    assert (line is not None) == advised
    if advised:
        assert "rm -rf .venv && make lab TORCH=cpu" in line
