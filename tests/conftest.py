"""Shared test set-up: notebooks run on the CPU so their outputs match the stored ones."""

import os

# The stored outputs were produced on the CPU (tools/run_notebooks.py). Pin the lessons'
# device for the nbval kernels too, even on a machine with a GPU.
os.environ["LESSONS_DEVICE"] = "cpu"
# Stored outputs show the widgets' plain-text form (utils/widgets.py); so must nbval's runs.
# tests/test_browser.py removes this for its JupyterLab, where the real widgets must render.
os.environ["LESSONS_WIDGETS"] = "text"


def pytest_configure(config):
    """Run every notebook cell under the rules of real accelerators (tests/accelerator_rules.py)."""
    config.pluginmanager.import_plugin("accelerator_rules_plugin")
