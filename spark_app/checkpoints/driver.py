"""The live driver externalizes its own checkpoint: a query listener copies each sink's
query, incrementally, to ``checkpoint.external`` every ``interval`` (or every committed
batch, for a local run), and applies retention, on a thread of its own so no micro-batch
waits for storage. The manifests it writes are the catalog the operator reads to list restore
points and to choose one for a Rewind; the operator never copies a checkpoint file.

A copy is consistent without stopping the query: it takes a *committed* batch (``commits/N``
present) and the state versions that batch wrote, all immutable once committed."""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from spark_app.contract.checkpoints import layout
from spark_app.contract.checkpoints.errors import IncompleteCheckpointError
from spark_app.contract.checkpoints.failure_note import FAILURE
from spark_app.contract.checkpoints.snapshots import Manifest, apply_retention, externalize, list_snapshots
from spark_app.contract.config import ExternalCheckpoints, JobConfig
from spark_app.contract.snapshot_requests import Answer, read_answer, read_requests, write_answer
from spark_app.contract.storage import Location, open_location

log = logging.getLogger("kappa.checkpoints")
REQUEST_LOOK_S = 2.0
"""The control file is read at most this often (on progress and idle events)."""


def _not_yet_copied(live: Location, external: Location) -> list[int | None]:
    """Every committed batch not externalized yet, after the newest one both hold (re-checked:
    same offsets, or TimelineConflictError)."""
    listing = live.list_files()
    committed = layout.committed_batches(listing) if layout.METADATA in listing else []
    have = {m.batch_id for m in list_snapshots(external, verify=False)}
    check = [n for n in committed if n in have][-1:]
    return [*check, *(n for n in committed if n > max(have, default=-1))]


def snapshot_query(live: Location, external: Location, ext: ExternalCheckpoints, now: datetime) -> list[int]:
    """Copy one query's newest committed batch (``every_batch``: each one not copied yet) and
    apply retention; the batches copied."""
    taken: list[int] = []
    for n in _not_yet_copied(live, external) if ext.every_batch else [None]:
        try:
            manifest: Manifest | None = externalize(live, external, batch_id=n, now=now)
        except IncompleteCheckpointError:
            if n is None:
                raise
            continue  # Spark purged it (beyond minBatchesToRetain)
        if manifest is not None:  # None: that very batch is there already
            taken.append(manifest.batch_id)
    apply_retention(external, ext.keep_last, ext.max_age, now)
    return taken


@dataclass(frozen=True)
class SinkLocations:
    live: str
    external: str


def sink_locations(cfg: JobConfig, sink: str) -> SinkLocations:
    assert cfg.checkpoint.external is not None
    return SinkLocations(
        f"{cfg.checkpoint.location.rstrip('/')}/{sink}", f"{cfg.checkpoint.external.location.rstrip('/')}/{sink}"
    )


def externalize_sinks(cfg: JobConfig, now: datetime) -> dict[str, list[int]]:
    """Every sink's query copied once (``snapshot_query``): what the externalizer does for a
    stopped job, and what a test engine standing in for the driver does."""
    assert cfg.checkpoint.external is not None
    taken: dict[str, list[int]] = {}
    for sink in cfg.sinks:
        where = sink_locations(cfg, sink)
        live, external = open_location(where.live), open_location(where.external)
        taken[sink] = snapshot_query(live, external, cfg.checkpoint.external, now)
    return taken


