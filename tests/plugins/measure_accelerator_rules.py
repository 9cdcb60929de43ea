"""What the accelerator rules cost: kernel CPU seconds for Run All, without and with the mode.

    .venv/bin/python tests/plugins/measure_accelerator_rules.py [--repeat 3] notebooks/06_x.ipynb

Each notebook runs in a fresh kernel (LESSONS_DEVICE=cpu, as in the tests), alternately without
and with the rules installed at the start (all rules recorded, none raised, so both runs do the
same work). The figure is the kernel's own user+system CPU time from the first cell to the
last, the best of ``--repeat`` runs: CPU time, not wall time, because the test machine is shared.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

RULES_FILE = Path(__file__).resolve().parent / "accelerator_rules.py"
CLOCK = "import resource as _r; _u = _r.getrusage(_r.RUSAGE_SELF); _t0 = _u.ru_utime + _u.ru_stime"
INSTALL = (
    "import importlib.util as _iu, sys as _sys\n"
    f"_spec = _iu.spec_from_file_location('accelerator_rules', {str(RULES_FILE)!r})\n"
    "_m = _iu.module_from_spec(_spec); _sys.modules['accelerator_rules'] = _m\n"
    "_spec.loader.exec_module(_m); _m.kernel_begin_cell('all')"
)
READ = ("_u = _r.getrusage(_r.RUSAGE_SELF); print('CPU', _u.ru_utime + _u.ru_stime - _t0); "
        "print('VIOLATIONS', len(__import__('json').loads(_m.kernel_end_cell())) "
        "if 'accelerator_rules' in _sys.modules else 0)")


def run(path: Path, rules: bool) -> tuple[float, int]:
    """Kernel CPU seconds for Run All of ``path``, and the violations recorded."""
    notebook = nbformat.read(path, as_version=4)
    cells = copy.deepcopy(notebook.cells)
    # torch is imported before the clock starts in both runs; installing the rules is timed.
    first = "import sys as _sys, torch\n" + CLOCK + "\n" + (INSTALL if rules else "")
    notebook.cells = [nbformat.v4.new_code_cell(first), *cells, nbformat.v4.new_code_cell(READ)]
    client = NotebookClient(notebook, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    values = dict(line.split(" ", 1) for line in text.strip().splitlines())
    return float(values["CPU"]), int(values["VIOLATIONS"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    os.environ["LESSONS_DEVICE"], os.environ["LESSONS_WIDGETS"] = "cpu", "text"
    print(f"{'notebook':45} {'off (s CPU)':>12} {'rules (s CPU)':>14} {'overhead':>9}")
    for path in args.notebooks:
        off, on = [], []
        for _ in range(args.repeat):
            off.append(run(path.resolve(), False)[0])
            seconds, _found = run(path.resolve(), True)
            on.append(seconds)
        print(f"{path.as_posix():45} {min(off):12.2f} {min(on):14.2f} "
              f"{(min(on) - min(off)) / min(off):+9.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
