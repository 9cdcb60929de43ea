"""Widgets that teach: a predict-the-output quiz, a save/load explorer, a placement viewer.

The quiz is introduced in 01_tensor_to, the viewer in 03_module_to, the explorer in
05_save_load_scenarios. They use only what ipywidgets 8 and 7.7 (Colab) both have, and
no Output widget: each result is a string in an ``HTML`` widget's ``value``. Where widgets
cannot be shown (:func:`widget_mode`), each prints plain text instead.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from utils.checkpoints import save_as_if_on
from utils.devices import available_devices, second_device
from utils.placement import where


def quiz(
    question: str,
    choices: Sequence[str],
    answer: str,
    explanations: Mapping[str, str] | Sequence[str],
) -> None:
    """Show a predict-the-output quiz: a clickable widget, or plain text (:func:`widget_mode`).

    ``answer`` is the exact text of the right choice; ``explanations`` says why each choice
    is right or wrong (a dict keyed by choice, or a list in order). Introduced in 01_tensor_to.
    """
    _check_quiz(choices, answer, explanations)
    if widget_mode() == "text":
        print(quiz_text(question, choices))
    else:
        _display(quiz_widget(question, choices, answer, explanations))


# --- how the quiz and the explorers are built ---

#: Environment variable that forces the display mode: ``text`` or ``widgets``.
WIDGETS_ENV_VAR = "LESSONS_WIDGETS"

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def widget_mode() -> str:
    """Return ``'widgets'`` or ``'text'``: ``LESSONS_WIDGETS`` when set, else ``'widgets'`` in a
    Jupyter kernel with ipywidgets installed. Introduced in 01_tensor_to."""
    forced = os.environ.get(WIDGETS_ENV_VAR, "").strip().lower()
    if forced in ("text", "widgets"):
        return forced
    if forced:
        raise ValueError(
            f"{WIDGETS_ENV_VAR}={forced!r} is not a display mode. "
            f"Set it to 'text' or 'widgets', or unset it to choose automatically."
        )
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return "text"
    shell = get_ipython()
    return "widgets" if shell is not None and hasattr(shell, "kernel") else "text"


def _widgets():
    """The ipywidgets module, or an ImportError that says how to get it."""
    try:
        import ipywidgets
    except ImportError as error:
        raise ImportError(
            "utils.widgets needs ipywidgets to build a widget: pip install ipywidgets "
            f"(or set {WIDGETS_ENV_VAR}=text to print plain text instead)."
        ) from error
    return ipywidgets


def _display(widget) -> None:
    from IPython.display import display

    display(widget)


def _inline_html(text: str) -> str:
    """Escape ``text`` for HTML and turn `backticks` into <code> spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _pre(text: str) -> str:
    return f"<pre style='margin:0.2em 0'>{html.escape(text)}</pre>"


def _check_quiz(
    choices: Sequence[str], answer: str, explanations: Mapping[str, str] | Sequence[str]
) -> dict[str, str]:
    """Validate a quiz; return {choice: explanation}."""
    if isinstance(choices, str) or len(choices) < 2:
        raise ValueError(f"A quiz needs a list of at least two choices; got {choices!r}.")
    if len(set(choices)) != len(choices):
        raise ValueError(f"Two choices have the same text: {list(choices)!r}. Reword one.")
    if answer not in choices:
        raise ValueError(
            f"The answer {answer!r} is not one of the choices {list(choices)!r}. "
            f"Pass the exact text of the right choice."
        )
    if isinstance(explanations, Mapping):
        missing = [c for c in choices if c not in explanations]
        extra = [k for k in explanations if k not in choices]
        if missing or extra:
            raise ValueError(
                f"Every choice needs an explanation and nothing else: missing {missing!r}, "
                f"not a choice {extra!r}."
            )
        return {c: explanations[c] for c in choices}
    if isinstance(explanations, str) or len(explanations) != len(choices):
        raise ValueError(
            f"Give one explanation per choice ({len(choices)}), as a list in the same order "
            f"or a dict keyed by choice text; got {explanations!r}."
        )
    return dict(zip(choices, explanations, strict=True))


def quiz_feedback(
    chosen: str,
    choices: Sequence[str],
    answer: str,
    explanations: Mapping[str, str] | Sequence[str],
) -> tuple[bool, str]:
    """Return ``(is_right, text)`` for the choice a learner picked (01_tensor_to)."""
    why = _check_quiz(choices, answer, explanations)
    if chosen not in why:
        raise ValueError(f"{chosen!r} is not one of the choices {list(choices)!r}.")
    if chosen == answer:
        return True, f"Right. {why[chosen]}"
    return False, f"Not quite. {why[chosen]} Try another answer."


