"""Print how long utils.audit takes on nn.Transformer() (about 44M parameters).

    python -m tools.bench.benchmark_audit [runs]

Builds the model on the CPU (real weights, about 170 MB), audits it against
'cpu' (no findings) and against 'meta' (every tensor is a finding), and prints
the median and the fastest of ``runs`` runs each. The tests hold no timing of their
own that load could fail: tests/unit/test_placement.py counts the work audit does (lines
executed, linear in the tensors) and keeps only a generous 1 s bound on the median.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings

import torch
from torch import nn

import utils


def main(runs: int = 21) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested-tensor hint of nn.Transformer
        model = nn.Transformer()
    count = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, nn.Transformer(): {count:,} parameters, "
          f"{len(utils.where(model))} tensors")
    for target in ("cpu", "meta"):
        timings = []
        for _ in range(runs):
            start = time.perf_counter()
            findings = utils.audit(model, target)
            timings.append(time.perf_counter() - start)
        print(f"audit(model, {target!r}): {len(findings)} findings, median "
              f"{statistics.median(timings) * 1000:.1f} ms, fastest {min(timings) * 1000:.1f} ms "
              f"over {runs} runs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 21)
