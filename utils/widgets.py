"""Widgets that teach: a predict-the-output quiz and a placement viewer, and how widgets show.

The quiz is introduced in 01_tensor_to, the viewer in 03_module_to; 05's save/load explorer
(utils/scenarios.py) is built with the same helpers (:func:`ipywidgets_module`,
:func:`display_widget`, :func:`pre_html`). They use only what ipywidgets 8 and 7.7 (Colab)
both have, and no Output widget: each result is a string in an ``HTML`` widget's ``value``.
Where widgets cannot be shown (:func:`widget_mode`), each prints plain text instead.
"""

from __future__ import annotations

import html
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

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
        display_widget(quiz_widget(question, choices, answer, explanations))


# --- how the quiz, the viewer and 05's explorer are built ---

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


def ipywidgets_module():
    """Return the ipywidgets module, or raise an ImportError that says how to get it."""
    try:
        import ipywidgets
    except ImportError as error:
        raise ImportError(
            "utils.widgets needs ipywidgets to build a widget: pip install ipywidgets "
            f"(or set {WIDGETS_ENV_VAR}=text to print plain text instead)."
        ) from error
    return ipywidgets


def display_widget(widget) -> None:
    """Show ``widget`` in the notebook (IPython's display)."""
    from IPython.display import display

    display(widget)


def _inline_html(text: str) -> str:
    """Escape ``text`` for HTML and turn `backticks` into <code> spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def pre_html(text: str) -> str:
    """Return ``text`` escaped, in a <pre> block: code or a message inside an HTML widget."""
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
    widgets = ipywidgets_module()
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
    widgets = ipywidgets_module()
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
            f"<div class='lessons-placement-result'>{pre_html(report['code'])}"
            f"<table><tr><th>tensor</th><th>device</th><th>kind</th></tr>{rows}</table>"
            f"<p><b>Left behind by Module.to:</b> {html.escape(left)}</p>"
            f"<p><b>{html.escape(verdict[:1].upper() + verdict[1:])}.</b> "
            f"{html.escape(report['forward'])}</p></div>"
        )

    show.on_click(on_show)
    box = widgets.VBox([widgets.HBox([variant, target]), show, result])
    box.add_class("lessons-placement")
    return box


def view_placement() -> None:
    """Show the placement viewer; as text, print what Module.to leaves behind per variant.

    Introduced in 03_module_to; used in 04_cross_device_errors.
    """
    if widget_mode() == "widgets":
        display_widget(placement_viewer())
        return
    target = str(second_device())
    print(f"After model.to({target!r}): what is left behind, and one forward pass")
    for variant in VARIANTS:
        report = placement_report(variant, target)
        left = ", ".join(report["left_behind"]) or "nothing"
        print(f"  {variant:<26} left behind: {left}; {_forward_verdict(report)}")


#: Names that moved to utils/scenarios.py and are still reached here: notebook 05's stored
#: output names ``utils.widgets.run_scenario``.
_MOVED_TO_SCENARIOS = frozenset({"run_scenario", "scenario_report", "scenario_explorer",
                                 "misplaced_note", "SAVED_ON", "MAP_LOCATION_KINDS"})


def __getattr__(name: str):
    if name in _MOVED_TO_SCENARIOS:
        from utils import scenarios
        return getattr(scenarios, name)
    raise AttributeError(f"module 'utils.widgets' has no attribute {name!r}")

