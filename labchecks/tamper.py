"""Tamper detection for the teacher's grader: is the code that grades the code on disk?

A learner's notebook runs in the grader's kernel, so its code could replace a check, the
feedback or IPython's machinery that shows the score. :func:`tampering` lists what was
replaced, and labchecks/grading.py's :func:`~labchecks.grading.grade` then gives 0 points. The
grader loads this file afresh from disk (never through ``sys.modules``), so a replaced copy
cannot vouch for itself. The trust model is in docs/teaching.md, "What grading protects".
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import types
from pathlib import Path

#: Modules whose code decides what a cell's outputs are, besides the lab's own (utils.*).
OUTPUT_MACHINERY = ("IPython.core.interactiveshell", "IPython.core.displayhook",
                    "IPython.core.displaypub", "ipykernel.zmqshell", "ipykernel.displayhook",
                    "ipykernel.iostream")
_SHELL_METHODS = ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell",
                  "run_cell_async", "run_ast_nodes", "run_code", "displayhook")


def tampering() -> list[str]:
    """What code in the notebook replaced: a function or method of a loaded ``utils``
    module or of IPython's output machinery whose code is not its file's, a name one of
    those modules imports that is no longer what it imported, or an IPython method
    overridden on the shell. Empty when everything is as on disk."""
    checks = _here().parent  # the checks' package, and the utils package beside or above it
    roots = [checks, *(d for d in (checks.parent, checks.parent / "utils")
                       if d.name == "utils" and d.is_dir())]
    files = {name: file_of(module) for name, module in list(sys.modules.items())}
    names = [name for name, file in files.items()
             if file is not None and any(file.is_relative_to(root) for root in roots)]
    problems = []
    for name in names + [m for m in OUTPUT_MACHINERY if m in sys.modules]:
        problems += _module_changes(name)
    shell = _shell()
    if shell is not None:
        problems += _shell_changes(shell)
    return problems


def _shell_changes(shell) -> list[str]:
    """IPython methods replaced on the shell itself (IPython binds some of its own methods
    there: those are fine), and a display hook that is not IPython's."""
    own = {id(value) for cls in type(shell).__mro__ for value in vars(cls).values()}
    problems = []
    for method in _SHELL_METHODS:
        value = vars(shell).get(method)
        if value is None or method == "displayhook":
            continue
        if getattr(value, "__self__", None) is not shell or id(value.__func__) not in own:
            problems.append(f"get_ipython().{method}")
    hook = getattr(shell, "displayhook", None)
    if type(hook).__module__ not in OUTPUT_MACHINERY or any(
            isinstance(value, types.FunctionType | types.MethodType)
            for value in vars(hook).values()) or sys.displayhook is not hook:
        problems.append("get_ipython().displayhook")
    return problems


def file_of(module) -> Path | None:
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or not path.endswith(".py"):
        return None
    return _resolved(path)


@functools.cache
def _resolved(path: str) -> Path:
    """``path`` with its links resolved, once per path: every module's file is asked for at
    each grade (thousands with torch loaded), and resolving walks each part of the path."""
    return Path(path).resolve()


@functools.cache
def _compiled(path: Path, mtime: float) -> tuple[types.CodeType, ast.Module]:
    source = path.read_text(encoding="utf-8")
    return compile(source, str(path), "exec", dont_inherit=True), ast.parse(source)


def _module_changes(name: str) -> list[str]:
    module = sys.modules.get(name)
    path = file_of(module)
    if path is None or not path.exists():
        return []
    code, tree = _compiled(path, path.stat().st_mtime)
    namespace = vars(module)
    problems = []
    for defined, codes in _defined_code(code).items():
        value = namespace.get(defined)
        if value is None:
            continue
        if isinstance(value, type):
            if value.__module__ == name:
                problems += [f"{name}.{defined}.{m}" for m in _class_changes(value, codes[0])]
            continue
        if _replaced(value, defined, codes):
            problems.append(f"{name}.{defined}")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in sys.modules:
            source = sys.modules[node.module]
            for alias in node.names:
                bound = alias.asname or alias.name
                if alias.name == "*" or bound not in namespace or not hasattr(source, alias.name):
                    continue
                if _unwrapped(namespace[bound]) is not _unwrapped(getattr(source, alias.name)):
                    problems.append(f"{name}.{bound}")
    return problems


def _unwrapped(value):
    try:
        return inspect.unwrap(value)
    except ValueError:  # a cycle of __wrapped__
        return value


def _defined_code(code: types.CodeType) -> dict[str, list[types.CodeType]]:
    """{name: its code objects} for the functions and classes a module or class body defines."""
    found: dict[str, list[types.CodeType]] = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and not const.co_name.startswith("<"):
            found.setdefault(const.co_name, []).append(const)
    return found


def _class_changes(cls: type, body: types.CodeType) -> list[str]:
    changed = []
    for method, codes in _defined_code(body).items():
        value = vars(cls).get(method)
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property):
            own = [getattr(f, "__code__", None) for f in (value.fget, value.fset, value.fdel) if f]
            if not any(c in codes for c in own):
                changed.append(method)
        elif value is not None and not isinstance(value, type) and _replaced(value, method,
                                                                             codes):
            changed.append(method)
    return changed


def _replaced(value, name: str, codes: list[types.CodeType]) -> bool:
    """True when ``value``, bound to ``name`` in a module or class, is a function whose code
    is not what the file defines under that name (through any ``__wrapped__``: a decorator's
    wrapper counts as the function it wraps)."""
    chain, seen = [getattr(value, "func", value)], 0  # traitlets' @default, @observe handlers
    while hasattr(chain[-1], "__wrapped__") and seen < 20:
        chain.append(chain[-1].__wrapped__)
        seen += 1
    own_codes = [getattr(link, "__code__", None) for link in chain]
    if any(c in codes for c in own_codes if c is not None):
        return False
    return any(c is not None for c in own_codes)


def loaded(path: Path):
    """The module loaded from ``path`` in this kernel (found by its file, not its name)."""
    return next((m for m in list(sys.modules.values()) if file_of(m) == path), None)


def _here() -> Path:
    """This file on disk (also when the grader exec()s it under another name)."""
    return Path(globals().get("__file__") or __file__).resolve()


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()
