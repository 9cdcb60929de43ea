"""Test set-up for every pytest run from this folder: notebooks run on the CPU, widgets as text.

It sits at the project root, not in tests/, so that it also applies when a maintainer runs
one notebook or lab by itself (``pytest notebooks/03_module_to.ipynb``): pytest loads the
conftest.py of every folder above the paths it is given, up to the root. The nbval kernels
are started by this process and inherit its environment.
"""

import json
import os
from pathlib import Path

# The stored outputs were produced on the CPU (tools/run_notebooks.py). Pin the lessons'
# device for the nbval kernels too, even on a machine with a GPU.
os.environ["LESSONS_DEVICE"] = "cpu"
# Stored outputs show the widgets' plain-text form (utils/widgets.py); so must nbval's runs.
# tests/e2e/test_browser.py removes this for its JupyterLab, where the real widgets must render.
os.environ["LESSONS_WIDGETS"] = "text"


def pytest_configure(config):
    """Run every notebook cell under the rules of real accelerators, in kernels forked from one
    that imported torch already (tests/plugins/)."""
    config.pluginmanager.import_plugin("tests.plugins.accelerator_rules_plugin")
    config.pluginmanager.import_plugin("tests.plugins.warm_kernels")


# The longest files first. `make test` runs with `-n 3 --dist loadscope --no-loadscope-reorder`:
# xdist hands each worker whole files (a notebook's cells share one kernel) in collection
# order, so the long ones start at once and the many short files fill in at the end, instead
# of a long one starting last while the other workers have nothing left to do. The order comes
# from tests/schedule.json, each file's measured seconds (`python -m tools.bench.time_make_test
# --write-schedule` rewrites it); a file missing there runs after the files it lists, notebooks
# and labs first. Nothing else depends on this order.
SCHEDULE = Path(__file__).resolve().parent / "tests" / "schedule.json"
try:
    _SECONDS: dict[str, float] = json.loads(SCHEDULE.read_text())
except (OSError, ValueError):  # no schedule: collection order, notebooks first
    _SECONDS = {}


def _run_order(item) -> tuple[int, float]:
    name = item.nodeid.split("::")[0]  # the file, relative to the root (where pyproject is)
    if name in _SECONDS:
        return (0, -_SECONDS[name])
    return (1 if name.endswith(".ipynb") else 2, 0.0)


def pytest_collection_modifyitems(items):
    """Order the files longest first (tests/schedule.json); the order inside each file is kept."""
    items.sort(key=_run_order)  # a stable sort


def pytest_ignore_collect(collection_path, config):
    """Leave notebook 08 and its lab to tests/e2e/test_offline.py when this run includes it and it
    can cut the network: it runs their nbval tests inside a network namespace, so they run once."""
    from tests.e2e.network_cut import INSIDE, OFFLINE_NOTEBOOKS, ROOT, can_cut_the_network

    if collection_path.suffix != ".ipynb" or os.environ.get(INSIDE):
        return None
    if str(collection_path.relative_to(ROOT)) not in OFFLINE_NOTEBOOKS:
        return None
    offline_test = ROOT / "tests" / "e2e" / "test_offline.py"
    included = any(offline_test.is_relative_to(Path(arg.split("::")[0]).resolve())
                   for arg in config.args)
    return True if included and can_cut_the_network() else None
