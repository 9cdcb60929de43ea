"""Benchmark the targets of notebook 07's helpers. Not a test: timings vary.

    python -m tools.bench.bench_07

Prints:
1. the traffic ledger's overhead on a small training step (with and without it, same run);
2. the footprint of a 6.7-billion-parameter transformer on meta (forward, backward, Adam
   step): its time, and the peak memory of the process above a bare ``import torch``, in a
   fresh process;
3. the footprint prediction against the measured peak of a real step on the CPU.
Notebook and lab run times: ``python -m tools.measure_notebooks notebooks/07_*.ipynb ...``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BIG_MODEL = textwrap.dedent("""
    import time
    def peak():
        with open("/proc/self/status") as status:
            return int(status.read().split("VmHWM:")[1].split()[0]) / 1024
    import torch
    bare = peak()
    from torch import nn
    from utils.footprint import footprint
    with_utils = peak()
    import torch._dynamo  # any torch.optim optimizer imports it (torch 2.13), footprint too
    with_imports = peak()
    with torch.device("meta"):
        layers = [nn.TransformerEncoderLayer(4096, 32, 16384, batch_first=True,
                                             norm_first=True) for _ in range(32)]
        model = nn.Sequential(nn.Embedding(32000, 4096), *layers, nn.Linear(4096, 32000))
    start = time.perf_counter()
    result = footprint(model, torch.zeros(1, 512, dtype=torch.long))
    seconds = time.perf_counter() - start
    count = sum(p.numel() for p in model.parameters())
    print(f"{count / 1e9:.2f}e9 parameters: footprint {result.total / 1e9:.1f} GB computed in "
          f"{seconds:.2f} s; peak memory {peak():.0f} MiB, bare import torch {bare:.0f} MiB, "
          f"difference {peak() - bare:.0f} MiB (import utils {with_utils - bare:.0f}, "
          f"torch._dynamo {with_imports - with_utils:.0f}, the model and its step "
          f"{peak() - with_imports:.0f})")
""")


def ledger_overhead(repeats: int = 200) -> None:
    import torch
    from torch import nn
    from torch.utils import benchmark

    from utils.traffic import Ledger

    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, targets = torch.randn(256, 64), torch.randint(0, 10, (256,))

    def step():
        loss = nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    def step_in_ledger():
        with Ledger():
            return step()

    step(), step_in_ledger()  # warm-up
    times = {}
    for _ in range(3):  # interleaved, so load changes hit both alike
        for name, function in (("plain", step), ("ledger", step_in_ledger)):
            timer = benchmark.Timer("f()", globals={"f": function})
            times.setdefault(name, []).append(timer.timeit(repeats).median)
    plain, ledger = min(times["plain"]), min(times["ledger"])
    print(f"small training step: {plain * 1e6:.0f} us plain, {ledger * 1e6:.0f} us in the "
          f"ledger: {ledger / plain:.2f}x")


def prediction_vs_measured() -> None:
    import torch

    from utils.footprint import footprint
    from utils.step_memory import measure_training_step, mlp, train_step

    train_step(mlp(16, 2), torch.randn(4, 16))  # first optimizer: imports, once
    width, depth, batch = 1024, 8, 64
    with torch.device("meta"):
        model = mlp(width, depth)
    predicted = footprint(model, torch.randn(batch, width),
                          optimizer=lambda p: torch.optim.Adam(p, foreach=False)).total
    measured = measure_training_step(width, depth, batch)
    print(f"mlp({width}, {depth}), batch {batch}, Adam(foreach=False): predicted "
          f"{predicted / 2**20:.1f} MiB, measured peak {measured / 2**20:.1f} MiB on the CPU "
          f"({measured / predicted - 1:+.1%})")


def main() -> int:
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    ledger_overhead()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", BIG_MODEL], check=True, env=env)
    prediction_vs_measured()
    return 0


if __name__ == "__main__":
    sys.exit(main())
