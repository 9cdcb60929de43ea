"""What each of the 2 processes runs for lab 09's exercise 3: the worker script that
:func:`labchecks.processes.run_workers` writes (the learner's functions, then ``main([...])``)
calls :func:`main`, never a learner. Its arguments: folder, slow seconds per function
(comma-separated), barrier grace, "shard" or "no", collective seconds. Introduced in lab
09_many_processes.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from collections.abc import Callable, MutableMapping

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.nn.parallel import DistributedDataParallel as DDP

from labchecks.feedback import first_line
from labchecks.processes import fresh_model
from utils.distributed import process_group

#: As torchrun sets them for the only process of a machine, the second of 2 machines for rank 1.
ONE_PROCESS_PER_MACHINE = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


class WatchedEnviron(MutableMapping):
    """``os.environ``, noting each variable read (``os.getenv`` reads through it too)."""

    def __init__(self, real, read: list[str]):
        self.real, self.read = real, read

    def __getitem__(self, key):
        self.read.append(key)
        return self.real[key]

    def __setitem__(self, key, value):
        self.real[key] = value

    def __delitem__(self, key):
        del self.real[key]

    def __iter__(self):
        return iter(self.real)

    def __len__(self):
        return len(self.real)

    def copy(self):
        return dict(self.real)


def main(functions: list[Callable]) -> None:
    """For each function, on both ranks: a DDP model, then ``function(ddp, path)`` with the
    check's stand-ins in place (a barrier through the store that gives up, a slow
    ``torch.save`` on rank 0, sleeps and file polls counted, ``os.environ`` reads recorded), as
    on two machines of one process each (``LOCAL_RANK`` 0 on both); then one ``RESULT {json}``
    line per function."""
    folder = sys.argv[1]
    slows = [float(s) for s in sys.argv[2].split(",") if s]
    grace_s = float(sys.argv[3])
    collective_s = float(sys.argv[5]) if len(sys.argv) > 5 else 12.0
    real = {"barrier": dist.barrier, "monitored_barrier": dist.monitored_barrier,
            "sleep": time.sleep, "exists": os.path.exists, "isfile": os.path.isfile,
            "path_exists": pathlib.Path.exists, "save": torch.save, "dcp_save": dcp.save,
            "environ": os.environ}
    with process_group(timeout_s=grace_s + max(slows, default=0) + collective_s) as me:
        store = dist.distributed_c10d._get_default_store()
        for index, function in enumerate(functions):
            seen = _judge_one(index, function, me, store, folder, slows[index], grace_s, real)
            print("RESULT " + json.dumps(seen), flush=True)
        if sys.argv[4] == "shard":
            _write_sharded(me, folder)


def _judge_one(index, function, me, store, folder, slow_s, grace_s, real) -> dict:
    here = os.path.join(folder, f"candidate_{index}")
    path = os.path.join(here, "trained.pt")
    seen = {"candidate": index, "rank": me.rank, "barriers": 0, "gave_up": False, "slept": 0.0,
            "polls": 0, "saves": [], "dcp": False, "error": None, "unwaited": 0, "read": []}

    def arrive(key):
        store.add(key, 1)

    def wait_for(key, limit_s):  # the rest of a barrier through the store, that gives up
        deadline = time.monotonic() + limit_s
        while store.add(key, 0) < me.world_size:
            if time.monotonic() > deadline:
                return False
            real["sleep"](0.01)
        return True

    class Work:  # what dist.barrier(async_op=True) returns: wait() waits for the others
        def __init__(self, key, limit_s):
            self.key, self.limit_s, self.waited = key, limit_s, False
            seen["unwaited"] += 1

        def wait(self, *args, **kwargs):
            if not self.waited:
                self.waited = True
                seen["unwaited"] -= 1
                if not wait_for(self.key, self.limit_s):
                    seen["gave_up"] = True
                    raise RuntimeError("the barrier timed out: the other rank never reached it")
            return True

        def is_completed(self):
            return store.add(self.key, 0) >= me.world_size

    def barrier(*args, **kwargs):
        number = seen["barriers"]
        seen["barriers"] += 1
        # rank 0 is the slow one (its save); the other rank may wait for that save too
        limit_s = grace_s if me.rank == 0 else slow_s + grace_s
        key = f"c{index}/barrier{number}"
        arrive(key)
        if kwargs.get("async_op"):
            return Work(key, limit_s)
        Work(key, limit_s).wait()
        return None

    def save(obj, f, *args, **kwargs):
        name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
        seen["saves"].append({"file": os.path.basename(str(name)) if name else None,
                              "module": isinstance(obj, torch.nn.Module),
                              "type": type(obj).__name__})
        if me.rank == 0:
            real["sleep"](slow_s)  # a slow disk: a reader that does not wait sees no file
        return real["save"](obj, f, *args, **kwargs)

    def dcp_save(*args, **kwargs):
        seen["dcp"] = True
        return real["dcp_save"](*args, **kwargs)

    def sleep(seconds):
        seen["slept"] += float(seconds)
        real["sleep"](seconds)

    def polled(real_function):
        def look(target, *args, **kwargs):
            seen["polls"] += 1
            return real_function(target, *args, **kwargs)
        return look

    model = fresh_model().to(me.device)
    ddp = DDP(model, device_ids=[me.local_rank] if me.device.type == "cuda" else None)
    environ = WatchedEnviron({**real["environ"], **ONE_PROCESS_PER_MACHINE}, seen["read"])
    dist.barrier = dist.monitored_barrier = barrier
    torch.save, dcp.save, time.sleep, os.environ = save, dcp_save, sleep, environ
    os.path.exists, os.path.isfile = polled(real["exists"]), polled(real["isfile"])
    pathlib.Path.exists = polled(real["path_exists"])
    try:
        function(ddp, path)
    except Exception as error:
        seen["error"] = first_line(error)
    finally:
        dist.barrier, dist.monitored_barrier = real["barrier"], real["monitored_barrier"]
        torch.save, dcp.save, time.sleep = real["save"], real["dcp_save"], real["sleep"]
        os.environ = real["environ"]  # noqa: B003 - the real one back, nothing cleared
        os.path.exists, os.path.isfile = real["exists"], real["isfile"]
        pathlib.Path.exists = real["path_exists"]
    seen["found"] = os.path.isfile(path)  # the moment the function returned
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True) if seen["found"] else {}
        keys = list(loaded)
        own = model.state_dict()
        seen["same_values"] = (set(keys) == set(own) and all(
            isinstance(loaded[k], torch.Tensor) and torch.equal(loaded[k], own[k].cpu())
            for k in keys))
    except Exception as error:
        keys = [f"unreadable: {type(error).__name__}"]
    seen["keys"] = [str(k) for k in keys][:20]
    seen["read"] = sorted(set(seen["read"]))
    done = f"c{index}/end"  # both done, then report
    arrive(done)
    wait_for(done, 2 * slow_s + 2 * grace_s + 10)
    seen["files"] = sorted(os.listdir(here))
    return seen


def _write_sharded(me, folder: str) -> None:
    """The checkpoint lab 10 loads: the lab's model, sharded with FSDP2, saved with DCP."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(me.device.type, (me.world_size,))
    sharded = fresh_model().to(me.device)
    for module in (sharded[0], sharded[2], sharded):
        fully_shard(module, mesh=mesh)
    dcp.save({"model": get_model_state_dict(sharded)},
             checkpoint_id=os.path.join(folder, "sharded"))
