"""labchecks, lab 05: right answers pass, each known wrong answer gets its own diagnosis,
and an exercise that still raises NotImplementedError is reported as not attempted."""

from __future__ import annotations

import pytest
import torch
from lab_checks import assert_feedback as _status
from lab_checks import assert_one_line, stub
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from labchecks import lab05
from labchecks import lab05 as checks
from labchecks.feedback import FAILED, NOT_ATTEMPTED, PASSED

CPU_ONLY = not torch.cuda.is_available()




# --- Exercise 1 ---------------------------------------------------------------------------


def test_gpu_checkpoint_passes_map_location_device(tmp_path):
    def good(path, device):
        return torch.load(path, map_location=device, weights_only=True)

    _status(checks.check_gpu_checkpoint(good, "cpu", folder=tmp_path), PASSED)


@pytest.mark.skipif(not CPU_ONLY, reason="the genuine error needs a machine without CUDA")
def test_gpu_checkpoint_catches_a_missing_map_location(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda path, device: torch.load(path), "cpu",
                                        folder=tmp_path),
            FAILED, "without map_location", "'cuda:0'", "Attempting to deserialize")


@pytest.mark.skipif(not CPU_ONLY, reason="'cuda' is a real device on a GPU machine")
def test_gpu_checkpoint_catches_map_location_cuda_on_a_cpu_machine(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda p, d: torch.load(p, map_location="cuda"), "cpu",
                                        folder=tmp_path),
            FAILED, "map_location='cuda' names a device this machine does not have")


@pytest.mark.skipif(not CPU_ONLY, reason="the cuda:1 tag loads where there are two GPUs")
def test_gpu_checkpoint_catches_a_dict_that_misses_a_tag(tmp_path):
    def only_cuda0(path, device):
        return torch.load(path, map_location={"cuda:0": str(device)})

    _status(checks.check_gpu_checkpoint(only_cuda0, "cpu", folder=tmp_path), FAILED,
            "remaps only the tags it lists", "cuda:0")


def test_gpu_checkpoint_catches_an_ignored_device_argument(tmp_path):
    _status(checks.check_gpu_checkpoint(lambda p, d: torch.load(p, map_location="cpu"), "cpu",
                                        folder=tmp_path),
            FAILED, "ignores its `device` argument", "meta")


def test_gpu_checkpoint_catches_weights_only_false(tmp_path):
    def unsafe(path, device):
        return torch.load(path, map_location=device, weights_only=False)

    _status(checks.check_gpu_checkpoint(unsafe, "cpu", folder=tmp_path), FAILED,
            "weights_only=False")


def test_gpu_checkpoint_catches_returning_a_model(tmp_path):
    def returns_model(path, device):
        model = checks.MysteryNet()
        model.load_state_dict(torch.load(path, map_location="cpu"))
        return model

    _status(checks.check_gpu_checkpoint(returns_model, "cpu", folder=tmp_path), FAILED,
            "return the loaded state dict")


def test_gpu_checkpoint_stub_is_not_attempted(tmp_path):
    _status(checks.check_gpu_checkpoint(stub, "cpu", folder=tmp_path), NOT_ATTEMPTED)


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
    _status(CHECKS[prefix](make_prefix_loader(prefix), folder=tmp_path), PASSED, prefix)


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_passes_utils_strip_wrapper_prefixes(tmp_path, prefix):
    import utils

    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict(utils.strip_wrapper_prefixes(state))
        return model

    _status(CHECKS[prefix](load, folder=tmp_path), PASSED)


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_catches_keys_left_prefixed(tmp_path, prefix):
    _status(CHECKS[prefix](make_prefix_loader(prefix, how="none"), folder=tmp_path),
            FAILED, f"still start with {prefix!r}")


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_catches_strict_false_hiding_missing_keys(tmp_path, prefix):
    _status(CHECKS[prefix](make_prefix_loader(prefix, how="none", strict=False),
                           folder=tmp_path),
            FAILED, f"still start with {prefix!r}", "strict=False hid the mismatch")


def test_compiled_checkpoint_catches_stripping_the_wrong_prefix(tmp_path):
    def wrong_prefix(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, "module.")
        model.load_state_dict(state)
        return model

    _status(checks.check_compiled_checkpoint(wrong_prefix, folder=tmp_path), FAILED,
            "still start with '_orig_mod.'")


