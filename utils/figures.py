"""Every figure the notebooks draw, one function each, in the order the notebooks meet them.

- :func:`names_and_tensors`: which Python names point at which tensor objects and memory
  (01_tensor_to, the figure after ``moved = weights.to(other)``);
- :func:`placement_figure`: a module's tree, each tensor coloured by its device (03_module_to);
- :func:`load_matrix`: the saved-on x loaded-on matrix of loads (05_save_load_scenarios);
- :func:`shard_figure`: which process holds which rows of each tensor (08_many_devices).

matplotlib is imported where a function draws: pyplot costs about 0.4 s to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from utils.placement import Placement, PlacementTable, _target_device, where
from utils.scenarios import LOAD_CASES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from utils.dcp import DcpInfo

_DEVICE_COLOURS = {"cpu": "#cfe2f3", "cuda": "#d9ead3", "mps": "#fce5cd", "xpu": "#ead1dc"}
_META_COLOUR = "#eeeeee"


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


def _memory_label(tensor: torch.Tensor, blocks: dict[tuple[str, int], str]) -> str:
    """'memory block A' etc.: the same letter for tensors sharing one data pointer."""
    if tensor.is_meta:
        return "no data (meta)"
    key = (str(tensor.device), tensor.data_ptr())
    if key not in blocks:
        blocks[key] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[len(blocks) % 26]
    return f"memory block {blocks[key]} on {tensor.device}"


_FIGURE_COLOURS = {**_DEVICE_COLOURS, "meta": "#fff2cc"}  # meta: pale yellow, not grey-blue
_LEFT_BEHIND_RED = "#c00000"
_NOT_YET_ORANGE = "#b45f06"
_COLLAPSE_OVER = 4  # a clean subtree with more tensors than this is drawn as one row


def _clean(placement: Placement, target: torch.device | None) -> bool:
    """Nothing to mark: moved by .to (or rebuilt each call) and, if given, on ``target``."""
    return placement.moved_by_to is not False and (target is None or placement.device == target)


_Row = tuple[int, str, Placement | None, torch.device | None]


def _figure_rows(table: PlacementTable, target: torch.device | None) -> list[_Row]:
    """(depth, label, tensor or None, None); a clean subtree: (depth, summary, None, device)."""
    under: dict[str, list[Placement]] = {}
    for placement in table:
        parts = placement.name.split(".")
        for depth in range(1, len(parts)):
            under.setdefault(".".join(parts[:depth]), []).append(placement)
    collapsed = {
        owner for owner, tensors in under.items()
        if len(tensors) > _COLLAPSE_OVER and len({p.device for p in tensors}) == 1
        and all(_clean(p, target) for p in tensors)}
    rows: list[_Row] = []
    drawn: set[str] = set()
    for placement in table:
        parts = placement.name.split(".")
        for depth in range(1, len(parts)):
            owner = ".".join(parts[:depth])
            if owner in drawn:
                if owner in collapsed:
                    break
                continue
            drawn.add(owner)
            if owner in collapsed:
                tensors = under[owner]
                rows.append((depth - 1, f"{parts[depth - 1]}/  ({len(tensors)} tensors, all on "
                             f"{tensors[0].device})", None, tensors[0].device))
                break
            rows.append((depth - 1, f"{parts[depth - 1]}/", None, None))
        else:
            rows.append((len(parts) - 1, parts[-1], placement, None))
    return rows


def placement_figure(module: nn.Module, device: str | torch.device | None = None,
                     title: str | None = None, max_rows: int = 40) -> Figure:
    """Return a Figure of ``module``'s tree, each tensor a box coloured by its device.

    Left behind by ``.to``: red; with ``device``, registered but not on it yet: orange.
    A clean subtree of more than four tensors is one row. Introduced in 03_module_to.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"placement_figure() needs an nn.Module, got {type(module).__name__}.")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    target = _target_device(device) if device is not None else None
    rows = _figure_rows(where(module), target)
    hidden = max(0, len(rows) - max_rows)
    rows = rows[:max_rows]
    height = len(rows) + 1 + (1 if hidden else 0)
    figure, axes = plt.subplots(figsize=(10, 0.6 + 0.32 * height))
    axes.set_xlim(0, 10)
    axes.set_ylim(-0.5 - (1 if hidden else 0), len(rows) + 0.5)
    axes.axis("off")
    axes.set_title(title or f"Where the tensors of {type(module).__name__} live")
    axes.text(0.1, len(rows), type(module).__name__, fontsize=10, weight="bold",
              family="monospace", va="center")
    marked = set()
    for index, (depth, label, placement, summary_device) in enumerate(rows):
        y = len(rows) - 1 - index
        x = 0.4 + 0.45 * depth
        if summary_device is not None:  # a collapsed clean subtree
            axes.text(x, y, label, fontsize=9, family="monospace", va="center", bbox={
                "boxstyle": "round,pad=0.25", "edgecolor": "#777777", "linewidth": 0.8,
                "facecolor": _FIGURE_COLOURS.get(summary_device.type, _META_COLOUR)})
            continue
        if placement is None:
            axes.text(x, y, label, fontsize=9, family="monospace", va="center", color="#444444")
            continue
        colour = _FIGURE_COLOURS.get(placement.device.type, _META_COLOUR)
        left_behind = placement.moved_by_to is False
        not_yet = not left_behind and not _clean(placement, target)
        axes.text(x, y, f"{label}  [{placement.device}]", fontsize=9, family="monospace",
                  va="center", bbox={"boxstyle": "round,pad=0.25", "facecolor": colour,
                                     "edgecolor": _LEFT_BEHIND_RED if left_behind else "#777777",
                                     "linewidth": 2 if left_behind else 0.8})
        note, colour = placement.kind, "#555555"
        if left_behind:
            note, colour = f"{note}  ✗ left behind by .to", _LEFT_BEHIND_RED
            marked.add("left")
        elif not_yet:
            note, colour = f"{note}  ✗ not on {target} yet", _NOT_YET_ORANGE
            marked.add("not yet")
        axes.text(4.6, y, note, fontsize=8, va="center", color=colour)
    if hidden:
        axes.text(0.4, -1, f"... {hidden} more rows not drawn", fontsize=9, style="italic")
    devices = sorted({p.device.type for _, _, p, _ in rows if p is not None}
                     | {d.type for _, _, _, d in rows if d is not None})
    handles = [Patch(facecolor=_FIGURE_COLOURS.get(d, _META_COLOUR), edgecolor="#777777",
                     label=d) for d in devices]
    if "left" in marked:
        handles.append(Patch(facecolor="white", edgecolor=_LEFT_BEHIND_RED, linewidth=2,
                             label="left behind by .to"))
    if "not yet" in marked:
        handles.append(Patch(facecolor="white", edgecolor=_NOT_YET_ORANGE,
                             label=f"not on {target} yet"))
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8,
                title="device / mark", title_fontsize=8)
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


