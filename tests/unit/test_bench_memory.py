"""bench/memory.py: a run's memory is its whole process tree (the JVM and the Python workers
are children of the bench's process), counted once (PSS), not the bench process alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.memory import tree_pss_bytes

MB = 1024 * 1024

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")


def own_pss(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return next(int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:"))


def test_a_childs_memory_counts_in_its_parents_tree() -> None:
    before = tree_pss_bytes(os.getpid())
    assert before >= own_pss(os.getpid()) > 0
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; x = b'x' * (96 << 20); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"  # allocated and touched
        grown = tree_pss_bytes(os.getpid()) - before
        assert grown >= 90 * MB, f"the child's 96 MB is in the tree ({grown / MB:.0f} MB more)"
        assert tree_pss_bytes(child.pid) == pytest.approx(own_pss(child.pid), rel=0.05)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    while tree_pss_bytes(os.getpid()) - before >= 90 * MB and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tree_pss_bytes(os.getpid()) - before < 90 * MB, "a finished child no longer counts"


def test_a_process_that_is_gone_counts_nothing() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert tree_pss_bytes(child.pid) == 0
