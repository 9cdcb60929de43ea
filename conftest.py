"""Test set-up for every pytest run from this folder: notebooks run on the CPU, widgets as text.

It sits at the project root, not in tests/, so that it also applies when a maintainer runs
one notebook or lab by itself (``pytest notebooks/03_module_to.ipynb``): pytest loads the
conftest.py of every folder above the paths it is given, up to the root. The nbval kernels
are started by this process and inherit its environment.
"""

import os
import sys
from pathlib import Path

# The stored outputs were produced on the CPU (tools/run_notebooks.py). Pin the lessons'
# device for the nbval kernels too, even on a machine with a GPU.
os.environ["LESSONS_DEVICE"] = "cpu"
# Stored outputs show the widgets' plain-text form (utils/widgets.py); so must nbval's runs.
# tests/test_browser.py removes this for its JupyterLab, where the real widgets must render.
os.environ["LESSONS_WIDGETS"] = "text"

# The accelerator-rules plugin and its list of known violations live in tests/ (maintainers
# only); make them importable from here, so they also apply to a notebook run by itself.
sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))


def pytest_configure(config):
    """Run every notebook cell under the rules of real accelerators (tests/accelerator_rules.py)."""
    config.pluginmanager.import_plugin("accelerator_rules_plugin")
