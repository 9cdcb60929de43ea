"""One notebook or lab run by itself, as a maintainer would, gets the test environment."""

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = {
    "cells": [{
        "cell_type": "code", "execution_count": 1, "id": "probe", "metadata": {},
        "source": 'import os\nprint(os.environ.get("LESSONS_DEVICE"), '
                  'os.environ.get("LESSONS_WIDGETS"))',
        "outputs": [{"name": "stdout", "output_type": "stream", "text": "cpu text\n"}],
    }],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def test_a_notebook_run_alone_from_the_root_gets_the_lessons_environment():
    """`pytest some.ipynb` outside tests/ still runs its kernel with LESSONS_DEVICE=cpu.

    The probe notebook's stored output says what the kernel must see; nbval fails the run
    when the environment is missing (it printed "None None" before the root conftest.py).
    """
    folder = ROOT / f".run-alone-{uuid.uuid4().hex[:8]}"  # hidden: never collected by make test
    folder.mkdir()
    try:
        (folder / "probe.ipynb").write_text(json.dumps(PROBE), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LESSONS_")}
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "0", "-q", str(folder / "probe.ipynb")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "1 passed" in result.stdout
