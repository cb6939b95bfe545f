"""Gives the C heap's free pages back to the system while the operator runs.

A burst (5,000 objects created at once, every one of them a watch event or more a second while
the cores are saturated) grows the operator's heap by hundreds of MB of event bodies and the
handlers' garbage. Once it is freed, glibc keeps it: it returns only the top of its heap by
itself, and the freed chunks below stay in the process's resident set. Measured at 5,000 objects
settled (issue 62, ``bench/RESULTS.md``): 309 MB of glibc heap, 90 MB of it in use; one
``malloc_trim(0)`` gave 156 MB back at once (the census's own garbage among it). Run every
``TRIM_EVERY_S`` by a thread, the operator's peak RSS at 5,000 objects was 552 MB, against 587 MB
without (it walks the free chunks: milliseconds at that size, the handlers running beside it).

Where the C library has no ``malloc_trim`` (musl), there is nothing to give back this way and
nothing runs."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger("kappa.operator")

TRIM_EVERY_S = 10.0


def malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` as a callable (1: memory was given back), or None without it."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return lambda: int(fn(0))


class HeapTrimmer:
    """Calls ``trim`` every ``every`` seconds on a daemon thread until stopped."""

    def __init__(self, trim: Callable[[], int], every: float = TRIM_EVERY_S) -> None:
        if every <= 0:
            raise ValueError(f"the heap trim interval must be > 0 s, got {every}")
        self.trim, self.every = trim, every
        self.trims = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heap-trim", daemon=True)

    def start(self) -> HeapTrimmer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            try:
                self.trim()
            except Exception:  # never the operator's failure: the memory stays where it is
                log.exception("giving the heap's free pages back failed")
            self.trims += 1


def trim_heap(every: float = TRIM_EVERY_S) -> HeapTrimmer | None:
    """The running trimmer, or None where the C library has no ``malloc_trim``."""
    trim = malloc_trim()
    if trim is None:
        log.info("no malloc_trim in this C library: the heap is not trimmed")
        return None
    return HeapTrimmer(trim, every).start()
