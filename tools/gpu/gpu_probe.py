"""Print, on a CUDA machine, the exact text of every GPU-only message the notebooks quote.

    python -m tools.gpu.gpu_probe            # needs a CUDA GPU; prints one block per probe

Each probe runs one line that a learner writes and prints what PyTorch answered (the
exception's type and message, or the result), so that the quotes in notebooks 02, 04, 05, 07,
09 and 10 can be compared with what a GPU really says (docs/gpu-verification.md). Nothing here
asserts: it records. Run by tools/gpu/gpu_verify.sh; on a machine without CUDA it says so and exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[2]


def probe(title: str, action) -> None:
    """Run ``action`` and print its result or its exception, under ``title``."""
    print(f"### {title}")
    try:
        result = action()
    except Exception as error:  # noqa: BLE001 - recording whatever PyTorch raises is the point
        print(f"{type(error).__module__}.{type(error).__qualname__}: {error}")
    else:
        print(f"no error; result: {result!r}")
    print()


def in_fresh_process(code: str, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh Python; return its stdout and stderr's last lines."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})
    tail = "\n".join(done.stderr.strip().splitlines()[-3:])
    return f"rc={done.returncode}\n{done.stdout.strip()}\n{tail}".strip()


def cross_device_messages(gpu: torch.device) -> None:
    linear = nn.Linear(4, 3).to(gpu)
    probe("Linear on cuda, input on cpu (04 form 1, 02)", lambda: linear(torch.randn(2, 4)))
    probe("elementwise cuda * cpu (04 form 2)",
          lambda: torch.ones(3, device=gpu) * torch.ones(3))
    probe("zero-dim cpu tensor with cuda tensor (04: allowed)",
          lambda: (torch.ones(3, device=gpu) * torch.tensor(2.0)).device)
    probe("cuda tensor indexed by cpu index tensor (04)",
          lambda: torch.arange(5.0, device=gpu)[torch.tensor([0, 2])].device)
    embedding = nn.Embedding(10, 4).to(gpu)
    probe("Embedding on cuda, ids on cpu (04)", lambda: embedding(torch.tensor([1, 2])))
    logits = torch.randn(4, 3, device=gpu)
    probe("cross_entropy, target on cpu (04)",
          lambda: F.cross_entropy(logits, torch.tensor([0, 1, 2, 0])))
    probe("cross_entropy, class weights on cpu (04)",
          lambda: F.cross_entropy(logits, torch.tensor([0, 1, 2, 0], device=gpu),
                                  weight=torch.ones(3)))
    probe("cpu @ cuda (04)", lambda: torch.randn(2, 4) @ torch.randn(4, 3, device=gpu))
    conv = nn.Conv2d(1, 2, 3).to(gpu)
    probe("Conv2d on cuda, input on cpu (04)", lambda: conv(torch.randn(1, 1, 5, 5)))
    probe("bmm cuda with cpu (04)",
          lambda: torch.bmm(torch.randn(2, 3, 4, device=gpu), torch.randn(2, 4, 5)))
    no_bias = nn.Linear(4, 3, bias=False).to(gpu)
    probe("Linear(bias=False) on cuda, input on cpu (04)", lambda: no_bias(torch.randn(2, 4)))
    probe("gather on cuda with a cpu index (04)",
          lambda: torch.gather(torch.randn(2, 3, device=gpu), 1, torch.tensor([[0], [1]])))
    probe(".numpy() of a cuda tensor (04)", lambda: torch.ones(2, device=gpu).numpy())
    probe("float64 on cuda (01: allowed on CUDA, not on MPS)",
          lambda: torch.ones(2, device=gpu, dtype=torch.float64).dtype)
    probe("addmm with a zero-dim cpu tensor as the added term (04: checked, unlike `*`)",
          lambda: torch.addmm(torch.tensor(1.0), torch.randn(2, 4, device=gpu),
                              torch.randn(4, 3, device=gpu)).device)
    cpu_conv = nn.Conv2d(1, 2, 3)
    probe("Conv2d on cpu, input on cuda (04: the 'Input type' form, the other way round)",
          lambda: cpu_conv(torch.randn(1, 1, 5, 5, device=gpu)))
    probe("torch.accelerator answers (00, utils.pick_device)",
          lambda: (torch.accelerator.current_accelerator(),
                   torch.accelerator.current_accelerator(check_available=True),
                   torch.accelerator.is_available(), torch.accelerator.device_count()))


def module_to_facts(gpu: torch.device) -> None:
    model = nn.Linear(3, 2)
    weight = model.weight
    returned = model.to(gpu)
    probe("Module.to returns self; Parameter kept (01, 03)",
          lambda: (returned is model, model.weight is weight, weight.device.type))
    tensor = torch.ones(2)
    probe("Tensor.to without reassignment leaves the tensor on the cpu (02)",
          lambda: (tensor.to(gpu).device.type, tensor.device.type))
    same = torch.ones(2, device=gpu)
    probe("Tensor.to(same device) returns the same tensor (01)",
          lambda: same.to(gpu) is same)
    probe("bare 'cuda' vs torch.device('cuda', 0) (00)",
          lambda: (torch.device("cuda") == torch.device("cuda:0"),
                   torch.ones(1, device="cuda").device))
    optimizer_model = nn.Linear(3, 2)
    optimizer = torch.optim.Adagrad(optimizer_model.parameters())
    optimizer_model.to(gpu)

    def step():
        optimizer_model(torch.randn(4, 3, device=gpu)).sum().backward()
        optimizer.step()
        return {name: value.device for name, value in
                optimizer.state[optimizer_model.weight].items()}
    probe("Adagrad built before model.to(cuda), then step (02)", step)


def optimizer_state_on_load(gpu: torch.device) -> None:
    model = nn.Linear(3, 2).to(gpu)
    adam = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3, device=gpu)).sum().backward()
    adam.step()
    saved = adam.state_dict()
    probe("Adam's step counter after a step on cuda (06)",
          lambda: adam.state[model.weight]["step"].device)
    for where in ("cpu", gpu):
        fresh = torch.optim.Adam(model.parameters())
        moved = {**saved, "state": {k: {n: t.to(where) for n, t in v.items()}
                                    for k, v in saved["state"].items()}}
        fresh.load_state_dict(moved)
        probe(f"Adam loaded from a state on {where}: where step and exp_avg end up (06)",
              lambda fresh=fresh: {n: t.device for n, t in fresh.state[model.weight].items()})


def load_messages(gpu: torch.device, scratch: Path) -> None:
    tensor = torch.ones(2, device=gpu)
    on_gpu = scratch / "on_cuda0.pt"
    torch.save({"w": tensor}, on_gpu)
    code = f"import torch; print(torch.load({str(on_gpu)!r})['w'].device)"
    probe("load a cuda:0 file with CUDA hidden (05 scenario GPU->CPU)",
          lambda: in_fresh_process(code, {"CUDA_VISIBLE_DEVICES": ""}))
    import utils

    on_one = scratch / "on_cuda1.pt"
    utils.save_as_if_on({"w": torch.ones(2)}, on_one, "cuda:1")
    probe("load a cuda:1 file on a 1-GPU machine (05)",
          lambda: torch.load(on_one)["w"].device)
    probe("load a cuda:1 file with map_location='cpu' (05)",
          lambda: torch.load(on_one, map_location="cpu")["w"].device)
    probe("load a cuda:0 file with no map_location (05, 09: onto cuda:0)",
          lambda: torch.load(on_gpu)["w"].device)
    probe("load_state_dict copies onto the model's device (05, 06)",
          lambda: _load_into_gpu_model(on_gpu, gpu))


def _load_into_gpu_model(path: Path, gpu: torch.device) -> torch.device:
    model = nn.Module()
    model.w = nn.Parameter(torch.zeros(2, device=gpu))
    model.load_state_dict(torch.load(path, map_location="cpu"))
    return model.w.device


def memory_messages(gpu: torch.device) -> None:
    free, total = torch.cuda.mem_get_info(gpu)
    print(f"free {free / 2**30:.1f} GiB of {total / 2**30:.1f} GiB")
    probe("allocate more than the GPU has (07's quoted OutOfMemoryError)",
          lambda: torch.empty(int(total * 1.5) // 4, dtype=torch.float32, device=gpu))
    torch.cuda.empty_cache()


def copy_timings(gpu: torch.device) -> None:
    print("### host-to-device copies, 256 MiB, median of 9 (07)")
    for pinned in (False, True):
        host = torch.empty(64 * 2**20, dtype=torch.float32, pin_memory=pinned)
        seconds = []
        for _ in range(9):
            torch.cuda.synchronize()
            start = time.perf_counter()
            host.to(gpu, non_blocking=pinned)
            torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
        median = sorted(seconds)[4]
        print(f"pinned={pinned}: {median * 1e3:.2f} ms, {host.nbytes / median / 1e9:.1f} GB/s")
    for pinned in (True, False):
        host = torch.empty(64 * 2**20, dtype=torch.float32, pin_memory=pinned)
        returned, done = _non_blocking_copy(host, gpu)
        print(f"{'pinned' if pinned else 'pageable'} non_blocking copy returned after "
              f"{returned * 1e3:.3f} ms; done after {done * 1e3:.2f} ms")
    print()


def _non_blocking_copy(host: torch.Tensor, gpu: torch.device) -> tuple[float, float]:
    """Seconds until ``host.to(gpu, non_blocking=True)`` returns, and until the copy is done."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    host.to(gpu, non_blocking=True)
    returned = time.perf_counter() - start
    torch.cuda.synchronize()
    return returned, time.perf_counter() - start


