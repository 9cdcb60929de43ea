"""utils.devices: the choice order, the override, second devices, and errors that help."""

from __future__ import annotations

import pytest
import torch

import utils
from utils import devices


@pytest.fixture
def machine(monkeypatch):
    """Pretend this machine has the given accelerators: machine(cuda=2, mps=True, xpu=1)."""
    monkeypatch.delenv(devices.DEVICE_ENV_VAR, raising=False)

    def configure(cuda: int = 0, mps: bool = False, xpu: int = 0, built: str | None = None) -> None:
        # torch.accelerator answers for the first accelerator this machine has (or for
        # ``built``, the one the torch is compiled for, when it has none of them).
        usable = next((kind for kind, count in (("cuda", cuda), ("mps", mps), ("xpu", xpu))
                       if count), None)

        def current_accelerator(check_available: bool = False):
            kind = usable or (None if check_available else built)
            return None if kind is None else torch.device(kind)

        monkeypatch.setattr(torch.accelerator, "current_accelerator", current_accelerator)
        monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: f"Fake GPU {index}")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(torch.xpu, "is_available", lambda: xpu > 0)
        monkeypatch.setattr(torch.xpu, "device_count", lambda: xpu)
        monkeypatch.setattr(torch.xpu, "current_device", lambda: 0)
        monkeypatch.setattr(torch.xpu, "get_device_name", lambda index=0: f"Fake XPU {index}")

    return configure


@pytest.mark.parametrize(
    ("cuda", "mps", "xpu", "expected"),
    [
        (1, True, 1, "cuda:0"),  # cuda wins over everything
        (2, False, 0, "cuda:0"),
        (0, True, 1, "mps:0"),  # then mps
        (0, False, 1, "xpu:0"),  # then xpu
        (0, False, 0, "cpu"),  # then cpu
    ],
)
def test_pick_device_prefers_cuda_then_mps_then_xpu_then_cpu(machine, cuda, mps, xpu, expected):
    machine(cuda=cuda, mps=mps, xpu=xpu)
    assert utils.pick_device() == torch.device(expected)


def test_pick_device_follows_torch_accelerator_with_its_runtime_check(machine):
    machine(built="cuda")  # a CUDA build on a machine without a GPU
    assert torch.accelerator.current_accelerator() == torch.device("cuda")
    assert utils.pick_device() == torch.device("cpu")
    machine(xpu=1)
    assert utils.pick_device() == torch.device("xpu:0")


def test_pick_device_takes_an_accelerator_this_module_does_not_know(machine, monkeypatch):
    machine()
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: torch.device("hpu"))
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 2)
    assert utils.pick_device() == torch.device("hpu:2")


def test_pick_device_returns_an_indexed_device_that_equals_tensor_device(machine):
    machine(cuda=1)
    picked = utils.pick_device()
    assert picked.index == 0  # tensor.device on a GPU always says cuda:0, never bare cuda
    assert picked != torch.device("cuda")


def test_environment_variable_overrides_the_choice(machine, monkeypatch):
    machine(cuda=2)
    monkeypatch.setenv("LESSONS_DEVICE", "cpu")
    assert utils.pick_device() == torch.device("cpu")
    monkeypatch.setenv("LESSONS_DEVICE", "cuda:1")
    assert utils.pick_device() == torch.device("cuda:1")
    monkeypatch.setenv("LESSONS_DEVICE", "cuda")
    assert utils.pick_device() == torch.device("cuda:0")


def test_environment_variable_naming_a_missing_device_says_so(machine, monkeypatch):
    machine(cuda=0)
    monkeypatch.setenv("LESSONS_DEVICE", "cuda")
    with pytest.raises(utils.DeviceNotAvailableError, match=r"LESSONS_DEVICE='cuda'.*'cpu'"):
        utils.pick_device()


def test_environment_variable_set_to_meta_is_refused(machine, monkeypatch):
    machine()
    monkeypatch.setenv("LESSONS_DEVICE", "meta")
    with pytest.raises(ValueError, match="meta holds no data"):
        utils.pick_device()


