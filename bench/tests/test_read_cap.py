"""The read-cap bench's measures (bench/read_cap.py): the admitted rate, the worst minute and
the bytes opened, computed from a run's trace."""

from __future__ import annotations

import pytest

from bench.read_cap import opened, reads

LAYOUTS = {"wide": (1000, (4, 304, 704)), "plain": (500, (4,))}
"""Two files: ``wide`` with row groups starting at 4, 304 and 704 (1000 bytes), ``plain`` with one."""


def test_the_bench_measures_rate_and_the_worst_minute_from_the_trace() -> None:
    decisions = [
        {"t": 0.0, "bytes": 200, "files": 2, "rate_limited": False, "read_wait_s": 0.0},
        {"t": 1.0, "bytes": 0, "files": 0, "rate_limited": False, "read_wait_s": 0.0},
        {"t": 30.0, "bytes": 3000, "files": 3, "rate_limited": True, "read_wait_s": 1.5},
        {"t": 80.0, "bytes": 7000, "files": 5, "rate_limited": True, "read_wait_s": 2.5},
    ]
    got = reads(decisions)
    assert (got["bytes"], got["files"], got["span_s"], got["bytes_per_s"]) == (10_200, 10, 80.0, 127.5)
    assert got["max_60s_bytes_per_s"] == pytest.approx(10_000 / 60, abs=0.1)  # [20, 80] holds 3000 + 7000
    assert (got["rate_limited"], got["read_wait_s"], got["admissions"]) == (2, 4.0, 3)
    opens = [{"t": 0.0, "path": "wide", "row_groups": [1]}, {"t": 10.0, "path": "wide", "row_groups": None}]
    assert opened(opens, LAYOUTS)["bytes"] == 1400
