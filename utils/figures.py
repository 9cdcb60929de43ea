"""Pictures of tensors: which Python names point at which tensor objects and memory.

Introduced in notebook 01_tensor_to (the figure after ``moved = weights.to(other)``).
"""

from __future__ import annotations

import os
import textwrap
from typing import TYPE_CHECKING

import torch

from utils.text import table_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# matplotlib is imported where a function draws: pyplot costs about 0.4 s to import.

_DEVICE_COLOURS = {"cpu": "#cfe2f3", "cuda": "#d9ead3", "mps": "#fce5cd", "xpu": "#ead1dc"}
_META_COLOUR = "#eeeeee"


def _memory_label(tensor: torch.Tensor, blocks: dict[tuple[str, int], str]) -> str:
    """'memory block A' etc.: the same letter for tensors sharing one data pointer."""
    if tensor.is_meta:
        return "no data (meta)"
    key = (str(tensor.device), tensor.data_ptr())
    if key not in blocks:
        blocks[key] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(blocks) % 26]
    return f"memory block {blocks[key]} on {tensor.device}"


def names_and_tensors(named: dict[str, torch.Tensor], title: str) -> Figure:
    """Return a Figure: each name in ``named`` with an arrow to the tensor object it names.

    Each box shows device, dtype and a letter for its memory block. Introduced in 01_tensor_to.
    """
    if not named or not all(isinstance(t, torch.Tensor) for t in named.values()):
        raise TypeError("names_and_tensors expects a non-empty dict of name -> torch.Tensor")
    import matplotlib.pyplot as plt

    objects: list[torch.Tensor] = []
    for tensor in named.values():
        if not any(tensor is seen for seen in objects):
            objects.append(tensor)
    height = max(len(named), len(objects))
    figure, axes = plt.subplots(figsize=(7.5, 0.9 + 0.85 * height))
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.6, height - 0.1)
    axes.axis("off")
    axes.set_title(title)

    def row(index: int, count: int) -> float:
        return (height - 1) / 2 + (count - 1) / 2 - index

    blocks: dict[tuple[str, int], str] = {}
    boxes = []
    for index, tensor in enumerate(objects):
        y = row(index, len(objects))
        colour = _DEVICE_COLOURS.get(tensor.device.type, _META_COLOUR)
        dtype = str(tensor.dtype).replace("torch.", "")
        memory = _memory_label(tensor, blocks)
        text = f"Tensor object {index + 1}\n{tensor.device}, {dtype}\n{memory}"
        boxes.append(axes.text(
            6.9, y, text, ha="center", va="center", fontsize=9, family="monospace",
            bbox={"boxstyle": "round,pad=0.4", "facecolor": colour, "edgecolor": "#555555"},
        ))
    for index, (name, tensor) in enumerate(named.items()):
        label = axes.text(
            1.2, row(index, len(named)), name, ha="center", va="center", fontsize=11,
            family="monospace",
            bbox={"boxstyle": "square,pad=0.35", "facecolor": "white", "edgecolor": "black"},
        )
        target = next(i for i, seen in enumerate(objects) if seen is tensor)
        axes.annotate(
            "", xy=(0, 0.5), xycoords=boxes[target], xytext=(1, 0.5), textcoords=label,
            arrowprops={"arrowstyle": "->", "color": "#333333", "lw": 1.4,
                        "shrinkA": 4, "shrinkB": 6},
        )
    axes.text(1.2, height - 0.35, "Python names", ha="center", fontsize=9, color="#555555")
    axes.text(6.9, height - 0.35, "tensor objects", ha="center", fontsize=9, color="#555555")
    figure.tight_layout()
    return figure


_OUTCOME_COLOURS = {"ok": "#d9ead3", "error": "#f4cccc", "not run": "#eeeeee"}