class CheckpointExternalizer(StreamingQueryListener):
    """Registered by ``apps.run.run`` for a live job with ``checkpoint.external``. Progress
    events only schedule: one copy at a time runs on a worker thread; a copy that fails is
    logged and tried again at the next due progress (the live query never fails for it)."""

    def __init__(self, cfg: JobConfig) -> None:
        assert cfg.checkpoint.external is not None
        self.cfg, self.ext = cfg, cfg.checkpoint.external
        self.queries = {f"{cfg.name}-{sink}": sink for sink in cfg.sinks}
        self.last: dict[str, float] = {}
        self.taken: dict[str, list[int]] = {sink: [] for sink in cfg.sinks}
        self.errors: list[str] = []
        self._noted: set[str] = set(cfg.sinks)
        """Sinks that may have a failure note (an earlier run's, too): cleared on success."""
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kappa-externalize")
        self._running: dict[str, Future[None]] = {}
        self._lock = threading.Lock()
        self._closed = False
        """Set by ``finish``: Spark may still deliver progress events queued before the
        listener was removed; they find nothing to schedule."""
        self._owed: dict[str, set[str]] = {sink: set() for sink in cfg.sinks}
        """Requests (nonces) each sink still has to answer."""
        self._answered: set[str] = set()
        self._looked = float("-inf")

    # -- listener ---------------------------------------------------------------------------
    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self.look_for_requests()
        sink = self.queries.get(str(event.progress.name))
        if sink is not None and (self._due(sink) or self._owed.get(sink)):
            self.schedule(sink)

    def onQueryIdle(self, event: Any) -> None:
        for sink in self.look_for_requests():
            self.schedule(sink)

    def onQueryTerminated(self, event: Any) -> None:
        pass

    # -- requests ---------------------------------------------------------------------------
    def look_for_requests(self) -> list[str]:
        """New requests in the control file (read at most every ``REQUEST_LOOK_S``): owed by
        every sink from now on; the sinks that owe any."""
        path = self.ext.requests_file
        if path is None:
            return []
        now = time.monotonic()
        if now - self._looked >= REQUEST_LOOK_S:
            self._looked = now
            fresh = [n for n in read_requests(path) if n not in self._answered]
            # a restarted driver reads the same requests: what a sink answered before stays
            owed = {sink: self._unanswered(sink, fresh) for sink in self.cfg.sinks} if fresh else {}
            with self._lock:
                for sink, nonces in owed.items():
                    self._owed[sink].update(nonces)
                self._answered.update(fresh)
        return [sink for sink, owed in self._owed.items() if owed]

    def _unanswered(self, sink: str, nonces: list[str]) -> list[str]:
        try:
            external = open_location(sink_locations(self.cfg, sink).external)
            return [n for n in nonces if read_answer(external, n) is None]
        except Exception as exc:  # the store is down: answer again rather than never
            log.warning("cannot read the snapshot answers of %s: %s", sink, exc)
            return nonces

    def _answer(self, sink: str, external: Location) -> None:
        """Answer what ``sink`` owes with its newest snapshot (just copied)."""
        with self._lock:
            owed = set(self._owed[sink])
        if not owed:
            return
        newest = list_snapshots(external, verify=False)[-1]
        for nonce in sorted(owed):
            write_answer(
                external,
                Answer(
                    nonce=nonce,
                    sink=sink,
                    batch_id=newest.batch_id,
                    committed_at=newest.committed_at,
                    taken_at=newest.taken_at,
                ),
            )
        with self._lock:  # only once written: a failed write leaves them owed, retried
            self._owed[sink] -= owed
        log.info("snapshot of %s batch %d answers request(s) %s", sink, newest.batch_id, sorted(owed))

    # -- copying ----------------------------------------------------------------------------
    def _due(self, sink: str) -> bool:
        if self.ext.every_batch:
            return True
        last = self.last.get(sink)
        return last is None or time.monotonic() - last >= self.ext.interval.total_seconds()

    def schedule(self, sink: str) -> None:
        with self._lock:
            if self._closed:
                return
            running = self._running.get(sink)
            if running is not None and not running.done():
                return  # the next due progress copies what this one would have
            self.last[sink] = time.monotonic()
            self._running[sink] = self._pool.submit(self._copy, sink)

    def _copy(self, sink: str) -> None:
        where = sink_locations(self.cfg, sink)
        external: Location | None = None
        try:
            live, external = open_location(where.live), open_location(where.external)
            taken = snapshot_query(live, external, self.ext, datetime.now(UTC))
        except Exception as exc:  # storage down, a purged batch: the next due progress retries
            self.errors.append(f"{sink}: {exc}")
            log.warning("externalizing %s to %s failed: %s (retried at the next due batch)", sink, where.external, exc)
            self._note(sink, external, exc)
            return
        if sink in self._noted:
            external.delete(FAILURE)
            self._noted.discard(sink)
        self.taken[sink] += taken
        try:
            self._answer(sink, external)
        except Exception as exc:  # the store refused the answer: still owed, retried
            log.warning("answering the snapshot requests of %s failed: %s", sink, exc)
        if taken:
            log.info("externalized %s batch(es) %s to %s", sink, taken, where.external)

    def _note(self, sink: str, external: Location | None, exc: Exception) -> None:
        """Leave the failure where the operator reads restore points (if storage takes it)."""
        first = (str(exc).splitlines() or [""])[0][:300]
        note = {"sink": sink, "error": f"{type(exc).__name__}: {first}", "at": datetime.now(UTC).isoformat()}
        try:
            (external or open_location(sink_locations(self.cfg, sink).external)).write_bytes(
                FAILURE, json.dumps(note).encode()
            )
            self._noted.add(sink)
        except Exception:  # the store itself is down: the operator sees the restore points age
            log.debug("could not note the failure of %s", sink, exc_info=True)

    def finish(self) -> dict[str, list[int]]:
        """After the queries stopped: wait for the copy in flight and take one more of every
        sink (the last committed batch), so a stopped job leaves its newest restore point."""
        with self._lock:
            self._closed = True
        for future in list(self._running.values()):
            future.result()
        for sink in self.cfg.sinks:
            self._copy(sink)
        self._pool.shutdown(wait=True)
        return self.taken


def attach(spark: SparkSession, cfg: JobConfig) -> CheckpointExternalizer | None:
    """The externalizer of a live job with an external location, listening (None otherwise)."""
    if cfg.mode != "live" or cfg.checkpoint.external is None:
        return None
    listener = CheckpointExternalizer(cfg)
    spark.streams.addListener(listener)
    return listener


def detach(spark: SparkSession, listener: CheckpointExternalizer | None) -> dict[str, list[int]]:
    if listener is None:
        return {}
    spark.streams.removeListener(listener)
    return listener.finish()