def test_ddp_checkpoint_catches_replace_that_rewrites_inner_names(tmp_path):
    _status(checks.check_ddp_checkpoint(make_prefix_loader("module.", how="replace"),
                                        folder=tmp_path),
            FAILED, "'module.submodule.weight' became 'subweight'", "removeprefix")


def test_ddp_checkpoint_catches_replace_hidden_by_strict_false(tmp_path):
    _status(checks.check_ddp_checkpoint(make_prefix_loader("module.", "replace", strict=False),
                                        folder=tmp_path),
            FAILED, "became 'subweight'", "strict=False hid the mismatch")


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

    _status(checks.check_ddp_checkpoint(loads_elsewhere, folder=tmp_path), FAILED,
            "into `model` itself")


def test_ddp_checkpoint_catches_weights_only_false(tmp_path):
    def unsafe(path, model):
        state = torch.load(path, map_location="cpu", weights_only=False)
        consume_prefix_in_state_dict_if_present(state, "module.")
        model.load_state_dict(state)
        return model

    _status(checks.check_ddp_checkpoint(unsafe, folder=tmp_path), FAILED,
            "weights_only=False")


@pytest.mark.parametrize("prefix", CHECKS)
def test_prefixed_checkpoint_stub_is_not_attempted(tmp_path, prefix):
    _status(CHECKS[prefix](stub, folder=tmp_path), NOT_ATTEMPTED)


# --- Exercise 4 ---------------------------------------------------------------------------


def good_whole_loader(path, trusted):
    needed = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    allowed = {f"{cls.__module__}.{cls.__qualname__}" for cls in trusted}
    if needed - allowed:
        raise ValueError(f"refusing: the file also asks for {sorted(needed - allowed)}")
    with torch.serialization.safe_globals(trusted):
        return torch.load(path, map_location="cpu", weights_only=True)


def test_whole_model_passes_inspect_then_safe_globals(tmp_path):
    _status(checks.check_whole_model(good_whole_loader, folder=tmp_path), PASSED)


def test_whole_model_passes_safe_globals_alone(tmp_path):
    def safe_globals_only(path, trusted):
        with torch.serialization.safe_globals(trusted):
            return torch.load(path, weights_only=True)

    _status(checks.check_whole_model(safe_globals_only, folder=tmp_path), PASSED)


def test_whole_model_catches_weights_only_false_and_leaves_no_marker(tmp_path):
    before = list(lab05.MARKERS)
    _status(checks.check_whole_model(lambda p, t: torch.load(p, weights_only=False),
                                     folder=tmp_path),
            FAILED, "ran code hidden in the second file")
    assert lab05.MARKERS == before


def test_whole_model_catches_a_plain_load(tmp_path):
    _status(checks.check_whole_model(lambda p, t: torch.load(p), folder=tmp_path),
            FAILED, "refused MysteryNet and Linear", "safe_globals(trusted)")


def test_whole_model_catches_add_safe_globals_and_restores_the_allowlist(tmp_path):
    def global_allowlist(path, trusted):
        torch.serialization.add_safe_globals(trusted)
        return torch.load(path, weights_only=True)

    _status(checks.check_whole_model(global_allowlist, folder=tmp_path), FAILED,
            "add_safe_globals")
    allowed = torch.serialization.get_safe_globals()  # PyTorch may add its own on first use
    assert checks.MysteryNet not in allowed and nn.Linear not in allowed


def test_whole_model_catches_returning_the_state_dict(tmp_path):
    def state_dict_instead(path, trusted):
        return good_whole_loader(path, trusted).state_dict()

    _status(checks.check_whole_model(state_dict_instead, folder=tmp_path), FAILED,
            "return the loaded model")


def test_whole_model_catches_a_loader_that_accepts_everything(tmp_path):
    def swallows_errors(path, trusted):
        try:
            return good_whole_loader(path, trusted)
        except Exception:
            return nn.Identity()

    _status(checks.check_whole_model(swallows_errors, folder=tmp_path), FAILED,
            "instead of refusing")


def test_whole_model_stub_is_not_attempted(tmp_path):
    _status(checks.check_whole_model(stub, folder=tmp_path), NOT_ATTEMPTED)


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
            FAILED, "refused MysteryNet and Linear")
    assert checks.MysteryNet not in torch.serialization.get_safe_globals()


