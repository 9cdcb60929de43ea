"""requirements.txt is the one source of versions; environment.yml repeats it exactly."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pins(text: str) -> dict[str, str]:
    pins = re.findall(r"([A-Za-z0-9_.-]+)==([^\s#]+)", text)
    return {name.lower(): version for name, version in pins}


def test_every_requirement_is_pinned_exactly_with_a_reason():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert "==" in line, f"not pinned exactly: {line!r}"
            assert "#" in line, f"say which notebook or tool needs it: {line!r}"


def test_environment_yml_pins_the_same_versions_as_requirements_txt():
    requirements = _pins((ROOT / "requirements.txt").read_text())
    environment = _pins((ROOT / "environment.yml").read_text())
    assert environment == requirements


def test_torch_is_pinned_to_the_cpu_wheel_version():
    assert _pins((ROOT / "requirements.txt").read_text())["torch"] == "2.13.0"


def test_teacher_extras_are_pinned_exactly_and_repeat_no_learner_pin():
    text = (ROOT / "requirements-teacher.txt").read_text()
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            assert "==" in line and "#" in line, f"pin it exactly, with a reason: {line!r}"
    assert "nbgrader" in _pins(text)
    assert not set(_pins(text)) & set(_pins((ROOT / "requirements.txt").read_text()))


def test_colabs_versions_are_set_in_one_place_and_only_there():
    colab = _pins((ROOT / "requirements-colab.txt").read_text())
    assert set(colab) == {"torch", "ipywidgets"}, "everything else comes from requirements.txt"
    makefile = (ROOT / "Makefile").read_text()
    for version in colab.values():
        assert version not in makefile, f"the Makefile reads {version} from requirements-colab.txt"
    assert "requirements-colab.txt" in (ROOT / ".ci" / "run").read_text() or \
        "test-colab" in (ROOT / ".ci" / "run").read_text(), "CI runs Colab's torch"
