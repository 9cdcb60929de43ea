"""What the repository says about itself holds: the Python it needs, no private references."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from tools import lessons

ROOT = lessons.ROOT


def test_python_claim_is_the_one_the_code_needs_and_the_suite_runs_on():
    """tools/lessons.py imports tomllib (3.11+): pyproject, ruff and the README say 3.11."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert "3.11 or newer" in (ROOT / "README.md").read_text()
    assert sys.version_info >= (3, 11)


def test_no_issue_numbers_in_code_docs_or_notebooks():
    """Issue numbers mean nothing to a reader of the repository: say what, not which issue."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    pattern = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)
    found = []
    for name in files:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".ipynb", ".sh", ".toml", ".cfg", ".yml", ".txt"}:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)


def test_make_help_lists_every_documented_target_once_by_audience():
    makefile = (ROOT / "Makefile").read_text()
    documented = re.findall(r"^([a-z0-9-]+):.*?## ", makefile, re.M)
    shown = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    assert shown.splitlines()[0] == "Learners" and "Teachers" in shown and "Authors" in shown
    listed = re.findall(r"^  make (\S+)", shown, re.M)
    assert sorted(listed) == sorted(documented)