ASYNC_SAVE_NCCL_ONLY = """
    import os, torch, torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl")
    try:
        future = dcp.async_save({"w": torch.ones(2, device="cuda")}, checkpoint_id=%r)
        future.result()
        print("no error")
    except Exception as error:
        print(f"{type(error).__qualname__}: {error}")
    finally:
        dist.destroy_process_group()
"""


FORKED_WORKER_TOUCHES_CUDA = """
import torch
from torch.utils.data import DataLoader, Dataset

class OnTheGpu(Dataset):
    def __len__(self):
        return 4
    def __getitem__(self, index):
        return torch.ones(2).to("cuda")

torch.ones(1, device="cuda")  # CUDA is initialised in the parent, as in a training script
try:
    next(iter(DataLoader(OnTheGpu(), num_workers=1, multiprocessing_context="fork")))
except Exception as error:
    print(type(error).__qualname__ + ": " + str(error).strip().splitlines()[-1])
"""


def main() -> int:
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuda available: {torch.cuda.is_available()}")
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing to probe.")
        return 0
    gpu = torch.device("cuda", 0)
    print(f"GPU: {torch.cuda.get_device_name(gpu)}, count {torch.cuda.device_count()}\n")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        cross_device_messages(gpu)
        module_to_facts(gpu)
        optimizer_state_on_load(gpu)
        load_messages(gpu, scratch)
        probe("a forked DataLoader worker that moves to cuda in __getitem__ (07 §6)",
              lambda: in_fresh_process(FORKED_WORKER_TOUCHES_CUDA))
        probe("dcp.async_save with nccl alone (10)",
              lambda: in_fresh_process(ASYNC_SAVE_NCCL_ONLY % str(scratch / "dcp")))
        copy_timings(gpu)
        memory_messages(gpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
