"""Peak memory of one run inside a shared local Spark session (Linux ``/proc``).

All of a bench's runs share one JVM, whose resident size only grows: its RSS alone cannot say
what one run needed. So two figures are sampled while a run lasts, after a full GC at its
start: the JVM heap still in use after each collection (the live set: the run's state and
batches, not garbage the collector has not reached yet), and the proportional resident size
of the whole process tree (JVM, Python workers and the driver), the figure closest to what a
pod's memory limit is checked against (it is a high-water mark: it includes what earlier runs
left resident).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

MB = 1024 * 1024


def tree_pss_bytes(root: int) -> int:
    """Proportional set size of ``root`` and all its descendants: Python workers fork from one
    daemon and share its pages, which plain RSS would count once per worker."""
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
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total


class PeakMemory:
    """``with PeakMemory(spark) as peak: ...`` then ``peak.result()``: MB, sampled every 0.2 s."""

    def __init__(self, spark: Any, interval_s: float = 0.2) -> None:
        self.jvm = spark.sparkContext._jvm
        self.interval_s = interval_s
        self.rss = self.heap = 0
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
            self.rss = max(self.rss, tree_pss_bytes(os.getpid()))
            self.heap = max(self.heap, self._live_heap())
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self.jvm.java.lang.System.gc()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def result(self) -> dict[str, int]:
        return {"peak_rss_mb": round(self.rss / MB), "peak_live_heap_mb": round(self.heap / MB)}
