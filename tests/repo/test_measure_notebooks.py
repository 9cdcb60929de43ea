"""`make measure` prints its table and nothing else (tools/measure_notebooks.py)."""


import nbformat

from tools import measure_notebooks


def test_measure_keeps_the_kernels_start_up_warning_out_of_its_output(tmp_path, capfd):
    """The kernel inherits stderr; without KERNEL_QUIET it prints a TCP transport warning."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(notebook, path)
    seconds, peak_mib = measure_notebooks.measure(path)
    captured = capfd.readouterr()
    assert seconds >= 0 and peak_mib > 0
    assert "WARNING" not in captured.err and "WARNING" not in captured.out, captured.err
