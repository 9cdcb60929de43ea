"""Running commands with the network cut: what tests/e2e/test_offline.py and conftest.py share.

Notebook 08_libraries and its lab must run with no network (every model, tokenizer and file
they use is made on the machine). Where the system allows unprivileged namespaces, `make test`
runs their nbval tests once, inside a network namespace of their own (test_offline.py), and
the main run leaves them out (conftest.py): the same strict nbval comparison, not a second run.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The notebooks that must run offline, as pytest names them (relative to the root).
OFFLINE_NOTEBOOKS = ("notebooks/08_libraries.ipynb", "labs/08_libraries.ipynb",
                     "labs/solutions/08_libraries.ipynb")
#: Set inside the namespace, so that the run there collects the notebooks it was given.
INSIDE = "LESSONS_NETWORK_CUT"


def cut_off(command: str, env: dict | None = None, timeout: int = 600):
    """Run ``command`` (shell) with no network but a loopback; return the CompletedProcess.

    ``unshare -rn``: a user namespace maps us to root there, so we may bring up its loopback
    (for the kernel's sockets); it has no other network."""
    return subprocess.run(["unshare", "-rn", "sh", "-c", f"ip link set lo up && {command}"],
                          env=env, capture_output=True, text=True, timeout=timeout)


@functools.cache
def can_cut_the_network() -> bool:
    """Whether this system lets an unprivileged user make a network namespace (and has `ip`)."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    try:
        return cut_off("true", timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
