"""Issue 62: the operator gives its C heap's free pages back (``service.heap``): a burst's freed
memory otherwise stays in its resident set for as long as it runs."""

from __future__ import annotations

import threading
import time

from kappa_operator.service.heap import HeapTrimmer, malloc_trim


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_freed_chunks_below_the_top_of_the_heap_are_given_back_by_a_trim() -> None:
    trim = malloc_trim()
    assert trim is not None, "glibc (Debian, the operator's image) has malloc_trim"
    trim()
    chunks = [bytes(8192) for _ in range(8000)]  # 64 MB of heap chunks (under glibc's mmap threshold)
    pin = bytes(8192)  # allocated last: the heap's top cannot shrink below it
    grown = _rss_mb()
    del chunks
    freed = _rss_mb()
    trim()
    trimmed = _rss_mb()
    assert freed - trimmed > 40, f"RSS {grown:.0f} MB grown, {freed:.0f} MB freed, {trimmed:.0f} MB trimmed"
    assert pin


def test_the_trimmer_runs_until_stopped_and_a_failing_trim_is_not_the_operators_failure() -> None:
    calls: list[int] = []
    ran = threading.Event()

    def trim() -> int:
        calls.append(1)
        if len(calls) >= 3:
            ran.set()
        if len(calls) == 2:
            raise OSError("no")
        return 1

    trimmer = HeapTrimmer(trim, every=0.01).start()
    assert ran.wait(5)
    trimmer.stop()
    stopped_at = len(calls)
    time.sleep(0.05)
    assert len(calls) == stopped_at and trimmer.trims >= 3
