"""utils.dcp.save_and_switch: a process killed (SIGKILL) mid-save never costs the last good save.

A forked child saves generation 1, 2, 3, ... with save_and_switch, writing ``b<g>`` on a
pipe as it begins a save and ``e<g>`` when the save and the switch are done. The parent
waits for a ``b``, kills the child after a random delay shorter than one save, and checks
that ``latest`` names a folder that loads and holds one whole generation: the last one
finished, or the one being saved if the kill came between its switch and its ``e``.

It keeps killing until MID_SAVE_KILLS kills have landed during a save (the child had begun
a save and not finished it), within MAX_KILLS kills and MAX_SECONDS seconds. Because each
kill waits for a ``b`` and comes within one save's time, nearly every kill lands mid-save.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from utils import dcp as dcp_tools

MID_SAVE_KILLS = 10
MAX_KILLS = 600
MAX_SECONDS = 300.0  # bounds a working machine never reaches, even fully loaded
ELEMENTS = 256 * 1024  # 1 MiB of float32 per generation: a save takes a few milliseconds


def _state(generation: int) -> dict:
    return {"weights": torch.full((ELEMENTS,), float(generation)),
            "generation": torch.tensor(generation)}


def _child(root: str, states: list[dict], first: int, pipe: int) -> None:
    """Save the states in turn, reporting b<g> before and e<g> after each save."""
    try:
        warnings.simplefilter("ignore")
        for offset, state in enumerate(states):
            generation = first + offset
            os.write(pipe, f"b{generation}\n".encode())
            dcp_tools.save_and_switch(state, root, step=generation, no_dist=True)
            os.write(pipe, f"e{generation}\n".encode())
    finally:
        os._exit(0)


def _read_all(pipe: int, wait: float = 0.0) -> list[str]:
    data = b""
    while select.select([pipe], [], [], wait)[0]:
        chunk = os.read(pipe, 4096)
        if not chunk:
            break
        data += chunk
        wait = 0.0
    return data.decode().split()


def _load(folder) -> tuple[int, torch.Tensor]:
    loaded = {"weights": torch.empty(ELEMENTS), "generation": torch.tensor(-1)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(loaded, checkpoint_id=folder, no_dist=True)
    return int(loaded["generation"]), loaded["weights"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_sigkill_during_dcp_save_and_switch_always_leaves_a_complete_latest(tmp_path):
    """The kills run in a fresh Python process, not in pytest's worker, so that a forked
    child never inherits what earlier tests left in the worker (threads, loggers, process
    groups)."""
    command = [sys.executable, __file__, str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=MAX_SECONDS + 120,
                            cwd=Path(__file__).resolve().parents[2])
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _kill_loop(tmp_path: Path) -> None:
    root = tmp_path / "run"
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for generation in range(3):
            dcp_tools.save_and_switch(_state(generation), root, step=generation, no_dist=True)
    one_save = (time.monotonic() - started) / 3
    last_finished, next_generation = 2, 3
    delays = random.Random(0)
    kills = mid_save = 0
    while mid_save < MID_SAVE_KILLS and kills < MAX_KILLS \
            and time.monotonic() - started < MAX_SECONDS:
        upcoming = [_state(next_generation + step) for step in range(4)]
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _child(str(root), upcoming, next_generation, write_end)
        os.close(write_end)
        first = _read_all(read_end, wait=10.0)  # the first b<g>: a save has begun
        assert first and first[0].startswith("b"), f"the child never began a save: {first}"
        delay = delays.uniform(0, one_save)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        reports = first + _read_all(read_end)
        os.close(read_end)
        kills += 1
        mid_save += reports[-1].startswith("b")
        finished = [int(r[1:]) for r in reports if r.startswith("e")]
        old = finished[-1] if finished else last_finished
        # The save in progress at the kill, if any: its number is the last b<g> (numbers of
        # saves killed earlier are never reused, so it is not always old + 1). A kill after
        # its switch but before its e<g> leaves latest on it, and that is correct.
        in_progress = int(reports[-1][1:]) if reports[-1].startswith("b") else old
        folder = dcp_tools.latest(root)
        generation, weights = _load(folder)  # must always load
        assert generation in (old, in_progress), (
            f"latest holds {generation}, expected {old} or {in_progress}; the child reported "
            f"{reports}; kill {kills}, delay {delay * 1000:.1f} ms, "
            f"one save {one_save * 1000:.1f} ms")
        assert folder.name == f"step_{generation:06d}"
        assert torch.equal(weights, torch.full((ELEMENTS,), float(generation))), "a torn save"
        for leftover in root.iterdir():  # the unfinished folders: nothing points at them
            if leftover.is_dir() and leftover != folder:
                for item in leftover.iterdir():
                    item.unlink()
                leftover.rmdir()
        last_finished = generation
        next_generation = max(next_generation, *(int(r[1:]) for r in reports)) + 1
    seconds = time.monotonic() - started
    print(f"{kills} kills, {mid_save} during a save, last complete generation {last_finished}, "
          f"one save {one_save * 1000:.1f} ms, {seconds:.1f} s")
    assert mid_save >= MID_SAVE_KILLS, (
        f"only {mid_save} of {kills} kills landed during a save in {seconds:.0f} s; "
        f"the test needs {MID_SAVE_KILLS} to mean anything")


if __name__ == "__main__":  # the test above runs this in a fresh process
    _kill_loop(Path(sys.argv[1]))
