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
    measured = measure_notebooks.measure(path)
    captured = capfd.readouterr()
    assert measured.seconds >= 0 and measured.peak_pss_mib > 0 and measured.processes >= 1
    assert "WARNING" not in captured.err and "WARNING" not in captured.out, captured.err


def test_measure_sums_the_memory_of_the_processes_a_notebook_starts(tmp_path):
    """A notebook whose cell starts a child holding 200 MiB: the sum counts the child."""
    child = ("import subprocess, sys; subprocess.run([sys.executable, '-c', "
             "'import time; b = bytearray(200 * 2**20); b[::4096] = b\"x\" * len(b[::4096]); "
             "time.sleep(1.5)'])")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(child)])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    path = tmp_path / "child.ipynb"
    nbformat.write(notebook, path)
    measured = measure_notebooks.measure(path)
    assert measured.processes >= 2
    assert measured.peak_pss_mib > 200 and measured.peak_rss_mib > 200
    assert measured.cpu_seconds >= 0