def quiz_text(question: str, choices: Sequence[str]) -> str:
    """Return the quiz as plain text, without the answer (01_tensor_to)."""
    lines = [f"Predict, then run: {question}"]
    lines += [f"  {_LETTERS[i]}) {choice}" for i, choice in enumerate(choices)]
    lines.append("Decide, then run the next cell. (In JupyterLab or Colab you can click an "
                 "answer to see why it is right or wrong.)")
    return "\n".join(lines)


def quiz_widget(
    question: str,
    choices: Sequence[str],
    answer: str,
    explanations: Mapping[str, str] | Sequence[str],
):
    """Return the quiz as an ipywidgets ``VBox``: question, one button per choice, feedback."""
    _check_quiz(choices, answer, explanations)
    widgets = _widgets()
    heading = widgets.HTML(value=f"<b>Predict, then run:</b> {_inline_html(question)}")
    feedback = widgets.HTML(value="<i>Click the answer you predict.</i>")
    buttons = []
    for index, choice in enumerate(choices):
        button = widgets.Button(
            description=f"{_LETTERS[index]}) {choice.replace('`', '')}",
            tooltip=choice,
            layout=widgets.Layout(width="auto", max_width="100%"),
        )
        button.add_class("lessons-quiz-choice")
        buttons.append(button)

    def on_click(button) -> None:
        chosen = choices[buttons.index(button)]
        right, text = quiz_feedback(chosen, choices, answer, explanations)
        button.button_style = "success" if right else "danger"
        mark = "✔" if right else "✘"
        feedback.value = f"<span class='lessons-quiz-feedback'>{mark} {_inline_html(text)}</span>"

    for button in buttons:
        button.on_click(on_click)
    box = widgets.VBox([heading, widgets.VBox(buttons), feedback])
    box.add_class("lessons-quiz")
    return box


# --- the save/load scenario explorer (notebook 05) ---

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
    widgets = _widgets()
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
            f"<div class='lessons-scenario-result'>{_pre(outcome['code'])}"
            f"<i>{html.escape(outcome['how'])}</i>"
            f"<p style='color:{colour}'><b>{verdict}:</b></p>{_pre(details)}"
            + (f"<p style='color:#a40000'>{html.escape(note)}</p>" if note else "")
            + "</div>"
        )

    run.on_click(on_run)
    box = widgets.VBox([widgets.HBox([saved, loaded, kind]), run, result])
    box.add_class("lessons-scenario")
    return box


# --- the placement viewer (notebooks 03-04), built on utils.placement.where ---


class _Clean(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)  # buffers, one of them int64
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        return self.norm(self.linear(x)) * self.scale


class _PlainAttribute(_Clean):
    def __init__(self):
        super().__init__()
        del self.scale
        self.scale = torch.ones(4)  # a plain attribute: not a buffer


class _ListOfLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]  # a Python list: not registered

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class _DictOfTensors(_Clean):
    def __init__(self):
        super().__init__()
        self.stats = {"mean": torch.zeros(4), "std": torch.ones(4)}  # not registered


class _CreatedInForward(_Clean):
    def forward(self, x):
        noise = torch.randn(4)  # no device=: born on the CPU at every call
        return super().forward(x) + noise


#: Model variants the placement viewer offers: name -> (class, the line that matters).
VARIANTS: dict[str, tuple[type[nn.Module], str]] = {
    "clean model": (_Clean, 'self.register_buffer("scale", torch.ones(4))'),
    "plain tensor attribute": (_PlainAttribute, "self.scale = torch.ones(4)"),
    "list of layers": (_ListOfLayers, "self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]"),
    "dict of tensors": (_DictOfTensors, 'self.stats = {"mean": torch.zeros(4), ...}'),
    "tensor created in forward": (_CreatedInForward, "noise = torch.randn(4)  # in forward"),
}

#: Why one forward pass on another device runs or fails, per variant: whether forward uses
#: what ``Module.to`` left behind. Shown only when something was left behind or forward fails.
FORWARD_WHY: dict[str, str] = {
    "plain tensor attribute": "it uses scale",
    "list of layers": "it uses the layers",
    "dict of tensors": "but only because it never uses stats, which are still on the CPU",
    "tensor created in forward": "it makes noise on the CPU at every call",
}


def placement_rows(model: nn.Module) -> list[tuple[str, str, str]]:
    """Return ``(name, kind, device)`` for every tensor a module holds, from ``where``."""
    return [(row.name, row.kind, str(row.device)) for row in where(model)]


def _forward_check(model: nn.Module, target: torch.device) -> str:
    """Run one forward pass on an input on ``target``; describe the result or the error."""
    model.eval()
    try:
        output = model(torch.randn(2, 4, device=target))
    except Exception as error:
        message = f"forward on a {target} input fails: {type(error).__name__}: {error}"
        if target.type == "meta":
            message += (" (meta's own wording; on a GPU PyTorch says 'Expected all tensors "
                        "to be on the same device ...')")
        return message
    return f"forward on a {target} input works; the output is on {output.device}"


