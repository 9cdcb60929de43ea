"""utils.explain finds the error index's entry for real reports, and for nothing else.

Every report of tests/data/error_reports.toml (real users' messages, from public issue threads)
is matched to the entry the corpus names; unrelated errors match nothing; the hook
``utils.explain_errors()`` shows the entry under the normal traceback in a real IPython shell and
in a real kernel.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbformat
import pytest
import torch
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager
from torch import nn

import utils
from tools import build_errors, lessons
from utils.explain import (
    BRANCH,
    REPOSITORY,
    Explanation,
    _where_url,
    best_entry,
    catalogue,
    catalogue_path,
    keys,
    normalize,
)

ROOT = Path(__file__).resolve().parents[2]
REPORTS = tomllib.loads((ROOT / "tests" / "data" / "error_reports.toml").read_text(
    encoding="utf-8"))["report"]
ENTRY_IDS = {entry["id"] for entry in catalogue()}

#: Errors that are not about devices or checkpoints: the index must not claim them.
UNRELATED = [
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)",
    "AttributeError: 'Linear' object has no attribute 'wieght'",
    "RuntimeError: expected scalar type Float but found Double",
    "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != double",
    "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.HalfTensor) should be "
    "the same",
    "KeyError: 'model_state_dict'",
    "RuntimeError: Error(s) in loading state_dict for Linear:\n\tsize mismatch for weight: copying "
    "a param with shape torch.Size([2, 3]) from checkpoint, the shape in current model is "
    "torch.Size([4, 3]).",
    "RuntimeError: The size of tensor a (3) must match the size of tensor b (4) at non-singleton "
    "dimension 0",
    "RuntimeError: Given groups=1, weight of size [8, 3, 3, 3], expected input[1, 1, 28, 28] to "
    "have 3 channels, but got 1 channels instead",
    "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn",
    "RuntimeError: Trying to backward through the graph a second time (or directly access saved "
    "tensors after they have already been freed).",
    "ModuleNotFoundError: No module named 'torchvision'",
    "IndexError: index 5 is out of bounds for dimension 0 with size 3",
    "ValueError: Expected input batch_size (4) to match target batch_size (8).",
    "TypeError: forward() takes 2 positional arguments but 3 were given",
    "NotImplementedError: Could not run 'torchvision::nms' with arguments from the 'CUDA' backend.",
    "ZeroDivisionError: division by zero",
    "RuntimeError: Expected tensor for argument #1 'indices' to have one of the following scalar "
    "types: Long, Int; but got torch.cuda.FloatTensor instead (while checking arguments for "
    "embedding)",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]


def test_the_corpus_has_forty_real_reports_each_naming_an_entry_the_index_has():
    assert len(REPORTS) >= 40
    urls = [report["url"] for report in REPORTS]
    assert len(set(urls)) == len(urls), "each report once"
    for report in REPORTS:
        assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+", report["url"])
        assert report["message"] and report["cause"] and report["fix"] and report["kind"]
        assert report["entry"] in ENTRY_IDS, report["url"]


@pytest.mark.parametrize("report", REPORTS, ids=[r["url"].split("github.com/")[1] for r in REPORTS])
def test_every_real_report_is_matched_to_the_entry_that_answers_it(report):
    found = best_entry(report["message"])
    assert found is not None, f"no entry for {report['message']!r}"
    assert found["id"] == report["entry"]


def test_every_message_of_the_index_is_explained_by_its_own_entry():
    for entry in catalogue():
        for message in entry.get("messages", []) + entry.get("older_wordings", []):
            found = best_entry(message.replace(" ... ", " "))
            assert found is not None and found["id"] == entry["id"], (entry["id"], message)


@pytest.mark.parametrize("message", UNRELATED)
def test_an_error_the_index_does_not_cover_matches_nothing(message):
    assert utils.explain(message, show=False) is None


def test_an_exception_is_explained_like_its_message():
    try:
        nn.Embedding(3, 2)(torch.tensor([5]))
    except IndexError as error:
        found = utils.explain(error, show=False)
    assert found is not None and found.id == "device-side-assert"
    try:
        torch.zeros(1, device="cuda:0") if not torch.cuda.is_available() else 1 / 0
    except (AssertionError, RuntimeError, ZeroDivisionError) as error:
        # a CPU-only build: "Torch not compiled with CUDA enabled"; a CUDA build without a
        # driver (make test-torch-next): "Found no NVIDIA driver on your system": one entry
        found = utils.explain(error, show=False)
    assert torch.cuda.is_available() or found.id == "torch-not-compiled-with-cuda"


def test_explain_shows_the_title_the_usual_fix_and_links_to_the_entry_and_the_live_cell(capsys):
    found = utils.explain("RuntimeError: Expected all tensors to be on the same device, but got "
                          "mat1 is on cpu, different from other tensors on cuda:0 (when checking "
                          "argument in method wrapper_CUDA_addmm)")
    shown = capsys.readouterr().out
    assert isinstance(found, Explanation) and found.id == "same-device"
    assert shown == found.text() + "\n"
    assert f"{REPOSITORY}/blob/{BRANCH}/docs/errors.md#same-device" in shown
    assert "inputs.to(device)" in found.usual
    assert found.live and "04_cross_device_errors.ipynb#1.-Meet-the-error,-then-read-it" in (
        found.live[0][1])
    markdown = found.markdown()
    assert markdown.startswith(
        "**The error index:** [Expected all tensors to be on the same device]")
    assert "](#" not in markdown, "in-page links become links to the published page"


def test_the_catalogue_is_the_one_the_page_is_built_from_and_is_shipped_with_the_package():
    assert catalogue_path() == ROOT / "docs" / "errors.toml"
    packaged = ROOT / "utils" / "errors.toml"
    assert packaged.read_bytes() == (ROOT / "docs" / "errors.toml").read_bytes()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "errors.toml" in pyproject["tool"]["setuptools"]["package-data"]["utils"]
    assert (REPOSITORY, BRANCH) == (pyproject["tool"]["lessons"]["repository"],
                                    pyproject["tool"]["lessons"]["branch"])
    shown = [entry["id"] for entry in build_errors.catalogue() if build_errors.shown(entry)]
    assert [entry["id"] for entry in catalogue()] == shown


def test_a_missing_catalogue_fails_with_what_to_do(monkeypatch, tmp_path):
    import utils.explain as explain_module  # noqa: F401 - the function shadows the module name
    module = __import__("sys").modules["utils.explain"]
    monkeypatch.setattr(module, "__file__", str(tmp_path / "utils" / "explain.py"))
    with pytest.raises(FileNotFoundError, match="Install utils from the course's repository"):
        catalogue_path()


def test_the_live_cell_links_use_the_anchors_the_page_uses():
    for entry in catalogue():
        for where in entry["where"]:
            if where.get("heading"):
                page_link = build_errors.section_link(where)
                anchor = page_link.rsplit("#", 1)[1].rstrip(")")
                assert _where_url(where).endswith(f"{where['notebook']}#{anchor}")


def test_messages_are_compared_without_their_devices_numbers_and_spacing():
    assert normalize("Found at least two devices, cuda:1 and cuda:0!") == (
        normalize("found  at least two devices, mps and cpu!"))
    assert normalize("Tried to allocate 20.00 MiB") == "tried to allocate <n> mib"
    assert "sparsemps" in normalize("the 'SparseMPS' backend")  # a device inside a word stays
    same_device = next(entry for entry in catalogue() if entry["id"] == "same-device")
    assert "expected all tensors to be on the same device" in keys(same_device)


def test_an_entry_gives_way_to_the_more_specific_one_its_unless_list_names():
    numpy_message = ("UnpicklingError: Weights only load failed. WeightsUnpickler error: "
                     "Unsupported global: GLOBAL numpy.core.multiarray.scalar was not an allowed "
                     "global by default.")
    assert best_entry(numpy_message)["id"] == "weights-only-numpy"
    class_message = numpy_message.replace("numpy.core.multiarray.scalar", "models.yolo.Model")
    assert best_entry(class_message)["id"] == "weights-only"


# --- the hook, in a real IPython shell and in a real kernel ----------------------------------


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    ipython = InteractiveShell.instance()
    yield ipython
    ipython.set_custom_exc((), None)
    ipython.__dict__.pop("_explain_errors_on", None)
    # No shell left behind for the tests that run next in this process: get_ipython() would
    # return it, and the grader's tamper check (tests/labs/test_grading.py) would find its
    # display hook, which is not sys.displayhook outside a cell, "replaced".
    InteractiveShell.clear_instance()


def test_the_hook_shows_the_entry_right_under_the_unchanged_traceback(shell, capsys):
    # PyTorch's message, raised in the cell itself: the same traceback every run, and quick to show
    cell = 'raise RuntimeError("Tensor on device cpu is not on the expected device meta!")'
    shell.run_cell(cell)
    plain = capsys.readouterr().out
    utils.explain_errors(shell)
    handler = shell.CustomTB
    utils.explain_errors(shell)  # a second call changes nothing
    assert shell.CustomTB == handler and shell.custom_exceptions == (Exception,)
    shell.run_cell(cell)
    hooked = capsys.readouterr().out
    found = utils.explain("Tensor on device cpu is not on the expected device meta!", show=False)
    assert hooked.rstrip("\n").endswith("\n" + found.text()), "the entry comes right under it"
    traceback = hooked.rstrip("\n")[: -len(found.text())]
    same_cell = re.compile(r"In\[\d+\]")  # the cell's number differs, nothing else
    assert same_cell.sub("In[N]", traceback).strip() == same_cell.sub("In[N]", plain).strip(), (
        "the traceback is the one IPython shows without the hook")
    assert hooked.count("The error index:") == 1
    shell.run_cell("1 / 0")
    assert "The error index" not in capsys.readouterr().out, "nothing for an uncovered error"


def test_the_hook_does_nothing_outside_ipython(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "IPython", None)
    assert utils.explain_errors() is None


def test_the_hook_works_in_a_real_kernel_and_shows_the_entry_as_markdown():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import utils\nutils.explain_errors()"),
        nbformat.v4.new_code_cell("import torch\ntorch.zeros(1, device='meta') + torch.zeros(1)"),
        nbformat.v4.new_code_cell('utils.explain("CUDA error: invalid device ordinal")'),
        nbformat.v4.new_code_cell('found = utils.explain("CUDA error: invalid device ordinal")'),
        nbformat.v4.new_code_cell("found"),
    ])
    # nbval's kernel (this Python's): under make test, forked warm (tests/plugins/warm_kernels.py)
    manager = KernelManager(kernel_name=CURRENT_ENV_KERNEL_NAME,
                            kernel_spec_manager=NbvalKernelspecManager())
    NotebookClient(notebook, timeout=60, km=manager, allow_errors=True).execute(
        cwd=str(lessons.ROOT))
    outputs = notebook.cells[1].outputs
    assert notebook.cells[0].outputs == [], "turning it on prints nothing"
    kinds = [output["output_type"] for output in outputs]
    assert kinds == ["error", "display_data"], kinds
    assert outputs[0]["ename"] == "RuntimeError"
    assert "errors.md#meta-expected-device" in outputs[1]["data"]["text/markdown"]
    for cell in notebook.cells[2:]:  # shown once, whether returned as the cell's result or not
        assert [output["output_type"] for output in cell.outputs] == ["display_data"]
        assert "errors.md#invalid-device-ordinal" in cell.outputs[0]["data"]["text/markdown"]


@pytest.mark.parametrize("message", [
    # InternLM/InternLM#810 and QwenLM/Qwen-VL#202 (tests/data/error_reports.toml)
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:1 and cuda:0! (when checking argument for argument index in method wrapper_CUDA_gather)",
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:2 and cuda:3!",
])
def test_a_message_naming_two_gpus_is_sent_to_the_split_model_route_first(message):
    found = utils.explain(message, show=False)
    assert found.id == "same-device"
    assert 'device_map="auto"' in found.first and "model.device" in found.first
    assert "WITHOUT `device_map`" in found.first and "torch.cuda.set_device(" in found.first
    assert found.first.index("model.device") < found.first.index("set_device")
    assert found.markdown().index("**First:**") < found.markdown().index("**Usual fix:**")
    assert "First: " in found.text() and "**" not in found.text()
    assert "](" not in found.text() and "errors.md#same-device-split-model)" in found.markdown()


@pytest.mark.parametrize("message", [
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:0 and cpu!",
    "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
    "cuda:0 and cuda:0!",
    "RuntimeError: Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() "
    "is 1.",
])
def test_a_message_naming_one_gpu_or_none_gets_no_split_model_route(message):
    found = utils.explain(message, show=False)
    assert found.first == "" and "First:" not in found.text()


def test_the_older_expected_object_wording_is_told_how_to_read_it():
    found = utils.explain("RuntimeError: Expected object of device type cuda but got device type "
                          "cpu for argument #1 'self' in call to _thnn_conv2d_forward", show=False)
    assert found.id == "same-device"
    assert "'self'" in found.first and "cause 1" in found.first
