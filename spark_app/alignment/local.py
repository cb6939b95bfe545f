"""A watermark provider for the sources of one driver: a JSON state file.

Reads and writes happen under an exclusive ``flock`` on a sibling lock file, and the state
is replaced atomically (write a temp file, ``os.replace``), so a process killed mid-write
leaves the previous state. Members are declared up front: one that has not reported holds
the group (nobody runs ahead of a missing member).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from spark_app.contract.alignment import GroupView, ReadCount, global_view, query_of


@contextmanager
def locked_state(watermark_file: Path) -> Iterator[dict[str, Any]]:
    """The JSON state in ``watermark_file`` under an exclusive lock; what the block leaves in the
    dict replaces the file atomically when it ends without an exception."""
    watermark_file.parent.mkdir(parents=True, exist_ok=True)
    with open(watermark_file.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(watermark_file.read_text()) if watermark_file.exists() else {}
            yield state
            fd, tmp = tempfile.mkstemp(dir=watermark_file.parent, prefix=".wm-")
            with os.fdopen(fd, "w") as f:
                json.dump(state, f, sort_keys=True)
            os.replace(tmp, watermark_file)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class LocalWatermarkProvider:
    def __init__(self, watermark_file: str | Path, members: tuple[str, ...]) -> None:
        self.watermark_file = Path(watermark_file)
        self.members = tuple(sorted(members))

    def _locked(self) -> AbstractContextManager[dict[str, Any]]:
        return locked_state(self.watermark_file)

    def report(
        self,
        member: str,
        watermark: int | None,
        throttled: bool = False,
        reset: bool = False,
        read: ReadCount | None = None,
    ) -> GroupView:
        """``read`` is accepted for the interface and not kept: on one driver the read ledger
        (``spark_app.alignment.reads``) already has the counts."""
        with self._locked() as state:
            reported = state.setdefault("watermarks", {})
            reported[member] = watermark
            state.setdefault("updated", {})[member] = time.time()
            return global_view(self.members, reported, query_of(member))

    def view(self) -> GroupView:
        with self._locked() as state:
            return global_view(self.members, state.get("watermarks", {}))

    def reset(self) -> None:
        """Forget every report (a fresh query: stale watermarks must not let anyone run ahead)."""
        with self._locked() as state:
            state.clear()