def scenario_matrix(
    outcomes: dict[tuple[str, str], str], rows: list[str], columns: list[str], title: str
) -> Figure:
    """Return a Figure: a saved-on x loaded-on grid of ``outcomes[(row, column)]`` texts,
    green for ``loads...``, red for ``RuntimeError...``, else grey."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(2.3 * len(columns) + 1.6, 1.1 * len(rows) + 1.4))
    axes.set_xlim(0, len(columns))
    axes.set_ylim(len(rows), 0)
    for i, row in enumerate(rows):
        for j, column in enumerate(columns):
            text = outcomes.get((row, column), "not run")
            kind = ("ok" if text.startswith("loads") else
                    "error" if text.startswith("RuntimeError") else "not run")
            axes.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=_OUTCOME_COLOURS[kind],
                                         edgecolor="white", linewidth=3))
            axes.text(j + 0.5, i + 0.5, text, ha="center", va="center", fontsize=9)
    axes.set_xticks([j + 0.5 for j in range(len(columns))], columns, fontsize=9)
    axes.set_yticks([i + 0.5 for i in range(len(rows))], rows, fontsize=9)
    axes.xaxis.tick_top()
    axes.set_xlabel("loaded on")
    axes.set_ylabel("saved on")
    axes.set_title(title, pad=12)
    axes.tick_params(length=0)
    for spine in axes.spines.values():
        spine.set_visible(False)
    figure.tight_layout()
    return figure


#: The columns of notebook 05's scenario matrix: (the machine that loads, map_location).
LOAD_CASES: tuple[tuple[str, str | None], ...] = (
    ("CPU", None), ("CPU", "cpu"), ("GPU", None), ("GPU", "cuda:0"))


def load_outcome(path: str | os.PathLike, map_location: str | None) -> str:
    """Load the state dict at ``path`` for real; return one matrix cell's text."""
    try:
        state = torch.load(path, map_location=map_location)
    except RuntimeError as error:
        return "RuntimeError:\n" + textwrap.fill(str(error).split(" but ")[0], 26)
    return f"loads, tensors on\n{state['weight'].device}"


def run_load_cases(
    files: dict[str, str | os.PathLike], has_gpu: bool
) -> dict[tuple[str, str, str | None], str]:
    """Return ``{(saved on, loaded on, map_location): cell text}`` for each of
    :data:`LOAD_CASES` this machine can run. Introduced in 05_save_load_scenarios."""
    outcomes = {}
    for saved_on, path in files.items():
        for loaded_on, map_location in LOAD_CASES:
            runnable = map_location == "cpu" or (loaded_on == "GPU") == has_gpu
            needs = "a GPU" if loaded_on == "GPU" else "a CPU-only machine"
            outcomes[saved_on, loaded_on, map_location] = (
                load_outcome(path, map_location) if runnable else f"not run here:\nneeds {needs}")
    return outcomes


def load_matrix(outcomes: dict[tuple[str, str, str | None], str], title: str) -> Figure:
    """Return the Figure of :func:`run_load_cases`' outcomes (05_save_load_scenarios)."""
    def label(loaded_on: str, map_location: str | None) -> str:
        how = "no map_location" if map_location is None else f"map_location={map_location!r}"
        return f"{loaded_on}\n{how}"

    rows = list(dict.fromkeys(saved_on for saved_on, _, _ in outcomes))
    cells = {(saved_on, label(loaded_on, map_location)): text
             for (saved_on, loaded_on, map_location), text in outcomes.items()}
    return scenario_matrix(cells, rows, [label(*case) for case in LOAD_CASES], title)


def load_table(outcomes: dict[tuple[str, str, str | None], str]) -> str:
    """:func:`run_load_cases`' outcomes as text, one line per case: what the matrix shows,
    for a reader without the figure. Introduced in 05_save_load_scenarios."""
    rows = [(saved_on, loaded_on, "none" if how is None else repr(how), " ".join(text.split()))
            for (saved_on, loaded_on, how), text in outcomes.items()]
    return table_text(f"{len(rows)} loads:", ("saved on", "loaded on", "map_location", "outcome"),
                      rows, len(rows))

