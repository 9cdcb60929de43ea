"""tools/student_copy.py: the learners' copy of the collection has no solutions in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools import student_copy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("student") / "lessons"
    student_copy.write(dest, repository="https://github.com/our-class/lessons", branch="spring")
    return dest


def test_the_student_copy_has_no_solution_and_no_answer_tables(copy):
    names = [p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()]
    assert not [n for n in names if "solutions" in n or n.startswith(("tests/", ".ci/"))]
    assert "tools/classroom.py" not in names and "docs/teaching.md" not in names
    for path in copy.rglob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            assert "### BEGIN SOLUTION" not in "".join(cell["source"]), path


def test_the_student_copy_has_everything_a_learner_runs(copy):
    for name in ("labs/02_copy_pitfall.ipynb", "notebooks/00_devices.ipynb", "utils/__init__.py",
                 "labchecks/lab02.py", "tools/workspace.py", "requirements.txt",
                 "environment.yml", "postBuild", "pyproject.toml", "Makefile"):
        assert (copy / name).is_file(), name
    assert (copy / "README.md").read_text(encoding="utf-8").startswith("> **Student copy.**")


def test_badges_and_the_colab_install_name_the_class_repository(copy):
    lab = (copy / "labs" / "02_copy_pitfall.ipynb").read_text(encoding="utf-8")
    assert "device-placement/pytorch-device-lessons" not in lab
    assert "github/our-class/lessons/blob/spring/labs/02_copy_pitfall.ipynb" in lab
    assert "git+https://github.com/our-class/lessons@spring" in lab


def test_a_folder_in_use_is_only_refreshed_when_asked_and_keeps_its_git(tmp_path):
    dest = tmp_path / "class-repo"
    (dest / ".git").mkdir(parents=True)
    (dest / "stale.txt").write_text("from last term")
    with pytest.raises(SystemExit, match="not empty"):
        student_copy.write(dest)
    student_copy.write(dest, update=True)
    assert (dest / ".git").is_dir() and not (dest / "stale.txt").exists()
    assert (dest / "labs" / "02_copy_pitfall.ipynb").is_file()
