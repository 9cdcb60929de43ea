"""Notebook 08_libraries and its lab run with the network cut: every model, tokenizer and file
they use is made on the machine, nothing comes from a model hub.

Each runs in a network namespace of its own (``unshare -rn``: a user namespace maps us to root
there, so we may bring up its loopback for the kernel's sockets, and it has no other network),
with an empty Hugging Face cache and no ``HF_*`` variables from outside. Skipped where the
system does not allow unprivileged namespaces.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ["notebooks/08_libraries.ipynb", "labs/08_libraries.ipynb",
             "labs/solutions/08_libraries.ipynb"]
#: Runs the notebook named by argv[1] with the course's runner, writing nothing back.
RUN = ("import sys, nbformat; from pathlib import Path; from tools.run_notebooks import client; "
       "path = Path(sys.argv[1]); notebook = nbformat.read(path, as_version=4); "
       "client(notebook, path, timeout=300).execute()")
#: Fails (exit 1) when a connection out of the machine can be made.
REACH_OUT = ("import socket, sys; s = socket.socket(); s.settimeout(3); "
             "sys.exit(0 if s.connect_ex(('1.1.1.1', 443)) else 1)")


def _cut_off(command: str, env: dict | None = None, timeout: int = 600):
    """Run ``command`` (shell) with no network but a loopback; return the CompletedProcess."""
    return subprocess.run(["unshare", "-rn", "sh", "-c", f"ip link set lo up && {command}"],
                          env=env, capture_output=True, text=True, timeout=timeout)


def _can_cut_the_network() -> bool:
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    try:
        return _cut_off("true", timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = pytest.mark.skipif(not _can_cut_the_network(),
                                reason="needs unprivileged user and network namespaces "
                                       "(unshare -rn) and ip")


def test_the_network_is_really_cut():
    reached = _cut_off(f"{shlex.quote(sys.executable)} -c {shlex.quote(REACH_OUT)}", timeout=60)
    assert reached.returncode == 0, "a connection out of the machine succeeded"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_runs_with_the_network_cut(notebook, tmp_path):
    copy = tmp_path / Path(notebook).name  # its scratch folder goes next to it, in tmp_path
    shutil.copy(ROOT / notebook, copy)
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(PYTHONPATH=str(ROOT), LESSONS_DEVICE="cpu", LESSONS_WIDGETS="text",
               HF_HOME=str(tmp_path / "empty-hf-cache"))
    command = f"cd {shlex.quote(str(ROOT))} && exec {shlex.quote(sys.executable)} -c " \
              f"{shlex.quote(RUN)} {shlex.quote(str(copy))}"
    result = _cut_off(command, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