def load_matrix(outcomes: dict[tuple[str, str, str | None], str], title: str) -> Figure:
    """Return the Figure of :func:`run_load_cases`' outcomes (05_save_load_scenarios)."""
    def label(loaded_on: str, map_location: str | None) -> str:
        how = "no map_location" if map_location is None else f"map_location={map_location!r}"
        return f"{loaded_on}\n{how}"

    rows = list(dict.fromkeys(saved_on for saved_on, _, _ in outcomes))
    cells = {(saved_on, label(loaded_on, map_location)): text
             for (saved_on, loaded_on, map_location), text in outcomes.items()}
    return scenario_matrix(cells, rows, [label(*case) for case in LOAD_CASES], title)


_RANK_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860",
                 "#DA8BC3", "#8C8C8C")


def shard_figure(infos: list[DcpInfo], titles: list[str] | None = None) -> Figure:
    """Return a Figure: per :class:`DcpInfo`, which rank holds which rows of each tensor.

    Introduced in 08_many_devices.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    titles = titles or [info.name for info in infos]
    figure, axes = plt.subplots(1, len(infos), figsize=(5 * len(infos), 0.5 + 0.45 * max(
        len(info.tensors) for info in infos)), squeeze=False, sharey=True)
    ranks: set[int] = set()
    for axis, info, title in zip(axes[0], infos, titles, strict=True):
        tensors = info.tensors
        for row, entry in enumerate(tensors):
            length = entry.shape[0] if entry.shape else 1
            for chunk in entry.chunks:
                start = chunk.offsets[0] if chunk.offsets else 0
                size = chunk.sizes[0] if chunk.sizes else 1
                rank = chunk.rank if chunk.rank is not None else 0
                ranks.add(rank)
                axis.barh(row, size / length, left=start / length, height=0.7,
                          color=_RANK_COLOURS[rank % len(_RANK_COLOURS)], edgecolor="white")
                axis.text((start + size / 2) / length, row, f"{start}:{start + size}",
                          ha="center", va="center", fontsize=8, color="white")
        axis.set_yticks(range(len(tensors)), [e.key for e in tensors])
        axis.invert_yaxis()
        axis.set_xlim(0, 1)
        axis.set_xlabel("rows of the tensor (fraction of its first dimension)")
        axis.set_title(title)
    axes[0][0].set_ylabel("tensor")
    handles = [Patch(color=_RANK_COLOURS[r % len(_RANK_COLOURS)], label=f"rank {r}")
               for r in sorted(ranks)]
    figure.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False)
    figure.suptitle("Which process holds which rows of each tensor")
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure


def __getattr__(name: str):
    """Notebook 05 imports ``load_table`` and ``run_load_cases`` from here: both are in
    utils/scenarios.py now, and still reached here."""
    if name in ("load_table", "run_load_cases"):
        from utils import scenarios
        return getattr(scenarios, name)
    raise AttributeError(f"module 'utils.figures' has no attribute {name!r}")