@pytest.mark.parametrize(
    ("spec", "suggestion"),
    [("gpu", "'cuda'"), ("GPU:1", "'cuda:1'"), ("CUDA", "'cuda'"), ("cuda0", "'cuda:0'"),
     ("cuda:x", "'cuda:0'"), ("apple", "'mps'"), ("cpus", "'cpu'")],
)
def test_mistyped_device_gets_a_suggestion(machine, spec, suggestion):
    machine(cuda=1)
    with pytest.raises(ValueError, match=f"Did you mean {suggestion}") as caught:
        utils.parse_device(spec)
    assert repr(spec) in str(caught.value)  # says what it found


def test_unparseable_device_without_a_guess_lists_the_forms(machine):
    machine()
    with pytest.raises(ValueError, match="not a device string") as caught:
        utils.parse_device("banana")
    message = str(caught.value)
    assert "Did you mean" not in message
    assert "'cuda:0'" in message and "'mps'" in message


def test_gpu_index_beyond_the_machine_lists_what_exists(machine):
    machine(cuda=1)
    with pytest.raises(utils.DeviceNotAvailableError) as caught:
        utils.parse_device("cuda:3")
    message = str(caught.value)
    assert "'cuda:3'" in message and "1 cuda device(s)" in message
    assert "'cuda:0', 'cpu'" in message


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "mps", "xpu:0"])
def test_accelerator_on_a_cpu_only_machine_is_not_available(machine, spec):
    machine()
    with pytest.raises(utils.DeviceNotAvailableError, match="Devices here: 'cpu'"):
        utils.parse_device(spec)


def test_parse_device_accepts_what_exists(machine):
    machine(cuda=2, mps=False)
    assert utils.parse_device("cuda:1") == torch.device("cuda:1")
    assert utils.parse_device(torch.device("cpu")) == torch.device("cpu")
    assert utils.parse_device("meta") == torch.device("meta")  # meta exists everywhere


def test_parse_device_rejects_other_types_clearly(machine):
    machine()
    with pytest.raises(TypeError, match="got list"):
        utils.parse_device(["cuda"])


@pytest.mark.parametrize(
    ("cuda", "mps", "xpu", "expected"),
    [(0, False, 0, ["cpu"]), (2, False, 0, ["cuda:0", "cuda:1", "cpu"]),
     (0, True, 0, ["mps", "cpu"]), (1, True, 1, ["cuda:0", "mps", "xpu:0", "cpu"])],
)
def test_available_devices_lists_accelerators_then_cpu(machine, cuda, mps, xpu, expected):
    machine(cuda=cuda, mps=mps, xpu=xpu)
    assert utils.available_devices() == expected


def test_second_device_is_the_accelerator_when_there_is_one(machine):
    machine(cuda=1)
    assert utils.second_device() == torch.device("cuda:0")
    machine(mps=True)
    assert utils.second_device() == torch.device("mps:0")


def test_second_device_is_meta_on_a_cpu_only_machine(machine):
    machine()
    assert utils.second_device() == torch.device("meta")
    assert "not a GPU" in utils.describe_device("meta")


def test_describe_device_names_real_devices(machine):
    machine(cuda=1)
    assert "Fake GPU 0" in utils.describe_device("cuda:0")
    assert utils.describe_device("cpu").startswith("cpu:")
    assert "Apple" in utils.describe_device("mps")


def test_environment_report_on_a_cpu_only_machine_names_what_is_missing(machine):
    machine()
    report = utils.environment_report()
    assert f"torch          : {torch.__version__}" in report
    assert "picked device  : cpu (the best one available)" in report
    assert "second device  : meta (a stand-in: holds no data, computes nothing)" in report
    assert "missing" in report


def test_environment_report_with_gpus_lists_them_and_misses_nothing(machine):
    machine(cuda=2)
    report = utils.environment_report()
    assert "yes, 2 device(s): cuda:0 Fake GPU 0, cuda:1 Fake GPU 1" in report
    assert "picked device  : cuda:0" in report
    assert "missing" not in report


def test_environment_report_says_when_the_device_was_forced(machine, monkeypatch):
    machine(cuda=1)
    monkeypatch.setenv("LESSONS_DEVICE", "cpu")
    report = utils.environment_report()
    assert "forced by LESSONS_DEVICE=cpu; without it, the best one available" in report


def test_environment_report_on_a_mac_reports_mps(machine):
    machine(mps=True)
    report = utils.environment_report()
    assert "MPS available  : yes" in report
    assert "picked device  : mps:0" in report


