"""Benchmarks (run as modules, e.g. ``python -m bench.source_throughput``); results in bench/RESULTS.md."""
