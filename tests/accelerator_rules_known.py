"""Cells known to break an accelerator rule today: the ONE list of them (maintainers only).

``KNOWN_VIOLATIONS[notebook][cell id]`` is the tuple of rule ids (tests/accelerator_rules.py)
that the cell breaks on the meta stand-in, where a Mac or a GPU would fail. In ``make test``
these cells run with those rules recorded instead of raised, so their outputs stay as stored,
and each one is asserted still to break each listed rule: when you fix a cell, its test fails
until you delete its entry here. Any other broken rule fails the cell. The goal is an empty
dict. A cell that uses meta on purpose (meta on every machine, not the second device) carries
the cell tag ``meta-only:<rule id>`` instead.
"""

from __future__ import annotations

KNOWN_VIOLATIONS: dict[str, dict[str, tuple[str, ...]]] = {}
