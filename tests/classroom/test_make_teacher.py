"""`make teacher TORCH=cpu` installs PyTorch's CPU-only build, as `make lab TORCH=cpu` does.

Read with `make -n` for a throw-away folder: nothing is installed.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None or platform.system() != "Linux",
                    reason="make on Linux (a Mac's PyPI torch has no CUDA libraries)")
@pytest.mark.parametrize("torch", ["cpu", ""])
def test_make_teacher_honours_torch_cpu(tmp_path, torch):
    venv = tmp_path / "teacher"
    plan = subprocess.run(["make", "-n", "-B", f"{venv}/.installed", f"VENVT={venv}",
                           f"TORCH={torch}"], cwd=ROOT, capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    cpu = [i for i, line in enumerate(lines) if "download.pytorch.org/whl/cpu" in line]
    teacher = [i for i, line in enumerate(lines) if "-r requirements-teacher.txt" in line]
    assert teacher
    assert (len(cpu) == 1 and cpu[0] < teacher[0]) if torch else not cpu