# --- answer tables ------------------------------------------------------------------------


def gpu_loader(load):
    return load


RIGHT_GPU = {
    "map_location=device": lambda p, d: torch.load(p, map_location=d, weights_only=True),
    "positional": lambda p, d: torch.load(p, d),
    "str(device)": lambda p, d: torch.load(p, map_location=str(d)),
    "torch.device(device)": lambda p, d: torch.load(p, map_location=torch.device(d)),
    "callable storage.to(device=device)": lambda p, d: torch.load(
        p, map_location=lambda storage, location: storage.to(device=d)),
    "cpu, then a new dict": lambda p, d: {k: v.to(d) for k, v in torch.load(
        p, map_location="cpu", weights_only=True).items()},
    "callable identity, then moved": lambda p, d: {k: v.to(d) for k, v in torch.load(
        p, map_location=lambda storage, location: storage).items()},
    "open file handle": lambda p, d: torch.load(open(p, "rb"), map_location=d),
    "mmap": lambda p, d: torch.load(p, map_location=d, mmap=True, weights_only=True),
}


def unkept_moves(path, device):
    state = torch.load(path, map_location="cpu", weights_only=True)
    for value in state.values():
        value.to(device)
    return state


ALL_THREE_TAGS = ("cuda:0", "cuda:1", "mps")
WRONG_GPU = {
    "dict listing the check's three tags": (
        lambda p, d: torch.load(p, map_location=dict.fromkeys(ALL_THREE_TAGS, str(d))),
        ["your map_location dict lists cuda:0, cuda:1, mps", "map_location=device"]),
    "dict with torch.device values": (
        lambda p, d: torch.load(p, map_location=dict.fromkeys(ALL_THREE_TAGS, torch.device(d))),
        ["must be strings", "map_location=device"]),
    "unkept v.to(device)": (unkept_moves, ["threw the result away", "Tensor.to returns"]),
    "storage.cuda() in a callable": (
        lambda p, d: torch.load(p, map_location=lambda storage, location: storage.cuda()),
        ["asks for CUDA", "map_location=device"]),
    "storage.to(device) positional": (
        lambda p, d: torch.load(p, map_location=lambda storage, location: storage.to(d)),
        ["by keyword only", "storage.to(device=device)"]),
    "callable ignoring device": (
        lambda p, d: torch.load(p, map_location=lambda storage, location: storage),
        ["your map_location function puts storages there whatever device"]),
    "hard-coded cpu": (lambda p, d: torch.load(p, map_location="cpu"),
                       ["ignores its `device` argument"]),
    "weights_only=False": (lambda p, d: torch.load(p, map_location=d, weights_only=False),
                           ["weights_only=False"]),
}
if CPU_ONLY:
    WRONG_GPU.update({
        "no map_location": (lambda p, d: torch.load(p), ["without map_location", "'cuda:0'"]),
        "map_location='cuda'": (lambda p, d: torch.load(p, map_location="cuda"),
                                ["names a device this machine does not have"]),
    })


@pytest.mark.parametrize("load", RIGHT_GPU.values(), ids=RIGHT_GPU)
def test_gpu_checkpoint_accepts_every_correct_style(tmp_path, load):
    _status(checks.check_gpu_checkpoint(load, "cpu", folder=tmp_path), PASSED)


@pytest.mark.parametrize(("load", "phrases"), WRONG_GPU.values(), ids=WRONG_GPU)
def test_gpu_checkpoint_names_the_misconception(tmp_path, load, phrases):
    assert_one_line(_status(checks.check_gpu_checkpoint(load, "cpu", folder=tmp_path),
                            FAILED, *phrases))


def test_unkept_moves_are_not_blamed_on_an_ignored_device_argument(tmp_path):
    feedback = checks.check_gpu_checkpoint(unkept_moves, "cpu", folder=tmp_path)
    assert "ignores its `device` argument" not in feedback.message


def test_meta_really_refuses_a_callable_map_location(tmp_path):
    """Why the check does not hold a callable map_location to meta: PyTorch refuses."""
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(Exception, match="META device module is not loaded"):
        torch.load(path, map_location=lambda storage, _: storage.to(device=torch.device("meta")))