def placement_report(variant: str, target: str) -> dict[str, Any]:
    """Build ``variant`` on the CPU, call ``model.to(target)``, and report where tensors are.

    Returns ``code``, ``rows``, ``left_behind`` (names not on ``target``), ``forward`` (one
    pass on a ``target`` input), ``runs`` and ``why`` (:data:`FORWARD_WHY`, or "").
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {list(VARIANTS)}.")
    cls, line = VARIANTS[variant]
    device = torch.device(target)
    model = cls().to(device)
    rows = placement_rows(model)
    left_behind = [name for name, _, where in rows if torch.device(where) != device]
    code = f"{line}\n...\nmodel.to({str(device)!r})"
    forward = _forward_check(model, device)
    runs = " works;" in forward
    why = FORWARD_WHY.get(variant, "") if left_behind or not runs else ""
    return {"code": code, "rows": rows, "left_behind": left_behind,
            "forward": forward, "runs": runs, "why": why}


def _forward_verdict(report: Mapping[str, Any]) -> str:
    """'forward runs' or 'forward fails', with the reason when there is one."""
    verdict = "forward runs" if report["runs"] else "forward fails"
    if not report["why"]:
        return verdict
    return f"{verdict}, {report['why']}" if report["why"].startswith("but") else (
        f"{verdict}: {report['why']}")


def placement_text(report: Mapping[str, Any]) -> str:
    """Return :func:`placement_report`'s result as plain text."""
    width = max(len(name) for name, _, _ in report["rows"])
    lines = [report["code"], ""]
    lines += [f"  {name:<{width}}  {where:<6}  {kind}" for name, kind, where in report["rows"]]
    left = ", ".join(report["left_behind"]) or "nothing"
    lines += ["", f"left behind by Module.to: {left}", f"{_forward_verdict(report)}.",
              report["forward"]]
    return "\n".join(lines)


def placement_viewer():
    """Return the placement viewer: pick a model variant and a target device, press Show.

    The last child (``HTML``) shows :func:`placement_report` for them.
    """
    widgets = _widgets()
    style = {"description_width": "initial"}
    variant = widgets.Dropdown(options=list(VARIANTS), value="clean model",
                               description="model:", style=style)
    targets = [d for d in available_devices() if d != "cpu"] + ["meta", "cpu"]
    target = widgets.Dropdown(options=targets, value=targets[0],
                              description="model.to(...):", style=style)
    show = widgets.Button(description="Show where tensors are", button_style="primary",
                          layout=widgets.Layout(width="auto"))
    show.add_class("lessons-placement-show")
    result = widgets.HTML(value="<i>Predict what moves, then press Show.</i>")

    def on_show(_button) -> None:
        report = placement_report(variant.value, target.value)
        rows = "".join(
            f"<tr style='color:{'#a40000' if name in report['left_behind'] else 'inherit'}'>"
            f"<td><code>{html.escape(name)}</code></td><td>{where}</td><td>{kind}</td></tr>"
            for name, kind, where in report["rows"]
        )
        left = ", ".join(report["left_behind"]) or "nothing"
        verdict = _forward_verdict(report)
        result.value = (
            f"<div class='lessons-placement-result'>{_pre(report['code'])}"
            f"<table><tr><th>tensor</th><th>device</th><th>kind</th></tr>{rows}</table>"
            f"<p><b>Left behind by Module.to:</b> {html.escape(left)}</p>"
            f"<p><b>{html.escape(verdict[:1].upper() + verdict[1:])}.</b> "
            f"{html.escape(report['forward'])}</p></div>"
        )

    show.on_click(on_show)
    box = widgets.VBox([widgets.HBox([variant, target]), show, result])
    box.add_class("lessons-placement")
    return box


def explore_save_load() -> None:
    """Show the save/load explorer; as text, print the case saved on cuda:0, loaded here.

    Introduced in 05_save_load_scenarios.
    """
    if widget_mode() == "widgets":
        _display(scenario_explorer())
        return
    print(scenario_report(run_scenario("cuda:0", "cpu", "none")))
    print("\nOther cases: utils.widgets.run_scenario(saved_on, loaded_on, map_location_kind)"
          f" with saved_on in {SAVED_ON} and map_location_kind in {MAP_LOCATION_KINDS}.")


def view_placement() -> None:
    """Show the placement viewer; as text, print what Module.to leaves behind per variant.

    Introduced in 03_module_to; used in 04_cross_device_errors.
    """
    if widget_mode() == "widgets":
        _display(placement_viewer())
        return
    target = str(second_device())
    print(f"After model.to({target!r}): what is left behind, and one forward pass")
    for variant in VARIANTS:
        report = placement_report(variant, target)
        left = ", ".join(report["left_behind"]) or "nothing"
        print(f"  {variant:<26} left behind: {left}; {_forward_verdict(report)}")
