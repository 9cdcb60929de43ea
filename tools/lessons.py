"""What the maintainer tools share: where notebooks and labs are, the repository URL.

Used by tools/build_nav.py, tools/run_notebooks.py, tools/measure_notebooks.py and tests/.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LABS = ROOT / "labs"
SOLUTIONS = LABS / "solutions"
NAME_PATTERN = re.compile(r"^(\d\d)_([a-z0-9_]+)\.ipynb$")


def config() -> dict:
    """Return ``[tool.lessons]`` from pyproject.toml: ``repository`` and ``branch``."""
    with open(ROOT / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)["tool"]["lessons"]


def numbered(folder: Path) -> list[Path]:
    """Return the ``NN_topic.ipynb`` files of ``folder``, in order."""
    return sorted(p for p in folder.glob("*.ipynb") if NAME_PATTERN.match(p.name))


def lesson_notebooks() -> list[Path]:
    """Return the ordered lesson notebooks (notebooks/NN_topic.ipynb)."""
    return numbered(NOTEBOOKS)


def student_labs() -> list[Path]:
    """Return the student labs (labs/NN_topic.ipynb), generated from labs/solutions/."""
    return numbered(LABS)


def solution_labs() -> list[Path]:
    """Return the lab solutions (labs/solutions/NN_topic.ipynb), the labs' source of truth."""
    return numbered(SOLUTIONS)


def all_notebooks() -> list[Path]:
    """Return every notebook the tests run: lessons, student labs and solutions."""
    return lesson_notebooks() + student_labs() + solution_labs()


def lab_for(notebook: Path) -> Path | None:
    """Return the student lab that practises ``notebook`` (same number), or None."""
    number = notebook.name[:2]
    return next((lab for lab in student_labs() if lab.name[:2] == number), None)
