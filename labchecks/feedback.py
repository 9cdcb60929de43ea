"""What every lab check shares: the Feedback it returns and how it runs the learner's code.

A check runs the learner's function on small real inputs and returns a :class:`Feedback`:
passed (the rule just applied), failed (what happened, the misconception, what to do) or not
attempted (still the stub). It runs the code with :func:`call` (the result or the error, to
diagnose), :func:`attempt` (a Feedback for anything that went wrong) or :func:`attempt_within`
(with a time limit); :func:`given` and :func:`stop_on` end the check with such a Feedback. A
misconception named by more than one lab has its message here (:func:`sets_own_device`,
:func:`unsafe_load`). Introduced in lab 02_copy_pitfall.
"""

from __future__ import annotations

import ast
import dis
import inspect
import os
import re
import textwrap
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from unittest import mock

import torch

from utils.devices import unusable_device
from utils.text import cleaned_error, strip_ansi

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
_SYMBOLS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳"}


@dataclass(frozen=True)
class Feedback:
    """The outcome of one check: ``status`` (passed, failed, not attempted) and ``message``.

    Displays as one line in a notebook; ``bool(feedback)`` is True only when passed.
    ``score``, for an exercise of several parts, is the fraction right (0 to 1) when it
    failed: nbgrader gives that part of the points (labchecks/grading.py).
    Introduced in lab 02_copy_pitfall.
    """

    exercise: str
    status: str
    message: str
    score: float | None = None

    def __str__(self) -> str:
        return f"{_SYMBOLS[self.status]} {self.exercise}: {self.message}"

    def __repr__(self) -> str:
        return str(self)

    def __bool__(self) -> bool:
        return self.status == PASSED

    def wrapped(self, width: int = 90) -> str:
        """The line wrapped at ``width`` columns, later lines indented under the message:
        how the feedback page and `nbgrader validate` show it (no sideways scrolling)."""
        return textwrap.fill(str(self), width=width, subsequent_indent="   ",
                             break_long_words=False, break_on_hyphens=False)


def not_attempted(exercise: str) -> Feedback:
    """The not-attempted Feedback for an exercise whose code is still the stub."""
    return Feedback(exercise, NOT_ATTEMPTED,
                    "not attempted yet. Replace `raise NotImplementedError()` with your code, "
                    "run that cell, then run this one again.")


def is_stub(error: BaseException) -> bool:
    """True for the stub's bare ``NotImplementedError()``.

    PyTorch raises NotImplementedError too, with a message (meta's "Cannot copy out
    of meta tensor"); that is a real error in the learner's code, not an exercise left
    undone.
    """
    return type(error) is NotImplementedError and not str(error)


def is_unattempted(function: Callable) -> bool:
    """True when ``function``'s body, read from its source without running it, is only the
    stub ``raise NotImplementedError()`` (a docstring aside); False when the source cannot
    be read.

    Lets a check that would start processes say "not attempted" without starting them.
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    body = tree.body[0].body if tree.body and hasattr(tree.body[0], "body") else []
    body = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))


def not_a_function(exercise: str, function: object) -> Feedback | None:
    """A failed Feedback when ``function`` is not the learner's function, else None."""
    if callable(function) and not isinstance(function, torch.nn.Module):
        return None
    return Feedback(exercise, FAILED,
                    f"expected the function you wrote, got {type(function).__name__}. "
                    "Pass the function itself, without calling it.")


def not_ready(exercise: str, function: object) -> Feedback | None:
    """:func:`not_a_function`'s Feedback, or "not attempted" when ``function``'s source is only
    the stub (:func:`is_unattempted`), else None: for a check that must not start its
    processes before it knows. Introduced in lab 09_many_processes."""
    problem = not_a_function(exercise, function)
    if problem is None and is_unattempted(function):
        return not_attempted(exercise)
    return problem


class NotAttempted(Exception):
    """Raised by :func:`call` when the learner's code still raises the stub's bare
    ``NotImplementedError()``: a check catches it and returns :func:`not_attempted`."""