# --- the learner's case when CUDA is missing: asked of torch, named in the report ----------


@pytest.fixture
def build(monkeypatch):
    """Pretend this torch is a given build: build(cuda='13.0', raises=RuntimeError('...'))."""

    def configure(cuda: str | None = None, hip: str | None = None, mps: bool = False,
                  xpu: str | None = None, raises: BaseException | None = None,
                  driver: bool = False) -> None:
        monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: bool(cuda or hip))
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.version, "xpu", xpu, raising=False)
        monkeypatch.setattr(torch.backends.mps, "is_built", lambda: mps)
        monkeypatch.setattr(devices, "_nvidia_driver_present", lambda: driver)

        def init() -> None:
            if raises is not None:
                raise raises

        monkeypatch.setattr(torch.cuda, "init", init)

    return configure


NO_DRIVER = RuntimeError("Found no NVIDIA driver on your system. Please check that you have an "
                         "NVIDIA GPU and installed a driver from "
                         "http://www.nvidia.com/Download/index.aspx")


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        ({}, "CUDA available : no (this torch is a CPU-only build)\n"),
        ({"driver": True}, "no (this torch is built without CUDA, but this machine has an NVIDIA "
                           "driver: install the CUDA build of torch to use the GPU"),
        ({"cuda": "13.0", "raises": NO_DRIVER},
         "CUDA available : no (CUDA build, but no NVIDIA driver found: lessons use the CPU)"),
        ({"cuda": "13.0", "raises": RuntimeError("No CUDA GPUs are available")},
         "no (CUDA build and an NVIDIA driver, but no GPU it can use (check CUDA_VISIBLE_DEVICES)"
         ": lessons use the CPU)"),
        ({"cuda": "13.0", "raises": RuntimeError(
            "The NVIDIA driver on your system is too old (found version 11040). Please update")},
         "no (CUDA build, but the NVIDIA driver is too old for it: lessons use the CPU)"),
        ({"cuda": "13.0", "raises": RuntimeError("CUDA error: something new\nsecond line")},
         "no (CUDA build, but CUDA cannot start here: CUDA error: something new: lessons use"),
        ({"hip": "7.1", "raises": RuntimeError("No HIP GPUs are available")},
         "no (ROCm build, but no AMD GPU found: lessons use the CPU)"),
        ({"mps": True}, "CUDA available : no (this torch is built without CUDA: lessons use"),
    ],
    ids=["cpu-only build", "cpu-only build, NVIDIA driver", "CUDA build, no driver",
         "driver, no GPU", "old driver", "unknown reason", "ROCm, no GPU", "Mac build"],
)
def test_environment_report_names_the_learners_case_when_cuda_is_missing(
        machine, build, kwargs, line):
    machine()
    build(**kwargs)
    assert line in utils.environment_report()


def test_environment_report_names_mac_and_intel_builds_without_their_gpu(machine, build):
    machine()
    build(mps=True, xpu="20250201")
    report = utils.environment_report()
    assert "MPS available  : no (MPS build, but this Mac cannot use it: lessons use the CPU)" \
        in report
    assert "XPU available  : no (XPU build, but no Intel GPU found: lessons use the CPU)" \
        in report


def test_why_no_cuda_is_none_when_cuda_works(machine, build):
    machine(cuda=1)
    build(cuda="13.0", raises=NO_DRIVER)  # never asked: a working GPU needs no reason
    assert utils.why_no_cuda() is None


def test_why_no_cuda_names_this_torch_build_for_real():
    """No mocks: the case this very torch is in (the CPU build, or the CUDA build in make
    test-torch-next, which has no NVIDIA driver on CI)."""
    if torch.cuda.is_available():
        assert utils.why_no_cuda() is None
    elif not torch.backends.cuda.is_built():
        assert utils.why_no_cuda() == "this torch is a CPU-only build"
    else:
        with pytest.raises(Exception) as raised:  # noqa: B017 - PyTorch's own error, any type
            torch.ones(1).cuda()
        assert utils.why_no_cuda() == devices._no_device_case(raised.value)[1]
        assert f"({utils.why_no_cuda()}: lessons use the CPU)" in utils.environment_report()
