"""utils.checks, lab 05: right answers pass, each known wrong answer gets its own diagnosis,
and an exercise that still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import stub
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from utils import checks
from utils.checks import lab05

CPU_ONLY = not torch.cuda.is_available()




# --- Exercise 1 ---------------------------------------------------------------------------


def test_gpu_checkpoint_passes_map_location_device(tmp_path):
    def good(path, device):
        return torch.load(path, map_location=device, weights_only=True)

    _status(checks.check_gpu_checkpoint(good, "cpu", folder=tmp_path), checks.PASSED)


@pytest.mark.skipif(not CPU_ONLY, reason="the genuine error needs a machine without CUDA")
def test_gpu_checkpoint_catches_a_missing_map_location(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda path, device: torch.load(path), "cpu",
                                        folder=tmp_path),
            checks.FAILED, "without map_location", "'cuda:0'", "Attempting to deserialize")


@pytest.mark.skipif(not CPU_ONLY, reason="'cuda' is a real device on a GPU machine")
def test_gpu_checkpoint_catches_map_location_cuda_on_a_cpu_machine(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda p, d: torch.load(p, map_location="cuda"), "cpu",
                                        folder=tmp_path),
            checks.FAILED, "map_location='cuda' names a device this machine does not have")


@pytest.mark.skipif(not CPU_ONLY, reason="the cuda:1 tag loads where there are two GPUs")
def test_gpu_checkpoint_catches_a_dict_that_misses_a_tag(tmp_path):
    def only_cuda0(path, device):
        return torch.load(path, map_location={"cuda:0": str(device)})

    _status(checks.check_gpu_checkpoint(only_cuda0, "cpu", folder=tmp_path), checks.FAILED,
            "only remaps the tags it lists", "'cuda:1'")


def test_gpu_checkpoint_catches_an_ignored_device_argument(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda p, d: torch.load(p, map_location="cpu"), "cpu",
                                        folder=tmp_path),
            checks.FAILED, "ignores its `device` argument", "meta")


def test_gpu_checkpoint_catches_weights_only_false(tmp_path):
    def unsafe(path, device):
        return torch.load(path, map_location=device, weights_only=False)

    _status(checks.check_gpu_checkpoint(unsafe, "cpu", folder=tmp_path), checks.FAILED,
            "weights_only=False")


def test_gpu_checkpoint_catches_returning_a_model(tmp_path):
    def returns_model(path, device):
        model = checks.MysteryNet()
        model.load_state_dict(torch.load(path, map_location="cpu"))
        return model

    _status(checks.check_gpu_checkpoint(returns_model, "cpu", folder=tmp_path), checks.FAILED,
            "return the loaded state dict")


def test_gpu_checkpoint_stub_is_not_attempted(tmp_path):
    _status(checks.check_gpu_checkpoint(stub, "cpu", folder=tmp_path), checks.NOT_ATTEMPTED)


# --- Exercises 2 and 3 --------------------------------------------------------------------


def make_prefix_loader(prefix: str, how: str = "consume", strict: bool = True):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        if how == "consume":
            consume_prefix_in_state_dict_if_present(state, prefix)
        elif how == "replace":
            state = {key.replace(prefix, ""): value for key, value in state.items()}
        model.load_state_dict(state, strict=strict)
        return model

    return load


CHECKS = {"module.": checks.check_ddp_checkpoint, "_orig_mod.": checks.check_compiled_checkpoint}


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_passes_when_only_the_leading_prefix_goes(tmp_path, prefix):
    _status(CHECKS[prefix](make_prefix_loader(prefix), folder=tmp_path), checks.PASSED, prefix)


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_passes_utils_strip_wrapper_prefixes(tmp_path, prefix):
    import utils

    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        return model.load_state_dict(utils.strip_wrapper_prefixes(state))

    _status(CHECKS[prefix](load, folder=tmp_path), checks.PASSED)


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_catches_keys_left_prefixed(tmp_path, prefix):
    _status(CHECKS[prefix](make_prefix_loader(prefix, how="none"), folder=tmp_path),
            checks.FAILED, f"still start with {prefix!r}")


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_catches_strict_false_hiding_missing_keys(tmp_path, prefix):
    _status(CHECKS[prefix](make_prefix_loader(prefix, how="none", strict=False),
                           folder=tmp_path),
            checks.FAILED, f"still start with {prefix!r}", "strict=False hid the mismatch")


def test_compiled_checkpoint_catches_stripping_the_wrong_prefix(tmp_path):
    def wrong_prefix(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, "module.")
        model.load_state_dict(state)

    _status(checks.check_compiled_checkpoint(wrong_prefix, folder=tmp_path), checks.FAILED,
            "still start with '_orig_mod.'")


def test_ddp_checkpoint_catches_replace_that_rewrites_inner_names(tmp_path):
    _status(checks.check_ddp_checkpoint(make_prefix_loader("module.", how="replace"),
                                        folder=tmp_path),
            checks.FAILED, "'module.submodule.weight' became 'subweight'", "removeprefix")


def test_ddp_checkpoint_catches_replace_hidden_by_strict_false(tmp_path):
    _status(checks.check_ddp_checkpoint(make_prefix_loader("module.", "replace", strict=False),
                                        folder=tmp_path),
            checks.FAILED, "became 'subweight'", "strict=False hid the mismatch")


def test_replace_really_corrupts_a_key_that_consume_prefix_keeps():
    keys = {"module.submodule.weight": 0}
    assert [k.replace("module.", "") for k in keys] == ["subweight"]
    consume_prefix_in_state_dict_if_present(keys, "module.")
    assert list(keys) == ["submodule.weight"]


def test_ddp_checkpoint_catches_loading_into_another_model(tmp_path):
    def loads_elsewhere(path, model):
        other = checks.MysteryNet()
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, "module.")
        other.load_state_dict(state)
        return other

    _status(checks.check_ddp_checkpoint(loads_elsewhere, folder=tmp_path), checks.FAILED,
            "into `model` itself")


def test_ddp_checkpoint_catches_weights_only_false(tmp_path):
    def unsafe(path, model):
        state = torch.load(path, map_location="cpu", weights_only=False)
        consume_prefix_in_state_dict_if_present(state, "module.")
        model.load_state_dict(state)

    _status(checks.check_ddp_checkpoint(unsafe, folder=tmp_path), checks.FAILED,
            "weights_only=False")


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_stub_is_not_attempted(tmp_path, prefix):
    _status(CHECKS[prefix](stub, folder=tmp_path), checks.NOT_ATTEMPTED)


# --- Exercise 4 ---------------------------------------------------------------------------


def good_whole_loader(path, trusted):
    needed = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    allowed = {f"{cls.__module__}.{cls.__qualname__}" for cls in trusted}
    if needed - allowed:
        raise ValueError(f"refusing: the file also asks for {sorted(needed - allowed)}")
    with torch.serialization.safe_globals(trusted):
        return torch.load(path, map_location="cpu", weights_only=True)


def test_whole_model_passes_inspect_then_safe_globals(tmp_path):
    _status(checks.check_whole_model(good_whole_loader, folder=tmp_path), checks.PASSED)


def test_whole_model_passes_safe_globals_alone(tmp_path):
    def safe_globals_only(path, trusted):
        with torch.serialization.safe_globals(trusted):
            return torch.load(path, weights_only=True)

    _status(checks.check_whole_model(safe_globals_only, folder=tmp_path), checks.PASSED)


def test_whole_model_catches_weights_only_false_and_leaves_no_marker(tmp_path):
    before = list(lab05.MARKERS)
    _status(checks.check_whole_model(lambda p, t: torch.load(p, weights_only=False),
                                     folder=tmp_path),
            checks.FAILED, "ran code hidden in the second file")
    assert lab05.MARKERS == before


def test_whole_model_catches_a_plain_load(tmp_path):
    _status(checks.check_whole_model(lambda p, t: torch.load(p), folder=tmp_path),
            checks.FAILED, "refused MysteryNet and Linear", "safe_globals(trusted)")


def test_whole_model_catches_add_safe_globals_and_restores_the_allowlist(tmp_path):
    def global_allowlist(path, trusted):
        torch.serialization.add_safe_globals(trusted)
        return torch.load(path, weights_only=True)

    _status(checks.check_whole_model(global_allowlist, folder=tmp_path), checks.FAILED,
            "add_safe_globals")
    allowed = torch.serialization.get_safe_globals()  # PyTorch may add its own on first use
    assert checks.MysteryNet not in allowed and nn.Linear not in allowed


def test_whole_model_catches_returning_the_state_dict(tmp_path):
    def state_dict_instead(path, trusted):
        return good_whole_loader(path, trusted).state_dict()

    _status(checks.check_whole_model(state_dict_instead, folder=tmp_path), checks.FAILED,
            "return the loaded model")


def test_whole_model_catches_a_loader_that_accepts_everything(tmp_path):
    def swallows_errors(path, trusted):
        try:
            return good_whole_loader(path, trusted)
        except Exception:
            return nn.Identity()

    _status(checks.check_whole_model(swallows_errors, folder=tmp_path), checks.FAILED,
            "instead of refusing")


def test_whole_model_stub_is_not_attempted(tmp_path):
    _status(checks.check_whole_model(stub, folder=tmp_path), checks.NOT_ATTEMPTED)


def test_the_marker_class_really_runs_under_weights_only_false(tmp_path):
    path = tmp_path / "marker.pt"
    torch.save(lab05.LeavesAMarker(), path)
    before = len(lab05.MARKERS)
    torch.load(path, weights_only=False)  # trusted: written one line above, by this test
    assert len(lab05.MARKERS) == before + 1
    del lab05.MARKERS[before:]


def test_whole_model_is_not_fooled_by_an_earlier_add_safe_globals(tmp_path):
    torch.serialization.add_safe_globals([checks.MysteryNet, nn.Linear])
    _status(checks.check_whole_model(lambda p, t: torch.load(p), folder=tmp_path),
            checks.FAILED, "refused MysteryNet and Linear")
    assert checks.MysteryNet not in torch.serialization.get_safe_globals()
