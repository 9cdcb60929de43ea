"""Notebook 08_libraries and its lab pass nbval with the network cut: every model, tokenizer and
file they use is made on the machine, nothing comes from a model hub.

Their nbval tests (strict: stored outputs compared) run here, in a pytest of their own inside a
network namespace (``unshare -rn``, tests/e2e/network_cut.py), with an empty Hugging Face cache
and no ``HF_*`` variables from outside; the main run leaves them to this test (conftest.py), so
they run once. Skipped where the system does not allow unprivileged namespaces: there the main
run tests them as it tests every notebook.
"""

from __future__ import annotations

import os
import shlex
import sys

import pytest

from tests.e2e.network_cut import INSIDE, OFFLINE_NOTEBOOKS, ROOT, can_cut_the_network, cut_off

#: Fails (exit 1) when a connection out of the machine can be made.
REACH_OUT = ("import socket, sys; s = socket.socket(); s.settimeout(3); "
             "sys.exit(0 if s.connect_ex(('1.1.1.1', 443)) else 1)")

pytestmark = pytest.mark.skipif(not can_cut_the_network(),
                                reason="needs unprivileged user and network namespaces "
                                       "(unshare -rn) and ip")


def test_the_network_is_really_cut():
    reached = cut_off(f"{shlex.quote(sys.executable)} -c {shlex.quote(REACH_OUT)}", timeout=60)
    assert reached.returncode == 0, "a connection out of the machine succeeded"


def test_08_and_its_lab_pass_nbval_with_the_network_cut(request, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update({INSIDE: "1", "HF_HOME": str(tmp_path / "empty-hf-cache")})
    # The outer run's nbval options (make test-torch-next sanitizes with its own file).
    sanitize = request.config.getoption("nbval_sanitize_with", None)
    pytest_args = ["-m", "pytest", "-n", "0", "-q", "-p", "no:randomly", "-r", "fE",
                   *(["--nbval-sanitize-with", sanitize] if sanitize else []), *OFFLINE_NOTEBOOKS]
    command = (f"cd {shlex.quote(str(ROOT))} && exec {shlex.quote(sys.executable)} "
               + shlex.join(pytest_args))
    result = cut_off(command, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert " passed" in result.stdout and " skipped" not in result.stdout, result.stdout[-2000:]
