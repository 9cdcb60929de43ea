"""pytest plugin: nbval's notebook kernels run under the accelerator rules (maintainers only).

the root conftest.py registers it, so ``make test`` checks every notebook and lab cell against
MPS's and CUDA's rules inside the strict nbval run it already makes (no second pass). Before
each cell, a silent request to the cell's kernel installs :class:`AcceleratorRules`
(tests/plugins/accelerator_rules.py) once, at the bottom of the kernel's mode stack, and says which
rules the cell may break; after the cell, a second silent request collects what it broke:

- a rule broken where meta silently allowed it fails the cell (the cell itself raised the
  rule's error, so its output differs too), unless the cell is tagged ``meta-only:<rule>``
  (it uses meta on purpose, on every machine);
- a tagged cell that no longer breaks its rule fails: delete the tag;
- where meta raised as well (``nn.Linear`` with meta weights and a CPU input) the real device
  behaves the same, so nothing fails and the output is unchanged.

``ACCELERATOR_RULES`` selects the mode: ``enforce`` (default), ``report`` (every cell records
all rules without raising; findings go as JSON lines to the file ``ACCELERATOR_RULES_REPORT``
names), or ``off``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

# The kernel loads this file; this process never imports it (nor torch).
RULES_FILE = Path(__file__).resolve().parent / "accelerator_rules.py"
TAG_PREFIX = "meta-only:"
MODE_VAR, REPORT_VAR = "ACCELERATOR_RULES", "ACCELERATOR_RULES_REPORT"

# Runs in the kernel with its own globals, so the notebook's namespace is untouched.
_LOAD = (
    "import importlib.util, sys\n"
    "if 'accelerator_rules' not in sys.modules:\n"
    "    spec = importlib.util.spec_from_file_location('accelerator_rules', {path!r})\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    sys.modules['accelerator_rules'] = module\n"
    "    spec.loader.exec_module(module)\n"
    "sys.modules['accelerator_rules'].kernel_begin_cell({allowed!r})\n"
)
_END = "__import__('sys').modules['accelerator_rules'].kernel_end_cell()"


class AcceleratorRulesBroken(AssertionError):
    """A notebook cell broke a rule of real accelerators, or its meta-only tag is stale."""


def _mode() -> str:
    mode = os.environ.get(MODE_VAR, "enforce")
    if mode not in ("enforce", "report", "off"):
        raise pytest.UsageError(f"{MODE_VAR}={mode!r}: use enforce, report or off")
    return mode


def _ask(kernel, code: str, expression: str | None = None, timeout: float = 60):
    """Run ``code`` silently in nbval's kernel; return ``expression``'s value (a literal)."""
    client = kernel.kc
    msg_id = client.execute(code, silent=True, store_history=False, allow_stdin=False,
                            user_expressions={"value": expression} if expression else {},
                            stop_on_error=False)
    while True:
        reply = client.get_shell_msg(timeout=timeout)
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    content = reply["content"]
    if content["status"] != "ok":
        raise RuntimeError(f"accelerator rules could not run in the kernel: "
                           f"{content.get('ename')}: {content.get('evalue')}")
    if expression is None:
        return None
    value = content["user_expressions"]["value"]
    if value["status"] != "ok":
        raise RuntimeError(f"accelerator rules: {value.get('ename')}: {value.get('evalue')}")
    return ast.literal_eval(value["data"]["text/plain"])


def _label(item) -> tuple[str, str]:
    path = Path(item.parent.path).resolve()
    try:
        notebook = path.relative_to(item.config.rootpath.resolve()).as_posix()
    except ValueError:
        notebook = path.as_posix()
    return notebook, item.cell.get("id", "")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    kernel = getattr(getattr(item, "parent", None), "kernel", None)
    mode = _mode()
    if mode == "off" or kernel is None or not hasattr(item, "cell") or not kernel.is_alive():
        return (yield)
    notebook, cell_id = _label(item)
    where = f"{notebook} code cell {item.cell_num} (id {cell_id})"
    tagged = {t[len(TAG_PREFIX):] for t in item.cell.metadata.get("tags", [])
              if t.startswith(TAG_PREFIX)}
    allowed = "all" if mode == "report" else sorted(tagged)
    try:
        _ask(kernel, f"exec({_LOAD.format(path=str(RULES_FILE), allowed=allowed)!r}, {{}})")
    except RuntimeError as error:  # an unknown rule id in a tag
        raise AcceleratorRulesBroken(f"{where}: {error}") from None
    failure = None
    try:
        result = yield
    except BaseException as error:  # noqa: B036 (re-raised below, after the rules' verdict)
        failure, result = error, None
    found = json.loads(_ask(kernel, "", _END)) if kernel.is_alive() else []
    if mode == "report":
        _write_report(notebook, item, cell_id, found)
    else:
        _judge(where, found, tagged, failure)
    if failure is not None:
        raise failure
    return result


def _judge(where, found, tagged, failure) -> None:
    broken = [v for v in found if not v["meta_raised"] and not v["allowed"]]
    if broken:
        lines = "\n".join(f"- {v['message']}" for v in broken)
        raise AcceleratorRulesBroken(
            f"{where} breaks a rule of real accelerators:\n{lines}\n"
            f"Fix the cell (use a dtype MPS has; move tensors to one device). If the cell uses "
            f"meta on purpose on every machine, tag it 'meta-only:<rule>'.") from failure
    seen = {v["rule"] for v in found if v["allowed"]}
    stale = sorted(tagged - seen)
    if stale:
        text = "; ".join(f"{rule!r} (remove its tag '{TAG_PREFIX}{rule}')" for rule in stale)
        raise AcceleratorRulesBroken(f"{where} no longer breaks {text}.") from failure


def _write_report(notebook, item, cell_id, found) -> None:
    path = os.environ.get(REPORT_VAR)
    if not path or not found:
        return
    with open(path, "a", encoding="utf-8") as report:
        for violation in found:
            report.write(json.dumps({"notebook": notebook, "cell": item.cell_num, "id": cell_id,
                                     **violation}) + "\n")
