"""utils.widgets, driven from Python: set values, click buttons, read what the widget shows.

`make test` runs this file twice: in .venv (ipywidgets 8, our pin) and in .venv-ipyw7
(ipywidgets 7.7.1, what Colab ships), so both versions are proven to work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import utils
from utils import scenarios
from utils import widgets as lessons_widgets

ipywidgets = pytest.importorskip("ipywidgets")

ROOT = Path(__file__).resolve().parents[2]
ON_GPU = torch.cuda.is_available()

QUESTION = "After `inputs.to(other)`, where is `inputs`?"
CHOICES = ["on `other`", "still on the CPU", "nowhere"]
ANSWER = "still on the CPU"
WHY = {
    "on `other`": "`to` never changes the tensor it is called on.",
    "still on the CPU": "`to` returned a new tensor and nothing kept it.",
    "nowhere": "`inputs` still refers to the original.",
}


def _parts(box):
    """A quiz's parts: (heading, choice buttons, feedback)."""
    heading, choices, feedback = box.children
    return heading, list(choices.children), feedback


def test_the_expected_ipywidgets_version_is_the_one_tested():
    expected = os.environ.get("EXPECT_IPYWIDGETS")  # set by the Makefile's ipywidgets 7 run
    if expected:
        assert ipywidgets.__version__ == expected
    assert ipywidgets.__version__.split(".")[0] in ("7", "8")


# --- the quiz ---------------------------------------------------------------------------


def test_quiz_shows_the_question_and_one_button_per_choice():
    heading, buttons, feedback = _parts(lessons_widgets.quiz_widget(QUESTION, CHOICES, ANSWER, WHY))
    assert "<code>inputs.to(other)</code>" in heading.value
    assert [b.description for b in buttons] == ["a) on other", "b) still on the CPU", "c) nowhere"]
    assert "Click the answer" in feedback.value


def test_clicking_the_right_answer_says_right_and_why():
    _, buttons, feedback = _parts(lessons_widgets.quiz_widget(QUESTION, CHOICES, ANSWER, WHY))
    buttons[1].click()
    assert "Right." in feedback.value
    assert "returned a new tensor and nothing kept it" in feedback.value
    assert buttons[1].button_style == "success"


@pytest.mark.parametrize("wrong", ["on `other`", "nowhere"])
def test_clicking_a_wrong_answer_explains_why_that_choice_is_wrong(wrong):
    _, buttons, feedback = _parts(lessons_widgets.quiz_widget(QUESTION, CHOICES, ANSWER, WHY))
    buttons[CHOICES.index(wrong)].click()
    assert "Not quite." in feedback.value and "Try another" in feedback.value
    assert lessons_widgets._inline_html(WHY[wrong]) in feedback.value
    assert buttons[CHOICES.index(wrong)].button_style == "danger"


def test_after_a_wrong_answer_the_learner_can_still_find_the_right_one():
    _, buttons, feedback = _parts(lessons_widgets.quiz_widget(QUESTION, CHOICES, ANSWER, WHY))
    buttons[0].click()
    buttons[1].click()
    assert "Right." in feedback.value


def test_quiz_feedback_is_a_plain_function():
    assert lessons_widgets.quiz_feedback(ANSWER, CHOICES, ANSWER, WHY)[0] is True
    right, text = lessons_widgets.quiz_feedback("nowhere", CHOICES, ANSWER, list(WHY.values()))
    assert not right and "still refers to the original" in text


def test_quiz_with_an_answer_that_is_not_a_choice_says_so():
    with pytest.raises(ValueError, match=r"answer 'on the GPU' is not one of the choices"):
        lessons_widgets.quiz_widget(QUESTION, CHOICES, "on the GPU", WHY)


def test_quiz_with_a_choice_left_unexplained_names_it():
    partial = {key: WHY[key] for key in CHOICES[:2]}
    with pytest.raises(ValueError, match=r"missing \['nowhere'\]"):
        utils.quiz(QUESTION, CHOICES, ANSWER, partial)


def test_quiz_in_text_mode_prints_question_and_choices_without_the_answer(monkeypatch, capsys):
    monkeypatch.setenv(utils.WIDGETS_ENV_VAR, "text")
    utils.quiz(QUESTION, CHOICES, ANSWER, WHY)
    printed = capsys.readouterr().out
    assert printed.startswith(f"Predict, then run: {QUESTION}")
    assert "  b) still on the CPU" in printed
    assert all(why not in printed for why in WHY.values())


