"""How much faster is utils.inspect_checkpoint than loading the checkpoint?

Writes a checkpoint of about 1 GB (--gigabytes) to a temporary folder, then times
``torch.load(path, map_location='cpu')`` against ``utils.inspect_checkpoint(path)``
(best of --repeats each, file in the page cache for both), prints the ratio and deletes
the file. The goal: at least 50x, because inspecting maps the tensor bytes
instead of reading them. Not part of `make test` (it needs 2 GB of memory and disk).

    python -m tools.bench.bench_inspect [--gigabytes 1.0] [--repeats 3] [--folder DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

import utils

GOAL = 50.0


def best_time(action, repeats: int) -> float:
    """The fastest of ``repeats`` runs of ``action()``, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
        del result
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)

    layers = 16
    per_layer = int(args.gigabytes * 1e9 / 4 / layers)
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "big.pt"
        state = {f"layers.{i}.weight": torch.ones(per_layer) for i in range(layers)}
        torch.save(state, path)
        del state
        size = path.stat().st_size
        load_s = best_time(lambda: torch.load(path, map_location="cpu"), args.repeats)
        inspect_s = best_time(lambda: utils.inspect_checkpoint(path), max(args.repeats, 5))
        info = utils.inspect_checkpoint(path)
        path.unlink()
    ratio = load_s / inspect_s
    print(f"checkpoint: {size / 1e9:.2f} GB, {len(info.entries)} tensors, "
          f"torch {torch.__version__}")
    print(f"torch.load(map_location='cpu'): {load_s * 1000:.1f} ms (best of {args.repeats})")
    print(f"utils.inspect_checkpoint:       {inspect_s * 1000:.2f} ms")
    verdict = "OK" if ratio >= GOAL else "BELOW"
    print(f"ratio: {ratio:.0f}x (goal: at least {GOAL:.0f}x) -> {verdict}")
    return 0 if ratio >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