class Verdict(BaseException):
    """A check's Feedback, raised by a helper that has found it (:func:`stop_on`,
    :func:`given`); :func:`labchecks.grading.graded` returns it as the check's verdict. A
    BaseException, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, feedback: Feedback):
        super().__init__(feedback.message)
        self.feedback = feedback


def stop_on(problem: Feedback | None) -> None:
    """End the check with ``problem`` (raise :class:`Verdict`) when there is one: a check's
    ``if problem is not None: return problem``. Introduced in lab 02_copy_pitfall."""
    if problem is not None:
        raise Verdict(problem)


def given(outcome: tuple) -> object:
    """The result of ``outcome``, :func:`attempt`'s ``(result, problem)`` (or a longer tuple
    with the problem second), ending the check with the problem when there is one
    (:func:`stop_on`). Introduced in lab 02_copy_pitfall."""
    stop_on(outcome[1])
    return outcome[0]


def call(function: Callable, *args) -> tuple[object, Exception | None]:
    """Call the learner's function on ``args``.

    Returns ``(result, None)``, or ``(None, error)`` with the exception it raised, for the
    check to diagnose. Raises :class:`NotAttempted` for the stub (:func:`is_stub`);
    PyTorch's own NotImplementedError, which has a message, is returned like any other
    error.
    """
    try:
        return function(*args), None
    except Exception as error:  # the learner's code raised: diagnose it, do not crash the lab
        if is_stub(error):
            raise NotAttempted() from None
        return None, error


def attempt(exercise: str, function: Callable, *args) -> tuple[object, Feedback | None]:
    """:func:`call` for a check that needs no diagnosis of its own.

    Returns ``(result, None)``, or ``(None, a Feedback)`` when ``function`` is not a
    function, is the untouched stub (not attempted) or raised (failed, :func:`explain`).
    """
    problem = not_a_function(exercise, function)
    if problem is not None:
        return None, problem
    try:
        result, error = call(function, *args)
    except NotAttempted:
        return None, not_attempted(exercise)
    if error is not None:
        return None, Feedback(exercise, FAILED, explain(error))
    return result, None


def device_name(device: torch.device) -> str:
    """How feedback names a device: meta is called out as the stand-in second device.

    Under nbgrader (which grades on the CPU, with meta as the second device, whatever the
    student ran on) it is named as the student's own second device, graded on meta.
    """
    if device.type != "meta":
        return str(device)
    if os.environ.get("NBGRADER_EXECUTION"):
        return ("your second device (your GPU or Mac if you ran on one; meta, a stand-in for "
                "it, on the grading machine)")
    return "meta (the stand-in second device)"


def seeded(build: Callable, seed: int):
    """Return ``build()``, run with PyTorch's generator seeded to ``seed``: the same weights
    every time, and the learner's own random numbers left where they were.
    Introduced in lab 04_debug_device_errors."""
    generator_state = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        return build()
    finally:
        torch.set_rng_state(generator_state)


# --- learner errors, explained in one line ------------------------------------------------

def first_line(error: BaseException) -> str:
    """``TypeName: first line of the message``, without terminal escape codes, at most ~200
    characters: what the learner would read at the top of PyTorch's message
    (:func:`utils.text.cleaned_error`, cut shorter)."""
    return cleaned_error(error, limit=200)


def names_no_cuda(error: BaseException | None) -> bool:
    """True when ``error`` says this machine has no usable CUDA (the code asked for it).

    One list of PyTorch's messages for every build: :func:`utils.devices.unusable_device`.
    """
    return error is not None and unusable_device(error) == "cuda"


def _unsupported_global(text: str) -> str | None:
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    return found.group(1) if found else None


def state_dict_keys(text: str, kind: str) -> list[str]:
    """The keys ``load_state_dict``'s message lists after ``kind`` ('Missing', 'Unexpected')."""
    found = re.search(kind + r' key\(s\) in state_dict: (.*?)\.\s*(?:\n|$|Unexpected|size)',
                      text, re.S)
    return re.findall(r'"([^"]+)"', found.group(1)) if found else []


def refused_weights(text: str) -> str:
    """"load_state_dict refused the weights: missing keys [...] and ...": what the message
    ``text`` of a failed ``load_state_dict`` names. Introduced in lab 05_save_load_scenarios."""
    missing, unexpected = state_dict_keys(text, "Missing"), state_dict_keys(text, "Unexpected")
    said = [f"missing keys {missing[:4]}"] if missing else []
    said += [f"unexpected keys {unexpected[:4]}"] if unexpected else []
    if "size mismatch" in text:
        said.append("tensors of another shape")
    return f"load_state_dict refused the weights: {' and '.join(said) or 'a mismatch'}."


def load_state_dict_refused(text: str) -> str:
    """One line for a failed ``load_state_dict``: the keys it names, and a wrapper's prefix."""
    line = refused_weights(text)
    unexpected = state_dict_keys(text, "Unexpected")
    prefix = next((p for p in ("module.", "_orig_mod.") if unexpected
                   and all(k.startswith(p) for k in unexpected)), None)
    if prefix:
        line += (f" The file's keys start with {prefix!r}, added by a wrapper (DDP or "
                 "DataParallel, or torch.compile): strip it before loading.")
    return line