def test_quiz_in_widget_mode_displays_the_widget(monkeypatch, capsys):
    monkeypatch.setenv(utils.WIDGETS_ENV_VAR, "widgets")
    shown = []
    monkeypatch.setattr(lessons_widgets, "display_widget", shown.append)
    utils.quiz(QUESTION, CHOICES, ANSWER, WHY)
    assert len(shown) == 1 and isinstance(shown[0], ipywidgets.VBox)
    assert capsys.readouterr().out == ""


def test_widget_mode_is_text_outside_a_jupyter_kernel(monkeypatch):
    monkeypatch.delenv(utils.WIDGETS_ENV_VAR, raising=False)
    assert utils.widget_mode() == "text"  # pytest is not a Jupyter kernel


def test_widget_mode_set_to_nonsense_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv(utils.WIDGETS_ENV_VAR, "fancy")
    with pytest.raises(ValueError, match="'text' or 'widgets'"):
        utils.widget_mode()


def test_lessons_01_to_05_each_have_a_quiz():
    for path in sorted((ROOT / "notebooks").glob("0[1-5]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert any("utils.quiz(" in s for s in sources), f"{path.name} has no utils.quiz"


# --- the save/load scenario explorer ------------------------------------------------------


def _explorer_parts(box):
    (saved, loaded, kind), run, result = box.children[0].children, *box.children[1:]
    return saved, loaded, kind, run, result


@pytest.mark.skipif(ON_GPU, reason="on a GPU machine this case loads")
def test_explorer_default_case_shows_pytorchs_real_cuda_error():
    saved, loaded, kind, run, result = _explorer_parts(scenarios.scenario_explorer())
    assert (saved.value, loaded.value, kind.value) == ("cuda:0", "cpu", "none")
    run.click()
    assert "It fails" in result.value
    assert "RuntimeError: Attempting to deserialize object on a CUDA device" in result.value
    assert "torch.load(&quot;checkpoint.pt&quot;)" in result.value  # the code, no map_location


@pytest.mark.parametrize("kind", ["'cpu'", "device", "dict", "callable"])
def test_explorer_with_a_map_location_loads_onto_the_chosen_device(kind):
    saved, loaded, kind_box, run, result = _explorer_parts(scenarios.scenario_explorer())
    saved.value, loaded.value, kind_box.value = "cuda:0", "cpu", kind
    run.click()
    assert "Loaded" in result.value and "weight: cpu" in result.value
    assert "map_location=" in result.value


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="on a Mac this case loads")
def test_an_mps_checkpoint_without_map_location_fails_with_pytorchs_message():
    outcome = scenarios.run_scenario("mps", "cpu", "none")
    assert outcome["devices"] is None
    assert "Storage device not recognized: mps" in outcome["error"]
    assert "tagged 'mps'" in outcome["how"]


def test_a_dict_map_location_maps_only_the_saved_tag():
    outcome = scenarios.run_scenario("mps", "cpu", "dict")
    assert outcome["devices"] == {"weight": "cpu", "bias": "cpu"}
    assert 'map_location={"mps": "cpu"}' in outcome["code"]


def test_scenario_report_is_plain_text_with_code_and_outcome():
    report = scenarios.scenario_report(scenarios.run_scenario("cpu", "cpu", "none"))
    assert 'torch.load("checkpoint.pt")' in report
    assert "weight: cpu" in report and "<" not in report


def test_a_load_that_lands_elsewhere_than_wanted_says_so():
    # What a GPU machine shows for a cuda:0 file loaded with no map_location "for use on cpu"
    # (docs/gpu-verification.md); built here from the outcome, so it runs on any machine.
    outcome = {"code": "", "how": "", "error": None, "wanted": "cpu",
               "devices": {"weight": "cuda:0", "bias": "cuda:0"}}
    note = scenarios.misplaced_note(outcome)
    assert note.startswith("Not where this code wanted them: on cuda:0, not cpu.")
    assert note in scenarios.scenario_report(outcome)


@pytest.mark.parametrize("kind", ["none", "'cpu'", "device", "dict", "callable"])
def test_a_load_onto_the_wanted_device_adds_no_note(kind):
    outcome = scenarios.run_scenario("cpu", "cpu", kind)
    assert outcome["wanted"] == "cpu" and scenarios.misplaced_note(outcome) == ""
    assert "Not where" not in scenarios.scenario_report(outcome)


def test_scenario_with_an_unknown_map_location_form_lists_the_forms():
    with pytest.raises(ValueError, match="is not one of"):
        scenarios.run_scenario("cpu", "cpu", "lambda")


# --- the placement viewer -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "left_behind"),
    [
        ("clean model", []),
        ("plain tensor attribute", ["scale"]),
        ("list of layers", ["layers.0.weight", "layers.0.bias",
                            "layers.1.weight", "layers.1.bias"]),
        ("dict of tensors", ["stats.mean", "stats.std"]),
        ("tensor created in forward", []),
    ],
)
def test_placement_report_finds_what_module_to_left_behind(variant, left_behind):
    report = lessons_widgets.placement_report(variant, "meta")
    assert report["left_behind"] == left_behind
    for name, kind, _ in report["rows"]:  # registered tensors move; the others stay
        assert (kind in ("parameter", "buffer")) == (name not in left_behind), name


def test_a_tensor_created_in_forward_shows_up_when_forward_runs():
    report = lessons_widgets.placement_report("tensor created in forward", "meta")
    assert "fails: RuntimeError" in report["forward"]
    assert "meta's own wording" in report["forward"]
    clean = lessons_widgets.placement_report("clean model", "meta")
    assert "works; the output is on meta" in clean["forward"]


@pytest.mark.parametrize(
    ("variant", "verdict"),
    [
        ("clean model", "forward runs"),
        ("plain tensor attribute", "forward fails: it uses scale"),
        ("list of layers", "forward fails: it uses the layers"),
        ("dict of tensors",
         "forward runs, but only because it never uses stats, which are still on the CPU"),
        ("tensor created in forward", "forward fails: it makes noise on the CPU at every call"),
    ],
)
def test_viewer_says_why_forward_runs_or_fails_after_a_move(variant, verdict, monkeypatch,
                                                            capsys):
    monkeypatch.setenv(utils.WIDGETS_ENV_VAR, "text")
    utils.view_placement()
    line = next(line for line in capsys.readouterr().out.splitlines() if variant in line)
    assert line.endswith(f"; {verdict}")
    assert f"{verdict}." in lessons_widgets.placement_text(
        lessons_widgets.placement_report(variant, "meta"))


@pytest.mark.parametrize("variant", list(lessons_widgets.VARIANTS))
def test_on_the_cpu_nothing_is_left_behind_and_no_reason_is_given(variant):
    report = lessons_widgets.placement_report(variant, "cpu")
    assert report["left_behind"] == [] and report["runs"] and report["why"] == ""


def test_placement_rows_name_integer_buffers_and_keep_their_kind():
    model = lessons_widgets.VARIANTS["clean model"][0]()
    rows = {name: (kind, device) for name, kind, device in lessons_widgets.placement_rows(model)}
    assert rows["norm.num_batches_tracked"] == ("buffer", "cpu")
    assert rows["linear.weight"] == ("parameter", "cpu")


def test_placement_viewer_shows_rows_and_what_was_left_behind():
    viewer = lessons_widgets.placement_viewer()
    (variant, target), show, result = viewer.children[0].children, *viewer.children[1:]
    variant.value, target.value = "plain tensor attribute", "meta"
    show.click()
    assert "<b>Left behind by Module.to:</b> scale" in result.value
    assert "<code>linear.weight</code></td><td>meta</td><td>parameter" in result.value
    assert "<b>Forward fails: it uses scale.</b>" in result.value
    target.value = "cpu"
    show.click()
    assert "<b>Left behind by Module.to:</b> nothing" in result.value


def test_text_forms_of_explorer_and_viewer_print_real_results(monkeypatch, capsys):
    monkeypatch.setenv(utils.WIDGETS_ENV_VAR, "text")
    utils.explore_save_load()
    utils.view_placement()
    printed = capsys.readouterr().out
    assert 'torch.load("checkpoint.pt")' in printed
    assert "plain tensor attribute" in printed and "stats.mean" in printed