def strip_with(rename, prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.load_state_dict({rename(key, prefix): value for key, value in state.items()})
        return model

    return load


def consume_in_place(prefix):
    def load(path, model):
        state = torch.load(path, weights_only=True)
        consume_prefix_in_state_dict_if_present(state, prefix)
        model.load_state_dict(state)
        return model

    return load


def loop_removeprefix(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu")
        stripped = {}
        for key in state:
            stripped[key.removeprefix(prefix)] = state[key]
        model.load_state_dict(stripped, strict=True)
        return model

    return load


def wrapper_loads(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        if prefix == "module.":
            nn.DataParallel(model).load_state_dict(state)  # the wrapper loads into model
        else:
            consume_prefix_in_state_dict_if_present(state, prefix)
            model.load_state_dict(state, assign=True)
        return model

    return load


def right_prefix_loaders(prefix):
    return {
        "consume_prefix in place": consume_in_place(prefix),
        "removeprefix comprehension": strip_with(lambda k, p: k.removeprefix(p), prefix),
        "removeprefix loop": loop_removeprefix(prefix),
        "slice by length": strip_with(lambda k, p: k[len(p):] if k.startswith(p) else k, prefix),
        "replace once": strip_with(lambda k, p: k.replace(p, "", 1), prefix),
        "regular expression": strip_with(lambda k, p: __import__("re").sub("^" + __import__(
            "re").escape(p), "", k), prefix),
        "partition": strip_with(lambda k, p: k.partition(p)[2] if k.startswith(p) else k, prefix),
        "wrapper or assign=True": wrapper_loads(prefix),
    }


def consume_kept_as_result(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        state = consume_prefix_in_state_dict_if_present(state, prefix)  # returns None
        model.load_state_dict(state)
        return model

    return load


def returns_load_state_dict(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, prefix)
        return model.load_state_dict(state)

    return load


def returns_nothing(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, prefix)
        model.load_state_dict(state)

    return load


def unsafe_prefix_loader(prefix):
    def load(path, model):
        state = torch.load(path, map_location="cpu", weights_only=False)
        consume_prefix_in_state_dict_if_present(state, prefix)
        model.load_state_dict(state)
        return model

    return load


def wrong_prefix_loaders(prefix):
    wrong = {
        "lstrip": (strip_with(lambda k, p: k.lstrip(p), prefix),
                   [f"key.lstrip({prefix!r}) removes *characters*", "removeprefix"]),
        "strip": (strip_with(lambda k, p: k.strip(p), prefix),
                  ["removes *characters*", "str.strip and str.lstrip"]),
        "lstrip hidden by strict=False": (
            lambda path, model: model.load_state_dict({k.lstrip(prefix): v for k, v in torch.load(
                path, weights_only=True).items()}, strict=False) and model,
            ["removes *characters*", "strict=False hid the mismatch"]),
        "consume_prefix's None kept": (consume_kept_as_result(prefix),
                                       ["changes the dict you give it and returns None"]),
        "returns load_state_dict's result": (returns_load_state_dict(prefix),
                                             ["returned what load_state_dict returns"]),
        "returns nothing": (returns_nothing(prefix), ["returned None", "return model"]),
        "weights_only=False": (unsafe_prefix_loader(prefix), ["weights_only=False"]),
        "prefix left": (make_prefix_loader(prefix, how="none"), [f"still start with {prefix!r}"]),
    }
    if prefix == "module.":
        wrong["replace"] = (make_prefix_loader(prefix, how="replace"), ["became 'subweight'"])
    return wrong


def table(prefix, rows):
    return [pytest.param(prefix, *row, id=f"{prefix}{name}") for name, row in rows.items()]


RIGHT_PREFIXED = [pytest.param(prefix, loader, id=f"{prefix}{name}") for prefix in CHECKS
                  for name, loader in right_prefix_loaders(prefix).items()]
WRONG_PREFIXED = [pytest.param(prefix, loader, phrases, id=f"{prefix}{name}") for prefix in CHECKS
                  for name, (loader, phrases) in wrong_prefix_loaders(prefix).items()]


@pytest.mark.parametrize(("prefix", "load"), RIGHT_PREFIXED)
def test_prefixed_checkpoint_accepts_every_correct_style(tmp_path, prefix, load):
    _status(CHECKS[prefix](load, folder=tmp_path), PASSED)


@pytest.mark.parametrize(("prefix", "load", "phrases"), WRONG_PREFIXED)
def test_prefixed_checkpoint_names_the_misconception(tmp_path, prefix, load, phrases):
    assert_one_line(_status(CHECKS[prefix](load, folder=tmp_path), FAILED, *phrases))


def test_mystery_net_layer_names_expose_lstrip_for_both_prefixes():
    keys = list(checks.MysteryNet().state_dict())
    for prefix in CHECKS:
        assert any((prefix + key).lstrip(prefix) != key for key in keys), prefix


def whole_refuses_then_unsafe(path, trusted):
    needed = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    if needed - {f"{cls.__module__}.{cls.__qualname__}" for cls in trusted}:
        raise ValueError("refused")
    return torch.load(path, weights_only=False)


def whole_by_name(path, trusted):
    asks = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    names = [f"{cls.__module__}.{cls.__name__}" for cls in trusted]
    unknown = [name for name in asks if name not in names]
    if unknown:
        raise RuntimeError(f"untrusted: {unknown}")
    with torch.serialization.safe_globals(list(trusted)):
        model = torch.load(path, map_location=torch.device("cpu"))
    return model


def whole_let_pytorch_refuse(path, trusted):
    with torch.serialization.safe_globals(trusted):
        return torch.load(path, weights_only=True)  # refuses anything else by itself


def whole_with_file(path, trusted):
    with open(path, "rb") as handle, torch.serialization.safe_globals(trusted):
        return torch.load(handle, mmap=False)


def whole_tuple_entries(path, trusted):
    entries = [(cls, f"{cls.__module__}.{cls.__qualname__}") for cls in trusted]
    extra = set(torch.serialization.get_unsafe_globals_in_checkpoint(path)) - {
        name for _, name in entries}
    assert not extra, f"refusing {extra}"
    with torch.serialization.safe_globals(entries):
        return torch.load(path)


RIGHT_WHOLE = {f.__name__: f for f in (good_whole_loader, whole_by_name, whole_let_pytorch_refuse,
                                       whole_with_file, whole_tuple_entries)}
RIGHT_WHOLE["inspect first, map_location='cpu'"] = lambda p, t: good_whole_loader(p, t)


@pytest.mark.parametrize("load", RIGHT_WHOLE.values(), ids=RIGHT_WHOLE)
def test_whole_model_accepts_every_correct_style(tmp_path, load):
    _status(checks.check_whole_model(load, folder=tmp_path), PASSED)


def test_whole_model_with_weights_only_false_but_no_code_run_is_not_told_code_ran(tmp_path):
    feedback = _status(checks.check_whole_model(whole_refuses_then_unsafe, folder=tmp_path),
                       FAILED, "no code from the second file ran", "weights_only=False")
    assert "your loader ran code" not in feedback.message


def test_whole_model_plain_load_gets_one_line_without_escape_codes(tmp_path):
    assert_one_line(checks.check_whole_model(lambda p, t: torch.load(p), folder=tmp_path))


@pytest.mark.parametrize("table", [RIGHT_GPU, right_prefix_loaders("module."),
                                   right_prefix_loaders("_orig_mod."), RIGHT_WHOLE],
                         ids=["exercise 1", "exercise 2", "exercise 3", "exercise 4"])
def test_every_exercise_has_at_least_six_differently_written_right_answers(table):
    assert len(table) >= 6


def test_ddp_checkpoint_names_the_keys_a_failed_load_state_dict_lists(tmp_path):
    """load_state_dict's own message is long; the learner sees the keys it names, not line 1."""
    def drops_the_biases(path, model):
        state = torch.load(path, map_location="cpu", weights_only=True)
        consume_prefix_in_state_dict_if_present(state, "module.")
        model.load_state_dict({k: v for k, v in state.items() if not k.endswith("bias")})
        return model

    feedback = _status(checks.check_ddp_checkpoint(drops_the_biases, folder=tmp_path),
                       FAILED, "load_state_dict refused the weights: missing keys [")
    assert "bias" in feedback.message


def test_a_failed_load_state_dict_of_prefixed_keys_says_to_strip_the_prefix():
    from labchecks.feedback import explain

    model = torch.nn.Linear(2, 2)
    state = {"module." + k: v for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError) as caught:
        model.load_state_dict(state)
    said = explain(caught.value)
    assert "missing keys ['weight', 'bias']" in said
    assert "unexpected keys ['module.weight', 'module.bias']" in said
    assert "start with 'module.'" in said and "\n" not in said