def explain(error: BaseException) -> str:
    """One line for an error the learner's code raised: what happened and what to do.

    Known PyTorch messages get their meaning spelled out; anything else is quoted by
    its first line (never a traceback, never terminal escape codes).
    Introduced in lab 02_copy_pitfall.
    """
    text = strip_ansi(str(error))
    said = f"`{first_line(error)}`"
    if "Cannot copy out of meta tensor" in text:
        return (f"your code raised {said}. Meta (the stand-in second device) holds shapes but no "
                "data, so nothing can be copied off it (`.cpu()`, `.item()`, `.tolist()`, "
                "`.numpy()`); PyTorch's advice about `to_empty()` is for building big models and "
                "does not apply here. Leave the result on `device`: the check reads it there.")
    if "META device module is not loaded" in text:
        return (f"your code raised {said}: PyTorch cannot create storages on meta from inside "
                "torch.load. Pass map_location=device (a string or torch.device).")
    storage_cuda = "'<' not supported between instances of 'NoneType' and 'int'"  # .cuda()
    if names_no_cuda(error) or storage_cuda in text:
        return (f"your code raised {said}: it asks for CUDA (`.cuda()` or 'cuda'), and this "
                "machine has none. Use the `device` you were given: `.to(device)`, or "
                "map_location=device.")
    if "Error(s) in loading state_dict" in text:
        return load_state_dict_refused(text)
    if "Weights only load failed" in text:
        named = _unsupported_global(text)
        asks = f" the file asks for `{named}`," if named else ""
        return ("the safe loader (weights_only=True) refused the file:" + asks + " which is not "
                "a tensor or a plain container. PyTorch's message suggests weights_only=False; "
                "don't: that runs whatever code the file names. Allow only classes you trust, for "
                "one load: `with torch.serialization.safe_globals([...]):`.")
    if "Attempting to deserialize object on" in text:
        return (f"your code raised {said}. The file was saved on an accelerator this machine "
                "lacks, and torch.load puts each tensor back where its tag says unless you pass "
                "map_location=device.")
    if "expected string or bytes-like object, got 'torch.device'" in text:
        return (f"your code raised {said}: the values of a map_location dict must be strings, "
                "e.g. {'cuda:0': 'cpu'}, not torch.device objects. Simpler and complete: "
                "map_location=device sends every tag to one device.")
    if "got <class 'NoneType'>" in text or "'NoneType' object" in text:
        return (f"your code raised {said}: a value you kept was None. Functions that work in "
                "place return None (like list.sort, unlike sorted): "
                "consume_prefix_in_state_dict_if_present changes the dict you give it and "
                "returns None, so call it on its own line and keep using that dict.")
    if "_StorageBase.to() takes 1 positional argument" in text:
        return (f"your code raised {said}: inside a map_location function you get a storage, "
                "whose `.to` takes the device by keyword only: `storage.to(device=device)`. "
                "Simpler: map_location=device.")
    if "RNG state must be a torch.ByteTensor" in text:
        return (f"your code raised {said}: torch.set_rng_state wants the CPU ByteTensor that "
                "torch.get_rng_state gave you. Load the checkpoint with map_location='cpu' (or "
                "pass the state's `.cpu()`).")
    if "Invalid cross-device link" in text:
        return (f"your code raised {said}: the temporary file is on another file system than "
                "the checkpoint (the system's temp folder often is), and a rename cannot cross "
                "file systems. Make the temporary file in the checkpoint's own folder: "
                "`tempfile.NamedTemporaryFile(dir=os.path.dirname(path), delete=False)`.")
    if isinstance(error, NameError):
        return (f"your code raised {said}: a typo, or a name from a cell you have not run "
                "yet (run the cells above, then this one).")
    return f"your function raised {said}. Fix that line, run its cell, then run this check again."


# --- what the learner's code did ----------------------------------------------------------


def _code_objects(function: Callable) -> Iterator[types.CodeType]:
    """The code of ``function`` and of everything defined inside it (classes, methods)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return
    pending = [code]
    while pending:
        current = pending.pop()
        yield current
        pending += [c for c in current.co_consts if isinstance(c, types.CodeType)]


def rebinds(function: Callable, name: str) -> bool:
    """True when ``function`` assigns to its own argument ``name`` (``device = ...``)."""
    code = getattr(function, "__code__", None)
    if code is None or name not in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]:
        return False
    for ins in dis.get_instructions(code):
        if ins.opname in ("STORE_FAST", "STORE_DEREF") and ins.argval == name:
            return True
        # Python 3.13 fuses instructions: STORE_FAST_LOAD_FAST stores the first name,
        # STORE_FAST_STORE_FAST stores both.
        if ins.opname == "STORE_FAST_LOAD_FAST" and ins.argval[0] == name:
            return True
        if ins.opname == "STORE_FAST_STORE_FAST" and name in ins.argval:
            return True
    return False


def sets_own_device(example: str = "") -> str:
    """The diagnosis for a function that assigns to its own ``device`` argument (see
    :func:`rebinds`): "your function sets `device = ...` itself, which throws away the device
    the caller passed in", with ``example``, a parenthesis, inserted after "itself".
    Returns the clause, without a full stop: the check adds what to do."""
    return (f"your function sets `device = ...` itself{example}, which throws away the device "
            "the caller passed in")


def reads_outer_name(function: Callable, name: str) -> bool:
    """True when ``function``, or code defined inside it, reads ``name`` from outside it
    (a notebook variable): ``device=device`` inside a method that has no ``device``."""
    own = set(getattr(getattr(function, "__code__", None), "co_varnames", ()))
    for code in _code_objects(function):
        for ins in dis.get_instructions(code):
            if ins.argval != name:
                continue
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                return True
            if ins.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF") and name not in own:
                return True
    return False


@dataclass
class ToCall:
    """One ``Tensor.to`` call seen while the learner's code ran."""

    tensor: torch.Tensor
    device: torch.device | None
    dtype: torch.dtype | None
    result: torch.Tensor


