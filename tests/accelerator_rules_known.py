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

KNOWN_VIOLATIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "notebooks/01_tensor_to.ipynb": {
        # code cell 15: `template = torch.zeros(2, dtype=torch.float64, device=other)`,
        # then `weights.to(template)`: float64 on the second device (issue 10, 01 section 5).
        "cell-30": ("mps-float64",),
    },
    "notebooks/02_copy_pitfall.ipynb": {
        # code cell 16: `nn.Linear(3, 2).to(other, torch.float64)` (issue 10, 02 section 6).
        "cell-31": ("mps-float64",),
    },
    "notebooks/04_cross_device_errors.ipynb": {
        # code cell 6: shows that cpu @ meta, bmm, Linear(bias=False), Conv2d and Embedding
        # succeed on meta. It uses "meta" by name (meta on every machine), so it is right as it
        # is: replace this entry with the cell tag 'meta-only:cuda-mixed-devices'.
        "cell-12": ("cuda-mixed-devices",),
    },
}
