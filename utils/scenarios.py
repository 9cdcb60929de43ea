"""05's save/load scenarios: save on one device, load on another, and see what happens.

:func:`explore_save_load` (introduced in 05_save_load_scenarios) is the explorer: a widget
where a learner picks where a checkpoint was saved, where it is loaded and which
``map_location``, then runs that case for real (:func:`run_scenario`), or its plain-text form.
:func:`run_load_cases` runs notebook 05's matrix of loads; utils/figures.py draws it
(``load_matrix``) and :func:`load_table` writes it as text.
"""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from utils.checkpoints import save_as_if_on
from utils.devices import available_devices
from utils.text import table_text
from utils.widgets import display_widget, ipywidgets_module, pre_html, widget_mode


def explore_save_load() -> None:
    """Show the save/load explorer; as text, print the case saved on cuda:0, loaded here.

    Introduced in 05_save_load_scenarios.
    """
    if widget_mode() == "widgets":
        display_widget(scenario_explorer())
        return
    print(scenario_report(run_scenario("cuda:0", "cpu", "none")))
    print("\nOther cases: utils.widgets.run_scenario(saved_on, loaded_on, map_location_kind)"
          f" with saved_on in {SAVED_ON} and map_location_kind in {MAP_LOCATION_KINDS}.")


#: Where a checkpoint may have been saved, in the explorer.
SAVED_ON = ("cpu", "cuda:0", "mps")
#: The map_location forms the explorer offers.
MAP_LOCATION_KINDS = ("none", "'cpu'", "device", "dict", "callable")


def _map_location(kind: str, saved_on: str, loaded_on: str) -> tuple[Any, str]:
    """The map_location value for ``kind``, and the code that writes it."""
    if kind == "none":
        return None, ""
    if kind == "'cpu'":
        return "cpu", ', map_location="cpu"'
    if kind == "device":
        return torch.device(loaded_on), f', map_location=torch.device("{loaded_on}")'
    if kind == "dict":
        return {saved_on: loaded_on}, f', map_location={{"{saved_on}": "{loaded_on}"}}'
    if kind == "callable":
        if loaded_on == "cpu":
            code = ", map_location=lambda storage, location: storage"
            return (lambda storage, location: storage), code

        def move(storage, location):
            return storage.to(device=loaded_on)

        code = f', map_location=lambda storage, location: storage.to(device="{loaded_on}")'
        return move, code
    raise ValueError(f"map_location kind {kind!r} is not one of {MAP_LOCATION_KINDS}.")


def scenario_code(saved_on: str, loaded_on: str, kind: str) -> str:
    """Return the code of one save/load scenario, as a learner would write it."""
    _, argument = _map_location(kind, saved_on, loaded_on)
    return "\n".join([
        f"# on a machine with {saved_on}:",
        f'state_dict = {{"weight": torch.ones(2, 3, device="{saved_on}"), '
        f'"bias": torch.zeros(2, device="{saved_on}")}}',
        'torch.save(state_dict, "checkpoint.pt")',
        f"# then, on the machine that loads it, for use on {loaded_on}:",
        f'state_dict = torch.load("checkpoint.pt"{argument})',
    ])


def run_scenario(
    saved_on: str, loaded_on: str, kind: str, folder: str | Path | None = None
) -> dict[str, Any]:
    """Save a tiny state dict "on" ``saved_on``, load it with map_location ``kind``; for real.

    Without ``saved_on`` here, the file's storages are tagged with it
    (:func:`utils.checkpoints.save_as_if_on`). Returns ``code``, ``how``, ``devices``
    ({key: device} or None) and ``error`` (``"Type: message"`` or None).
    """
    if saved_on not in SAVED_ON:
        raise ValueError(f"saved_on {saved_on!r} is not one of {SAVED_ON}.")
    map_location, _ = _map_location(kind, saved_on, loaded_on)
    state_dict = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory())
        path = Path(folder) / "checkpoint.pt"
        if saved_on == "cpu" or saved_on.split(":")[0] in _real_types():
            state_dict = {key: value.to(saved_on) for key, value in state_dict.items()}
            torch.save(state_dict, path)
            how = f"saved from tensors on {saved_on}, on this machine"
        else:
            save_as_if_on(state_dict, path, saved_on)
            how = (f"this machine has no {saved_on}: written here with every storage tagged "
                   f"{saved_on!r}, as a {saved_on} machine tags them")
        try:
            loaded = torch.load(path, map_location=map_location)
        except Exception as error:  # the genuine error is the lesson
            message = f"{type(error).__name__}: {error}"
            return {"code": scenario_code(saved_on, loaded_on, kind), "how": how,
                    "devices": None, "error": message}
    devices = {key: str(value.device) for key, value in loaded.items()}
    return {"code": scenario_code(saved_on, loaded_on, kind), "how": how,
            "devices": devices, "error": None, "wanted": loaded_on}