@contextmanager
def recorded_to_calls() -> Iterator[list[ToCall]]:
    """Record every ``Tensor.to`` call made inside the block (the tensors stay alive).

    Yields the list it fills: one :class:`ToCall` per call whose arguments PyTorch parses.
    """
    calls: list[ToCall] = []
    real_to = torch.Tensor.to

    def recording_to(self, *args, **kwargs):
        result = real_to(self, *args, **kwargs)
        try:
            device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        except Exception:  # an argument form _parse_to does not know: record nothing
            return result
        calls.append(ToCall(self, device, dtype, result))
        return result

    with mock.patch.object(torch.Tensor, "to", recording_to):
        yield calls


@contextmanager
def recorded_loads() -> Iterator[list[dict]]:
    """Record every ``torch.load`` call made inside the block (the loads still happen).

    Yields the list it fills: one dict per call, its keyword arguments, with a positional
    ``map_location`` (the second argument) under that name.
    """
    calls: list[dict] = []
    real_load = torch.load

    def recording_load(f, *args, **kwargs):
        named = dict(kwargs)
        if args:
            named.setdefault("map_location", args[0])
        calls.append(named)
        return real_load(f, *args, **kwargs)

    with mock.patch("torch.load", recording_load):
        yield calls


def loaded_unsafely(calls: list[dict]) -> bool:
    """True when one of the ``torch.load`` calls :func:`recorded_loads` saw passed
    ``weights_only=False``."""
    return any(call.get("weights_only") is False for call in calls)


def unsafe_load(holding: str, then: str = "") -> str:
    """The message for a loader that passes ``weights_only=False``: the full unpickler runs
    code, and ``holding`` (what the file holds) never needs it; ``then`` is more advice,
    said after "keep weights_only=True (the default)". Returns the sentence."""
    return ("your loader calls torch.load with weights_only=False. That unpickler runs whatever "
            f"code the file names, and {holding} never needs it: keep weights_only=True (the "
            f"default){then}.")


def moved_and_dropped(calls: list[ToCall], tensor: torch.Tensor, device: torch.device) -> bool:
    """True when ``tensor.to(device)`` was called on ``tensor`` itself and a new tensor came
    back: the learner moved it, then kept using the original (the result was not kept)."""
    return any(c.tensor is tensor and c.result is not tensor and c.device is not None
               and c.device.type == device.type for c in calls)


# --- a time limit for code that runs in this process -------------------------------------


def attempt_within(exercise: str, function: Callable, *args, limit_s: float,
                   stop: tuple[type[BaseException], ...] = (),
                   hang: str = "") -> tuple[object, Feedback | None, bool]:
    """:func:`attempt` with a time limit: return ``(result, problem, stopped)``.

    The function runs in a thread of its own (a daemon: one that never returns cannot keep
    the kernel alive), so code that waits for ever gets a failed Feedback after ``limit_s``
    seconds instead of hanging the notebook; ``hang`` is said after "had not returned".
    ``stopped`` is True when the function raised one of ``stop``: exceptions a check raises
    into the learner's code once it has seen what it needs. Thread-local state (PyTorch's
    dispatch and function modes, grad mode) does not cross into the thread: enter such
    contexts inside ``function``. Introduced in lab 09_many_processes.
    """
    import threading

    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["outcome"] = attempt(exercise, function, *args)
        except stop:
            box["stopped"] = True
        except BaseException as error:  # SystemExit, KeyboardInterrupt in the learner's code
            box["outcome"] = (None, Feedback(exercise, FAILED, explain(error)))

    thread = threading.Thread(target=run, daemon=True, name=f"check {exercise}")
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        return None, Feedback(exercise, FAILED,
                              f"your function had not returned after {limit_s:g} s, so the "
                              f"check stopped waiting{hang}. It may still be running in the "
                              "background: restart the kernel to stop it."), False
    if box.get("stopped"):
        return None, None, True
    result, problem = box["outcome"]
    return result, problem, False

