"""Say so when the torch just installed is a CUDA build on a machine without an NVIDIA driver.

`make install` (and so `make lab` and `make test`) runs this after installing. On Linux,
`pip install torch` gives the CUDA build, several GB of CUDA libraries that a machine without
an NVIDIA GPU never uses; `make lab TORCH=cpu` installs PyTorch's CPU-only build instead.
Prints one line in that case, nothing otherwise; always exits 0 (it is advice, not a check).
"""

from __future__ import annotations

import sys

HINT = ("note: torch {version} is a CUDA build, but this machine has no NVIDIA driver, so its "
        "CUDA libraries are never used here. The lessons run on the CPU either way. For the "
        "smaller CPU-only build: rm -rf {venv} && make lab TORCH=cpu")


def hint(venv: str = ".venv") -> str | None:
    """The advice line, or None when the build suits the machine."""
    import torch

    from utils.devices import why_no_cuda

    reason = why_no_cuda()
    if reason is None or not reason.startswith("CUDA build, but no NVIDIA driver"):
        return None
    return HINT.format(version=torch.__version__, venv=venv)


if __name__ == "__main__":
    line = hint(*sys.argv[1:2])
    if line:
        print(line)
