"""Test set-up for every pytest run from this folder: notebooks run on the CPU, widgets as text.

It sits at the project root, not in tests/, so that it also applies when a maintainer runs
one notebook or lab by itself (``pytest notebooks/03_module_to.ipynb``): pytest loads the
conftest.py of every folder above the paths it is given, up to the root. The nbval kernels
are started by this process and inherit its environment.
"""

import os

# The stored outputs were produced on the CPU (tools/run_notebooks.py). Pin the lessons'
# device for the nbval kernels too, even on a machine with a GPU.
os.environ["LESSONS_DEVICE"] = "cpu"
# Stored outputs show the widgets' plain-text form (utils/widgets.py); so must nbval's runs.
# tests/e2e/test_browser.py removes this for its JupyterLab, where the real widgets must render.
os.environ["LESSONS_WIDGETS"] = "text"



def pytest_configure(config):
    """Run every notebook cell under the rules of real accelerators (tests/plugins/)."""
    config.pluginmanager.import_plugin("tests.plugins.accelerator_rules_plugin")


# The longest files first. `make test` runs with `-n 2 --dist loadscope --no-loadscope-reorder`:
# xdist hands each worker whole files (a notebook's cells share one kernel) in collection
# order, so these start at once and the many short files fill in at the end, instead of a
# long one starting last while the other worker has nothing left to do (xdist's own reorder
# puts the files with the most tests first, which put the browser test near the end).
# Then the notebooks and labs (a kernel each), then the other test files. A name missing
# here only runs later; nothing else depends on this order.
SLOW_FIRST = (
    "tests/e2e/test_browser.py",  # JupyterLab and Chromium: Run All on every notebook
    "notebooks/08_many_devices.ipynb",  # torchrun launches
    "labs/solutions/08_many_devices.ipynb",  # a torchrun launch
    "tests/labs/test_checks_lab08.py",  # a launch whose rank 0 saves slowly, once per answer
    "tests/unit/test_distributed.py",  # a failing launch and one that hangs until its timeout
    "tests/plugins/test_accelerator_rules.py",  # pytest and a kernel in a subprocess
    "tests/unit/test_atomic_save_survives_sigkill.py",
    "tests/unit/test_dcp_kill.py",
    "tests/e2e/test_run_alone.py",  # pytest and a kernel in a subprocess
)


def _run_order(item) -> tuple[int, int]:
    name = item.nodeid.split("::")[0]  # the file, relative to the root (where pyproject is)
    if name in SLOW_FIRST:
        return (0, SLOW_FIRST.index(name))
    return (1 if name.endswith(".ipynb") else 2, 0)


def pytest_collection_modifyitems(items):
    """Order the files longest first (SLOW_FIRST); the order inside each file is kept."""
    items.sort(key=_run_order)  # a stable sort
