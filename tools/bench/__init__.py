"""Benchmarks: ``python -m tools.bench.NAME`` prints measurements; no test runs them."""
