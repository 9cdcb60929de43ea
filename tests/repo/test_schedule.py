"""tests/schedule.json, the order conftest.py hands files to the test workers in: it names only
files that exist, and the files it names run longest first."""

from __future__ import annotations

import json
from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[2]


def test_the_schedule_names_only_files_that_exist():
    seconds = json.loads((ROOT / "tests" / "schedule.json").read_text())
    assert seconds and not [name for name in seconds if not (ROOT / name).is_file()]


def test_files_in_the_schedule_run_longest_first_and_the_others_after_them():
    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    names = ["tests/unit/test_new.py::test_a", "notebooks/99_new.ipynb::Cell 0",
             *(f"{name}::test" for name in list(conftest._SECONDS)[::-1])]
    items = [Item(name) for name in names]
    conftest.pytest_collection_modifyitems(items)
    order = [item.nodeid.split("::")[0] for item in items]
    listed = order[: len(conftest._SECONDS)]
    assert sorted(listed) == sorted(conftest._SECONDS)
    seconds = [conftest._SECONDS[name] for name in listed]
    assert seconds == sorted(seconds, reverse=True)
    assert order[-2:] == ["notebooks/99_new.ipynb", "tests/unit/test_new.py"]
