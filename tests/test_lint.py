"""ruff finds nothing to fix in utils, tools, tests and the notebooks."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_no_problems_in_code_or_notebooks():
    folders = [f for f in ("utils", "tools", "tests", "notebooks", "labs") if (ROOT / f).is_dir()]
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *folders],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
