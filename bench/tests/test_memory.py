"""bench/memory.py: a run's memory is its whole process tree (the JVM and the Python workers
are children of the bench's process), counted once (PSS), not the bench process alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.memory import reset_peak, status_kb, tree_pss_bytes

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


def test_the_excluded_process_leaves_the_tree_its_children_stay() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; x = b'x' * (96 << 20); print(1, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"1"
        whole = tree_pss_bytes(os.getpid())
        without = tree_pss_bytes(os.getpid(), exclude=child.pid)
        assert whole - without >= 90 * MB, "the excluded child's 96 MB is not counted"
        assert tree_pss_bytes(os.getpid(), exclude=os.getpid()) >= 90 * MB, "the root's children still count"
    finally:
        child.kill()
        child.wait()


def test_a_runs_peak_is_the_kernels_high_water_mark_reset_at_its_start() -> None:
    """What ``PeakMemory`` reads for the JVM: a peak before the reset is forgotten, one after
    it is kept though the memory is freed by then."""
    code = (
        "import sys, time\n"
        "x = b'x' * (128 << 20); del x; print(1, flush=True)\n"
        "sys.stdin.readline(); y = b'y' * (64 << 20); del y; print(2, flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == b"1"
        assert status_kb(child.pid, "VmHWM") * 1024 >= 128 * MB
        if not reset_peak(child.pid):
            pytest.skip("clear_refs is not writable here")
        assert status_kb(child.pid, "VmHWM") * 1024 < 100 * MB, "the earlier 128 MB peak is forgotten"
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == b"2"
        peak = status_kb(child.pid, "VmHWM") * 1024
        assert 64 * MB <= peak < 128 * MB, f"the 64 MB peak after the reset is kept ({peak / MB:.0f} MB)"
    finally:
        child.kill()
        child.wait()
    assert status_kb(child.pid, "VmHWM") == 0, "a process that is gone has no size"
