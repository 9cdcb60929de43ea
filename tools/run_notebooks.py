"""Execute notebooks in place, top to bottom, each in one fresh kernel, and save the outputs.

This is how every stored output in the repository is produced. Usage:

    python -m tools.run_notebooks                      # every lesson notebook
    python -m tools.run_notebooks notebooks/01_tensor_to.ipynb

Then it refreshes what is derived from the notebooks (tools/build_nav.py: the README table's
reading times count the outputs just stored), so one command leaves everything consistent.
Cells tagged ``raises-exception`` may raise; any other error stops with a message.
The picked device is forced to the CPU (LESSONS_DEVICE=cpu) so stored outputs are
the CPU-only ones the tests compare against, and widgets print their plain-text form
(LESSONS_WIDGETS=text, see utils/widgets.py) so stored outputs are readable text.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tools import build_nav, lessons


def client(notebook: nbformat.NotebookNode, path: Path, timeout: int = 300) -> NotebookClient:
    """Return the client that runs ``notebook`` (read from ``path``) here and in gpu_run_notebooks.

    A fresh python3 kernel with the notebook's folder as working directory; the kernel
    inherits this process's environment (``LESSONS_DEVICE``, ``LESSONS_WIDGETS``).
    """
    return NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        # One stream output per name and cell: the kernel sends prints as its flush timer
        # falls, so one print() could otherwise be stored split (a stray "\n" output).
        coalesce_streams=True,
        # The kernel's own log (a transport warning per start) is noise here, as in
        # tools/measure_notebooks.py; the notebook's outputs are unaffected.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )


def execute(path: Path, timeout: int = 300) -> nbformat.NotebookNode:
    """Run ``path`` in a fresh kernel with its folder as working directory; return it."""
    notebook = nbformat.read(path, as_version=4)
    os.environ["LESSONS_DEVICE"] = "cpu"
    os.environ["LESSONS_WIDGETS"] = "text"
    client(notebook, path, timeout).execute()
    return notebook


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or lessons.lesson_notebooks()
    for path in paths:
        notebook = execute(path)
        path.write_text(build_nav.serialize(notebook), encoding="utf-8")
        print(f"executed: {path.relative_to(lessons.ROOT)}")
    return build_nav.main([])  # what is derived from the outputs, after them


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