def misplaced_note(result: Mapping[str, Any]) -> str:
    """Return a sentence when a load succeeded but not onto the device the code wanted, else "".

    On a GPU, a ``cuda:0`` file loaded with no ``map_location`` lands on ``cuda:0``.
    """
    wanted = result.get("wanted")
    if result["error"] or wanted is None:
        return ""
    landed = sorted({device for device in result["devices"].values()})
    if landed == [str(torch.device(wanted))]:
        return ""
    return (f"Not where this code wanted them: on {', '.join(landed)}, not {wanted}. "
            "With no map_location, torch.load follows the tag each storage was saved with.")


def _real_types() -> set[str]:
    return {name.split(":")[0] for name in available_devices()}


def scenario_report(result: Mapping[str, Any]) -> str:
    """Return :func:`run_scenario`'s result as plain text: code, how, devices or error."""
    if result["error"]:
        outcome = f"It fails, with PyTorch's own error:\n{result['error']}"
    else:
        outcome = "Loaded. Where each tensor is now:\n" + "\n".join(
            f"  {key}: {device}" for key, device in result["devices"].items())
        if note := misplaced_note(result):
            outcome += f"\n{note}"
    return f"{result['code']}\n\n({result['how']})\n\n{outcome}"


def scenario_explorer():
    """Return the save/load scenario explorer: choose saved on, loaded on, map_location.

    "Run this case" shows :func:`run_scenario`'s result in the last child (``HTML``).
    """
    widgets = ipywidgets_module()
    style = {"description_width": "initial"}
    saved = widgets.Dropdown(options=list(SAVED_ON), value="cuda:0",
                             description="saved on:", style=style)
    loaded = widgets.Dropdown(options=available_devices(), value="cpu",
                              description="loaded on:", style=style)
    kind = widgets.Dropdown(options=list(MAP_LOCATION_KINDS), value="none",
                            description="map_location:", style=style)
    run = widgets.Button(description="Run this case", button_style="primary",
                         layout=widgets.Layout(width="auto"))
    run.add_class("lessons-scenario-run")
    result = widgets.HTML(value="<i>Predict what happens, then press Run this case.</i>")

    def on_run(_button) -> None:
        outcome = run_scenario(saved.value, loaded.value, kind.value)
        colour = "#a40000" if outcome["error"] else "#1e6b1e"
        verdict = "It fails" if outcome["error"] else "Loaded"
        details = outcome["error"] or "\n".join(
            f"{key}: {device}" for key, device in outcome["devices"].items())
        note = misplaced_note(outcome)
        result.value = (
            f"<div class='lessons-scenario-result'>{pre_html(outcome['code'])}"
            f"<i>{html.escape(outcome['how'])}</i>"
            f"<p style='color:{colour}'><b>{verdict}:</b></p>{pre_html(details)}"
            + (f"<p style='color:#a40000'>{html.escape(note)}</p>" if note else "")
            + "</div>"
        )

    run.on_click(on_run)
    box = widgets.VBox([widgets.HBox([saved, loaded, kind]), run, result])
    box.add_class("lessons-scenario")
    return box


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


def load_table(outcomes: dict[tuple[str, str, str | None], str]) -> str:
    """:func:`run_load_cases`' outcomes as text, one line per case: what the matrix shows,
    for a reader without the figure. Introduced in 05_save_load_scenarios."""
    rows = [(saved_on, loaded_on, "none" if how is None else repr(how), " ".join(text.split()))
            for (saved_on, loaded_on, how), text in outcomes.items()]
    return table_text(f"{len(rows)} loads:", ("saved on", "loaded on", "map_location", "outcome"),
                      rows, len(rows))

