"""Batches written but not yet committed to Iceberg: the Iceberg commit off the batch's
critical path, exactly once all the same.

A batch's Iceberg commit (0.4 s at production density, growing with the table's history)
used to end the batch: Spark planned the next one only after it. Now the batch ends once its
files are written and *recorded* in a pending-commit log (one small object per batch, next to
the checkpoint); one committer thread per sink commits the recorded batches in order while
Spark runs the next batch. The guarantees stay:

* **Nothing lost.** Spark logs batch N as done only after the batch function returned, so after
  N was recorded. A driver that dies after Spark's log and before our commit leaves the record;
  the next run of the query commits every record first, in order, before its first batch.
* **Nothing twice.** Each commit (recovered or not) checks the branch's history for the batch
  first (``commit.find_batch``); a batch Spark replays that is recorded or committed is skipped.
* **In order.** One committer per sink, first in, first out, so ``find_batch``'s rule (a query's
  batches commit in order) holds; a replay check waits for the commits before it.
* **A failed commit fails the query**, at the next batch (or at the end of the run), as a failed
  synchronous commit did; the record stays for the next run.

The log lives beside the query's checkpoint, not in it (``<checkpoint>/../_kappa/pending-commits/
<sink>``): a checkpoint snapshot or a Rewind's restore never carries a record of another
timeline.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile

from spark_app.contract.storage import REPORT_DIR, Location, open_location
from spark_app.sinks.iceberg.arrow_files import pack, unpack

log = logging.getLogger("kappa.sink")
PENDING_DIR = f"{REPORT_DIR}/pending-commits"


@dataclass(frozen=True)
class Pending:
    """One batch's commit, as recorded."""

    batch_id: int
    files: list[DataFile]
    properties: dict[str, str]
    """The snapshot's properties (query id, batch id, job)."""
    table_properties: dict[str, str]
    """What reading the files needs on the table (a name mapping)."""
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    """The batch's Spark job, for the commit's trace (not recorded)."""


def pending_location(checkpoint: str, sink: str) -> Location:
    """The log of the sink whose query checkpoints at ``checkpoint`` (``<base>/<sink>``)."""
    base = checkpoint.rstrip("/").rsplit("/", 1)[0]
    return open_location(f"{base}/{PENDING_DIR}/{sink}")


def _name(batch_id: int) -> str:
    return f"{batch_id:020d}.json"


class PendingLog:
    """The records of one sink: put before the batch ends, deleted once committed."""

    def __init__(self, location: Location) -> None:
        self.location = location

    def put(self, entry: Pending) -> None:
        body = {
            "batchId": entry.batch_id,
            "properties": entry.properties,
            "tableProperties": entry.table_properties,
            "files": [base64.b64encode(pack(f)).decode() for f in entry.files],
        }
        self.location.write_bytes(_name(entry.batch_id), json.dumps(body).encode())

    def entries(self) -> list[Pending]:
        """Every record, oldest batch first."""
        out = []
        for rel in sorted(self.location.list_files()):
            if not rel.endswith(".json"):
                continue
            body = json.loads(self.location.read_bytes(rel))
            files = [unpack(base64.b64decode(f)) for f in body["files"]]
            out.append(Pending(int(body["batchId"]), files, body["properties"], body["tableProperties"]))
        return sorted(out, key=lambda e: e.batch_id)

    def done(self, batch_id: int) -> None:
        self.location.delete(_name(batch_id))


class Committer:
    """One thread committing recorded batches in order. ``commit`` commits one (idempotent:
    it checks the history first) and is called on this thread only."""

    def __init__(self, name: str, commit: Callable[[Pending], None]) -> None:
        self._commit = commit
        self._queue: queue.Queue[Pending | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._queued: set[int] = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name=f"kappa-commit-{name}", daemon=True)
        self._thread.start()

    def submit(self, entry: Pending) -> None:
        with self._lock:
            self._queued.add(entry.batch_id)
        self._queue.put(entry)

    def queued(self, batch_id: int) -> bool:
        """Whether ``batch_id`` is recorded and not committed yet (a replay of it is skipped)."""
        with self._lock:
            return batch_id in self._queued

    def raise_failure(self) -> None:
        """The commit that failed, raised on the caller's thread (the query fails with it)."""
        with self._lock:
            failure = self._failure
        if failure is not None:
            raise failure

    def wait(self) -> None:
        """Until every submitted batch is committed (or one failed: raised)."""
        with self._idle:
            while self._queued and self._failure is None:
                self._idle.wait(timeout=1.0)
        self.raise_failure()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            if self._failure is not None:
                continue  # after a failure nothing more commits here: the records stay
            try:
                self._commit(entry)
            except BaseException as exc:  # the query fails at its next batch; the record stays
                log.error("committing batch %d failed: %s (kept for the next run)", entry.batch_id, exc)
                with self._idle:
                    self._failure = exc
                    self._idle.notify_all()
                continue
            with self._idle:
                self._queued.discard(entry.batch_id)
                self._idle.notify_all()
