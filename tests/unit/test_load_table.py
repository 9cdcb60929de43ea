"""utils.scenarios.load_table: the scenario matrix of notebook 05 as text, one line per case."""

from utils.scenarios import load_table


def test_each_case_is_one_line_with_the_cell_text_unwrapped():
    outcomes = {("CPU", "CPU", None): "loads, tensors on\ncpu",
                ("GPU (cuda:0)", "CPU", "cpu"): "RuntimeError:\nAttempting to\ndeserialize"}
    lines = load_table(outcomes).splitlines()
    assert lines[0] == "2 loads:"
    assert lines[2].split() == ["CPU", "CPU", "none", "loads,", "tensors", "on", "cpu"]
    assert lines[3].endswith("'cpu'         RuntimeError: Attempting to deserialize")
