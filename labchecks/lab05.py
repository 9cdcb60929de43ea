"""Checks for lab 05_save_load_scenarios: load mystery checkpoints correctly and safely.

Each check writes its own checkpoint files into ``folder``, runs the learner's loader on them
(recording how ``torch.load`` and ``load_state_dict`` were called) and compares what arrived
with what was saved. The one "hostile" file asks for :func:`_leave_marker`, which only appends
to :data:`MARKERS`: a loader that runs pickled code is caught without harm.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import nn

from labchecks.feedback import (
    FAILED,
    PASSED,
    Feedback,
    call,
    device_name,
    explain,
    first_line,
    loaded_unsafely,
    moved_and_dropped,
    not_a_function,
    recorded_loads,
    recorded_to_calls,
    seeded,
    stop_on,
    unsafe_load,
)
from labchecks.gpu_stand_in import STAND_IN_GPU, gpu_placement_problem
from labchecks.grading import graded
from utils.checkpoints import add_prefix, save_as_if_on

#: Notes left by unpickling a :class:`LeavesAMarker`: proof that a loader ran pickled code.
MARKERS: list[str] = []


class MysteryNet(nn.Module):
    """The model in every lab 05 checkpoint: layers ``submodule`` and ``output``.

    The names expose the two ways of stripping a prefix that look right and are not:
    ``key.replace('module.', '')`` turns ``module.submodule.weight`` into ``subweight``,
    and ``key.lstrip('module.')`` (which strips *characters*, not a prefix) turns
    ``module.output.weight`` into ``tput.weight`` (``_orig_mod.output.weight`` into
    ``utput.weight``). Introduced in lab 05_save_load_scenarios.
    """

    def __init__(self) -> None:
        super().__init__()
        self.submodule = nn.Linear(4, 3)
        self.output = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(torch.relu(self.submodule(x)))


def _leave_marker(note: str) -> str:
    MARKERS.append(note)
    return note


class LeavesAMarker:
    """Pickles as a call to ``_leave_marker``: harmless stand-in for a hostile payload."""

    def __reduce__(self):
        return (_leave_marker, ("code inside the checkpoint ran while loading",))


def mystery_net(seed: int) -> MysteryNet:
    """Return a :class:`MysteryNet` on the CPU with weights drawn from ``seed``.

    Introduced in lab 05_save_load_scenarios.
    """
    return seeded(MysteryNet, seed)


def _saved(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}


def _first_line(error: BaseException) -> str:
    return first_line(error).split(". ")[0].rstrip(".")


UNSAFE = unsafe_load("a state dict")


# --- Exercise 1: saved on a GPU ----------------------------------------------------------


def _where_it_went(calls: list[dict], tag: str, error: BaseException) -> str | None:
    """Name the map_location mistake behind a 'cannot deserialize here' error."""
    location = calls[-1].get("map_location") if calls else None
    if location is None:
        return (f"torch.load without map_location puts every tensor back on the device its "
                f"tag names, here {tag!r}, and this machine has none ({_first_line(error)}). "
                "Pass map_location=device.")
    if isinstance(location, Mapping):
        return (f"your map_location dict {location!r} remaps only the tags it lists; this file "
                f"was saved with the tag {tag!r}, which is not in it, so its tensors still go "
                "there. Pass map_location=device: every tag goes to that one device.")
    if isinstance(location, (str, torch.device)):
        return (f"map_location={location!r} names a device this machine does not have: "
                "map_location is where the tensors go, not where they came from. Use the "
                "`device` argument: map_location=device.")
    return None


@graded
def check_gpu_checkpoint(load_gpu_checkpoint: Callable, device: str | torch.device,
                         folder: str | os.PathLike = "checkpoints") -> Feedback:
    """Exercise 05.1: ``load_gpu_checkpoint(path, device)`` returns the state dict on ``device``.

    Runs it on files tagged ``cuda:0``, ``cuda:1`` and ``mps``, each loaded onto
    ``device`` and onto the meta device (except a callable map_location, which PyTorch
    cannot point at meta). Catches: no map_location; map_location naming a GPU
    ('cuda'); any dict map_location (it covers only the tags it lists, however many);
    ``.to(device)`` results thrown away; the device argument ignored (a hard-coded
    'cpu' or a callable that ignores it); weights_only=False.
    Introduced in lab 05_save_load_scenarios.
    """
    exercise = "Exercise 1"
    stop_on(not_a_function(exercise, load_gpu_checkpoint))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    device = torch.device(device)
    targets = [device] + ([torch.device("meta")] if device.type != "meta" else [])
    saved = _saved(mystery_net(seed=51))
    for tag in ("cuda:0", "cuda:1", "mps"):
        path = save_as_if_on(saved, folder / f"lab05_check_{tag.replace(':', '')}.pt", tag)
        for target in targets:
            with recorded_loads() as calls, recorded_to_calls() as moves:
                state, error = call(load_gpu_checkpoint, path, target)
            location = calls[-1].get("map_location") if calls else None
            if error is not None:
                if (target.type == "meta" and callable(location)
                        and "META device module is not loaded" in str(error)):
                    # PyTorch cannot make storages on meta inside torch.load: a correct
                    # callable map_location fails here, so meta cannot check this form.
                    continue
                message = str(error)
                if ("Attempting to deserialize object on" in message
                        or "Storage device not recognized" in message):
                    diagnosis = _where_it_went(calls, tag, error)
                    if diagnosis:
                        return Feedback(exercise, FAILED, diagnosis)
                return Feedback(exercise, FAILED, f"loading the file saved on {tag} onto "
                                f"{device_name(target)}: {explain(error)}")
            if loaded_unsafely(calls):
                return Feedback(exercise, FAILED, UNSAFE)
            if isinstance(location, Mapping):
                listed = ", ".join(map(str, location))
                return Feedback(exercise, FAILED,
                                f"your map_location dict lists {listed}: a dict remaps only "
                                "the tags it lists, and checkpoints carry whatever tag "
                                "their machine wrote (cuda:3, xpu:0, mps:0, ...), so the "
                                "next file goes back to its GPU. Pass map_location=device: "
                                "every tag goes to that one device.")
            if not isinstance(state, Mapping) or set(state) != set(saved):
                return Feedback(exercise, FAILED, "return the loaded state dict (a dict of "
                                f"tensors with keys {sorted(saved)}); got "
                                f"{type(state).__name__}.")
            landed = {str(tensor.device) for tensor in state.values()}
            if landed != {str(target)} and not (
                    target.type == "cuda" and target.index is None
                    and all(t.device.type == "cuda" for t in state.values())):
                return Feedback(exercise, FAILED,
                                _landed_elsewhere(state, target, landed, location, moves))
            if target.type != "meta" and any(
                    not torch.equal(state[key].cpu(), saved[key]) for key in saved):
                return Feedback(exercise, FAILED, "the tensors you returned are not the "
                                                  "saved ones: return what torch.load read.")
    stop_on(gpu_placement_problem(exercise, load_gpu_checkpoint,
                                  folder / "lab05_check_cuda0.pt", STAND_IN_GPU,
                                  fix="map_location=device"))
    return Feedback(exercise, PASSED, "files tagged cuda:0, cuda:1 and mps all load onto the "
                                      "device you ask for: map_location=device overrides every "
                                      "saved tag.")


def _landed_elsewhere(state: Mapping, target: torch.device, landed: set[str], location,
                      moves: list) -> str:
    """Why the loaded tensors are not on ``target``: a move not kept, or the argument unused."""
    asked = f"asked for {device_name(target)}, the tensors landed on {', '.join(sorted(landed))}"
    if any(moved_and_dropped(moves, tensor, target) for tensor in state.values()):
        return (f"{asked}: you called `.to(device)` on each tensor and threw the result away. "
                "Tensor.to returns a new tensor and leaves the one in the dict where it was: "
                "build a new dict, `{key: value.to(device) for key, value in state.items()}`, "
                "or simply load with map_location=device.")
    if callable(location):
        why = "your map_location function puts storages there whatever device you ask for"
    elif location is not None:
        why = (f"the function ignores its `device` argument: map_location={location!r} "
               "is fixed")
    else:
        why = "without map_location each tensor goes back to its saved tag"
    return f"{asked}: {why}. Pass map_location=device."


# --- Exercises 2 and 3: wrapper prefixes -------------------------------------------------


def _instrument(model: nn.Module) -> list[dict]:
    """Record every model.load_state_dict call: the keys it got and its strict flag."""
    calls: list[dict] = []
    real = model.load_state_dict

    def recording(state_dict, strict=True, assign=False):
        calls.append({"keys": list(state_dict) if isinstance(state_dict, Mapping) else [],
                      "strict": strict})
        return real(state_dict, strict=strict, assign=assign)

    model.load_state_dict = recording  # type: ignore[method-assign]
    return calls


def _prefix_mistake(keys: list[str], expected: list[str], prefix: str, strict: bool) -> str:
    """Explain why ``keys`` did not match ``expected``, or return ''."""
    replaced = {(prefix + key).replace(prefix, ""): key for key in expected
                if (prefix + key).replace(prefix, "") != key}
    mangled = [key for key in keys if key in replaced]
    hidden = (" and strict=False hid the mismatch: load_state_dict returns the missing and "
              "unexpected keys, and the weights it could not match stay random"
              if not strict else "")
    for method in ("lstrip", "strip"):
        stripped = {getattr(prefix + key, method)(prefix): key for key in expected
                    if getattr(prefix + key, method)(prefix) != key}
        chewed = [key for key in keys if key in stripped]
        if chewed:
            ends = "start" if method == "lstrip" else "ends"
            return (f"key.{method}({prefix!r}) removes *characters*, any of "
                    f"{''.join(sorted(set(prefix)))!r} from the {ends}, "
                    f"not the prefix: {prefix + stripped[chewed[0]]!r} became {chewed[0]!r}"
                    f"{hidden}. It looked right only for names that start with other letters "
                    "(str.strip and str.lstrip both work this way). Strip the prefix itself: "
                    f"key.removeprefix({prefix!r}) or "
                    f"consume_prefix_in_state_dict_if_present(state_dict, {prefix!r}).")
    if mangled:
        return (f"key.replace({prefix!r}, '') removes {prefix!r} everywhere, also inside names: "
                f"{prefix + replaced[mangled[0]]!r} became {mangled[0]!r}{hidden}. Strip only "
                "the leading prefix: consume_prefix_in_state_dict_if_present(state_dict, "
                f"{prefix!r}) or key.removeprefix({prefix!r}).")
    if keys and all(key.startswith(prefix) for key in keys):
        return (f"the keys still start with {prefix!r} (e.g. {keys[0]!r}), while the plain "
                f"model expects {expected[0]!r}{hidden}. Strip the leading {prefix!r} from every "
                "key before load_state_dict.")
    if not strict:
        return ("strict=False let load_state_dict skip keys it could not match, so some weights "
                "stayed random. Keep strict=True: a mismatch should stop you.")
    return ""


def _check_prefixed(exercise: str, loader: Callable, prefix: str, wrapper: str,
                    folder: str | os.PathLike) -> Feedback:
    stop_on(not_a_function(exercise, loader))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    saved = _saved(mystery_net(seed=52))
    path = folder / f"lab05_check_{prefix.strip('._')}.pt"
    torch.save(add_prefix(saved, prefix), path)
    model = mystery_net(seed=53)
    expected = list(saved)
    state_calls = _instrument(model)
    with recorded_loads() as load_calls:
        returned, error = call(loader, path, model)
    last = state_calls[-1] if state_calls else None  # the keys load_state_dict got, named
    mistake = _prefix_mistake(last["keys"], expected, prefix, last["strict"]) if last else ""
    if error is not None:
        return Feedback(exercise, FAILED, mistake if mistake and isinstance(error, RuntimeError)
                        else explain(error))
    if loaded_unsafely(load_calls):
        return Feedback(exercise, FAILED, UNSAFE)
    wrong = [key for key, value in model.state_dict().items()
             if not torch.equal(value.detach().cpu(), saved[key])]
    if wrong:
        return Feedback(exercise, FAILED, mistake or f"after loading, {wrong} still differ from "
                        "the saved weights: load the stripped state dict into `model` itself "
                        "with model.load_state_dict().")
    if returned is not model:
        if returned is None:
            got = ("returned None: the weights are in `model`, but the function should hand "
                   "it back. End with `return model`")
        elif isinstance(returned, tuple) and hasattr(returned, "missing_keys"):
            got = ("returned what load_state_dict returns (the missing and unexpected keys), "
                   "not the model: load_state_dict works in place. Call it, then `return model`")
        else:
            got = (f"returned {type(returned).__name__}, not the model you were given. "
                   "`return model`")
        return Feedback(exercise, FAILED, f"the weights arrived, but your function {got}.")
    return Feedback(exercise, PASSED, f"every weight arrived. {wrapper} put {prefix!r} in front "
                                      "of each key; stripping only that leading prefix keeps "
                                      "inner names intact.")


@graded
def check_ddp_checkpoint(load_ddp_checkpoint: Callable,
                         folder: str | os.PathLike = "checkpoints") -> Feedback:
    """Exercise 05.2: ``load_ddp_checkpoint(path, model)`` loads ``module.``-prefixed weights.

    Catches: the prefix not stripped; ``key.replace('module.', '')`` (which turns
    ``submodule.weight`` into ``subweight``); ``strict=False`` hiding missing keys;
    weights_only=False. Introduced in lab 05_save_load_scenarios.
    """
    return _check_prefixed("Exercise 2", load_ddp_checkpoint, "module.",
                           "DataParallel / DistributedDataParallel", folder)


@graded
def check_compiled_checkpoint(load_compiled_checkpoint: Callable,
                              folder: str | os.PathLike = "checkpoints") -> Feedback:
    """Exercise 05.3: ``load_compiled_checkpoint(path, model)`` loads ``_orig_mod.`` keys.

    Catches: the prefix not stripped (or ``module.`` stripped instead); ``strict=False``
    hiding missing keys; weights_only=False. Introduced in lab 05_save_load_scenarios.
    """
    return _check_prefixed("Exercise 3", load_compiled_checkpoint, "_orig_mod.",
                           "torch.compile", folder)


# --- Exercise 4: a whole pickled model ---------------------------------------------------


def _forget(classes: list) -> bool:
    """Remove ``classes`` from the process-wide safe globals; return whether any was there."""
    allowed = list(torch.serialization.get_safe_globals())
    kept = [entry for entry in allowed if entry not in classes]
    if len(kept) == len(allowed):
        return False
    torch.serialization.clear_safe_globals()
    torch.serialization.add_safe_globals(kept)
    return True


@graded
def check_whole_model(load_whole_model_safely: Callable,
                      folder: str | os.PathLike = "checkpoints") -> Feedback:
    """Exercise 05.4: ``load_whole_model_safely(path, trusted)`` loads a pickled MysteryNet
    and refuses a file that asks for anything outside ``trusted``.

    ``trusted`` is ``[MysteryNet, nn.Linear]``. The second file also asks for a function
    that only appends to :data:`MARKERS`. Catches: weights_only=False (the marker
    appears); a plain torch.load (the safe loader refuses the classes);
    ``add_safe_globals`` (the allowlist grows for the whole process); returning
    something other than the model. Introduced in lab 05_save_load_scenarios.
    """
    exercise = "Exercise 4"
    stop_on(not_a_function(exercise, load_whole_model_safely))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    original = mystery_net(seed=54)
    saved = _saved(original)
    # Neutral, fresh names: a loader cannot tell the two files apart by name.
    names = [f"lab05_check_{secrets.token_hex(4)}.pt" for _ in range(2)]
    good_path, hostile_path = folder / names[0], folder / names[1]
    torch.save(original, good_path)
    torch.save({"model": mystery_net(seed=55), "bonus": LeavesAMarker()}, hostile_path)
    trusted = [MysteryNet, nn.Linear]
    _forget(trusted)  # an earlier add_safe_globals attempt must not make this one pass
    markers_before = len(MARKERS)
    try:
        with recorded_loads() as calls:
            model, error = call(load_whole_model_safely, good_path, trusted)
            if error is None:
                refused, hostile_error = call(load_whole_model_safely, hostile_path, trusted)
    finally:
        grew = _forget(trusted)  # undo a process-wide allowlisting of the trusted classes
        ran_code = len(MARKERS) > markers_before
        del MARKERS[markers_before:]
        for path in (good_path, hostile_path):  # fresh names each run: leave none behind
            path.unlink(missing_ok=True)
    if ran_code:
        return Feedback(exercise, FAILED, "your loader ran code hidden in the second file: "
                        "weights_only=False unpickles anything a file names (here a harmless "
                        "marker; in a hostile file, os.system). Keep weights_only=True and "
                        "allow only the trusted classes with torch.serialization.safe_globals.")
    if loaded_unsafely(calls):
        return Feedback(exercise, FAILED, "no code from the second file ran this time, but your "
                        "loader calls torch.load with weights_only=False, and that unpickler "
                        "runs anything a file names: a file you did not list first, or a "
                        "trusted class whose unpickling does more than set weights, runs "
                        "unchecked. Keep weights_only=True and allow the trusted classes for "
                        "this one load: `with torch.serialization.safe_globals(trusted):`.")
    if error is not None:
        if "Weights only load failed" in str(error) or "safe_globals" in str(error):
            return Feedback(exercise, FAILED, "the safe loader refused MysteryNet and Linear, "
                            "as it should: a whole pickled model names its classes. Check what "
                            "the file asks for (get_unsafe_globals_in_checkpoint), then allow "
                            "the trusted classes for this one load: `with torch.serialization."
                            "safe_globals(trusted): torch.load(...)`.")
        return Feedback(exercise, FAILED, f"loading the trusted file: {explain(error)}")
    if grew:
        return Feedback(exercise, FAILED, "add_safe_globals allowlists the classes for every "
                        "later torch.load in this process, for files you never looked at. Use "
                        "the context manager `with torch.serialization.safe_globals(trusted):`, "
                        "which allows them for one load only.")
    if not isinstance(model, MysteryNet):
        return Feedback(exercise, FAILED, f"return the loaded model; got {type(model).__name__}.")
    if any(not torch.equal(v.detach().cpu(), saved[k]) for k, v in model.state_dict().items()):
        return Feedback(exercise, FAILED, "the returned model's weights are not the saved ones: "
                                          "return the model torch.load gave you.")
    if hostile_error is None:
        return Feedback(exercise, FAILED, "the second file asks for a function outside the "
                        f"trusted classes, and your loader returned {type(refused).__name__} "
                        "instead of refusing it. Raise an error when the file asks for more.")
    return Feedback(exercise, PASSED, "the trusted model loads, and the file that asks for more "
                                      "is refused before any of its code runs.")
