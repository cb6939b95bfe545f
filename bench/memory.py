"""Peak memory of one run inside a shared local Spark session (Linux ``/proc``).

All of a bench's runs share one JVM, whose resident size only grows: its RSS alone cannot say
what one run needed. So two figures are taken while a run lasts, after a full GC at its
start: the JVM heap still in use after each collection (the live set: the run's state and
batches, not garbage the collector has not reached yet), and the resident size of the whole
process tree (JVM, Python workers and the driver), the figure closest to what a pod's memory
limit is checked against (a high-water mark: it includes what earlier runs left resident).

Measuring must not cost the run it measures. The JVM's peak is the kernel's own high-water
mark (``VmHWM``, reset at the run's start through ``clear_refs``), read once at the end; only
the small Python processes are sampled, by their proportional size (forked workers share
pages, which plain RSS would count once per worker), once a second. Sampling the JVM's
``smaps_rollup`` five times a second, as this did before, walked gigabytes of page tables under
the JVM's memory lock and slowed a 20 s run at the dense profile by 6-8 s.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

MB = 1024 * 1024


def tree_pss_bytes(root: int, exclude: int | None = None) -> int:
    """Proportional set size of ``root`` and all its descendants (but ``exclude``, whose own
    descendants still count): Python workers fork from one daemon and share its pages, which
    plain RSS would count once per worker."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we looked
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        if pid == exclude:
            continue
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


def status_kb(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` size (``VmHWM``, ``VmRSS``) in kB; 0 once the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith(f"{field}:")), 0)


def reset_peak(pid: int) -> bool:
    """Set ``pid``'s ``VmHWM`` to its current RSS (Linux 4.0+, the process's owner or root)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakMemory:
    """``with PeakMemory(spark) as peak: ...`` then ``peak.result()``: MB (see the module's docstring)."""

    def __init__(self, spark: Any, interval_s: float = 1.0) -> None:
        self.jvm = spark.sparkContext._jvm
        self.jvm_pid = int(self.jvm.java.lang.ProcessHandle.current().pid())
        self.interval_s = interval_s
        self.rest = self.jvm_rss = self.heap = 0
        self._hwm = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _live_heap(self) -> int:
        """Heap in use right after the latest collection of each heap pool."""
        management = self.jvm.java.lang.management.ManagementFactory
        heap = self.jvm.java.lang.management.MemoryType.HEAP
        used = 0
        for pool in management.getMemoryPoolMXBeans():
            after = pool.getCollectionUsage() if pool.getType() == heap else None
            used += int(after.getUsed()) if after is not None else 0
        return used

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.rest = max(self.rest, tree_pss_bytes(os.getpid(), exclude=self.jvm_pid))
            if not self._hwm:  # no high-water mark to read at the end: sample the cheap RSS
                self.jvm_rss = max(self.jvm_rss, status_kb(self.jvm_pid, "VmRSS") * 1024)
            self.heap = max(self.heap, self._live_heap())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self.jvm.java.lang.System.gc()
        self._hwm = reset_peak(self.jvm_pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._hwm:
            self.jvm_rss = status_kb(self.jvm_pid, "VmHWM") * 1024
        self.heap = max(self.heap, self._live_heap())

    def result(self) -> dict[str, int]:
        """``peak_rss_mb``: the JVM's peak plus the other processes' (an upper bound: the two
        peaks need not be at one moment)."""
        return {"peak_rss_mb": round((self.jvm_rss + self.rest) / MB), "peak_live_heap_mb": round(self.heap / MB)}
