"""The ``foreachBatch`` function of an Iceberg sink: skip a replayed batch, let the executors
write the files (Spark's own writer, ``spark_files``; pyiceberg's in a Python worker only for
tables it cannot write, ``arrow_files``), commit them on the driver, by default while Spark
runs the next batch (``pending``); every few commits, keep the table's history (``history``)
and file count (``compaction``) bounded."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable

from pyarrow import fs
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import to_arrow_schema

from spark_app.catalogs import catalog_for
from spark_app.contract.config import CatalogConfig
from spark_app.contract.sinks import IcebergSink
from spark_app.contract.trace import trace
from spark_app.sinks.iceberg import arrow_files, batch_tags, compaction, history, spark_files
from spark_app.sinks.iceberg.arrow_files import FILES_SCHEMA, FileWriteSpec, write_data_files
from spark_app.sinks.iceberg.commit import (
    BATCH_ID,
    JOB,
    QUERY_ID,
    Committed,
    commit_batch,
    data_files,
    find_batch,
)
from spark_app.sinks.iceberg.pending import Committer, Pending, PendingLog, pending_location
from spark_app.sinks.iceberg.table import add_new_columns, ensure_main_snapshot, load_or_create

log = logging.getLogger("kappa.sink")

FAULT_ENV = "KAPPA_SINK_FAULT"
"""Fault injection for tests: ``kill-before-commit:<batch>`` / ``kill-after-commit:<batch>`` kill
the driver's process at those points; ``pause-before-commit:<batch>[:<seconds>]`` holds the
driver once, at the first batch from ``<batch>`` on that wrote files, between its file writes and
its commit (saying so in its log), for a test on a cluster to delete its pod there (10 min by
default) or to take storage away under the commit that follows."""
PAUSE_S = 600.0
_PAUSED: list[int] = []
"""The batch this process paused at (once per driver)."""


def paused_batch(fault: str) -> tuple[int, float] | None:
    """(batch, seconds) of a ``pause-before-commit`` fault, else None."""
    kind, _, rest = fault.partition(":")
    if kind != "pause-before-commit" or not rest:
        return None
    batch, _, seconds = rest.partition(":")
    return int(batch), float(seconds) if seconds else PAUSE_S


def pause_for_a_fault(where: str, seconds: float) -> None:
    log.warning("fault point reached: %s; pausing %.0f s (%s)", where, seconds, FAULT_ENV)
    time.sleep(seconds)


def checkpoint_query_id(checkpoint: str) -> str:
    """The streaming query's id, stable across restarts: Spark keeps it in ``<checkpoint>/metadata``."""
    uri = checkpoint.replace("s3a://", "s3://", 1).rstrip("/") + "/metadata"
    filesystem, path = fs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
    with filesystem.open_input_stream(path) as f:
        return str(json.loads(f.read().decode().splitlines()[0])["id"])


class IcebergBatchWriter:
    def __init__(
        self,
        job: str,
        sink_name: str,
        sink: IcebergSink,
        catalog: CatalogConfig,
        branch: str,
        checkpoint: str,
        trace_path: str | None = None,
        pipelined: bool = False,
        query_id: str | None = None,
        before_commit: Callable[[], None] | None = None,
        add_columns: bool = False,
    ) -> None:
        """``pipelined``: commit on a thread of its own while Spark runs the next batch (the
        runtime's default, ``IcebergSink.pipelinedCommit``); then ``finish`` ends the run.
        ``query_id``: the id its commits carry, when no streaming query's checkpoint holds one
        (a bounded run's, ``spark_app.apps.bounded``). ``before_commit``: called once a batch's
        files are written; if it raises, they are removed and nothing is committed (a bounded
        run's proof, observed on the write)."""
        self.before_commit = before_commit
        self.add_columns = add_columns
        """A blue/green upgrade's green: output columns the table lacks are added to it."""
        self.job, self.sink_name, self.sink, self.branch = job, sink_name, sink, branch
        self.catalog_name, self.properties = sink.catalog, catalog.properties()
        self.checkpoint, self.trace_path = checkpoint, trace_path
        self._query_id: str | None = query_id
        self._commits = 0
        self._arrow_because: str | None = None
        self.log = PendingLog(pending_location(checkpoint, sink_name)) if pipelined else None
        self.committer = Committer(sink_name, self._commit) if pipelined else None
        self._recovered = False
        self._written = 0
        """Batches this writer wrote files for: every ``compaction.every`` of them, compact."""

    def table(self) -> Table:
        return catalog_for(self.catalog_name, self.properties).load_table(self.sink.table)

    def loader(self, loaded: Table) -> Callable[[], Table]:
        """The table for each commit attempt: the first on the one this batch already loaded
        (its metadata is read once per batch), a retry after a conflict on a fresh load."""
        pending = [loaded]
        return lambda: pending.pop() if pending else self.table()

    @property
    def query_id(self) -> str:
        if self._query_id is None:
            self._query_id = checkpoint_query_id(self.checkpoint)
        return self._query_id

    def expire(self) -> history.Expired | None:
        """Every ``expireEvery`` commits of this writer: the table's history back to its bound."""
        self._commits += 1
        policy = self.sink.history
        if not policy.expire_every or self._commits % policy.expire_every:
            return None
        return history.expire(self.table, policy.keep_last, policy.min_age)

    def compact(self, df: DataFrame, batch_id: int) -> compaction.Compacted | None:
        """Small files of old batches merged (every ``compaction.every`` written batches)."""
        policy = self.sink.compaction
        return compaction.compact(
            df.sparkSession,
            self.table,
            self.branch,
            self.properties,
            self.query_id,
            batch_id,
            policy.protect_batches,
            policy.min_files,
            policy.small_file_bytes,
            self.sink.target_file_bytes,
        )

    def write(self, df: DataFrame, table: Table, batch_id: int) -> tuple[str | None, list[DataFile], dict[str, str]]:
        """The batch's data files: the directory Spark wrote them in (None: pyiceberg wrote
        them), the files with rows, and the table properties reading them needs."""
        why_not = spark_files.unsupported(table)
        if why_not is None:
            tag = batch_tags.tag(self.query_id, batch_id)
            rows = spark_files.rows_per_file(table.current_snapshot(), self.sink.target_file_bytes)
            directory, paths = spark_files.write_files(df, table, tag, self.properties, rows)
            written = [f for f in data_files(table, paths) if f.record_count]
            return directory, written, spark_files.name_mapping(table)
        if why_not != self._arrow_because:
            self._arrow_because = why_not
            log.info("%s: data files written by pyiceberg in Python workers: %s", self.sink.table, why_not)
        tagged = batch_tags.write_properties(table.metadata.properties, self.query_id, batch_id)
        metadata = table.metadata.model_copy(update={"properties": tagged})
        spec = FileWriteSpec(self.properties, metadata.model_dump_json(), self.sink.target_file_bytes)
        return None, arrow_files.data_files(df.mapInArrow(write_data_files(spec), FILES_SCHEMA).collect()), {}

    def recover(self) -> None:
        """Commit what a previous run recorded and did not commit (it died in between), in
        order, before this run's first batch."""
        if self._recovered or self.log is None:
            return
        self._recovered = True
        for entry in self.log.entries():
            log.info("%s: committing batch %d recorded by an earlier run", self.sink.table, entry.batch_id)
            self._commit(entry, recovered=True)

    def finish(self) -> None:
        """The run's end: every recorded batch committed (a failed commit raised here)."""
        if self.committer is not None:
            try:
                self.committer.wait()
            finally:
                self.committer.close()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        self.recover()
        if self.committer is not None:
            self.committer.raise_failure()
        catalog = catalog_for(self.catalog_name, self.properties)
        schema = to_arrow_schema(df.schema, timezone="UTC")
        table = load_or_create(catalog, self.sink.table, schema, self.sink.partition_by)
        if self.add_columns:
            table = add_new_columns(table, schema, self.branch, self.table)
        if self.branch != "main":
            table = ensure_main_snapshot(table)
        if self.committer is not None and self.committer.queued(batch_id):
            done = Committed(None)  # a replay of a batch still being committed
        else:
            done = find_batch(table, self.branch, self.query_id, batch_id)
        if done is not None:
            # Still run the batch (to a no-op sink): Spark checks that every stateful operator
            # committed its state for the batch; only our data is already in the table.
            df.write.format("noop").mode("overwrite").save()
            log.info(
                "%s: batch %d already committed (snapshot %s), skipped", self.sink.table, batch_id, done.snapshot_id
            )
            trace(
                self.trace_path,
                "commit",
                sink=self.sink_name,
                batch=batch_id,
                skipped=True,
                snapshot_id=str(done.snapshot_id),
            )
            return
        prepared = time.monotonic()
        directory, written, needs = self.write(df, table, batch_id)
        wrote = time.monotonic()
        if self.before_commit is not None:
            try:
                self.before_commit()
            except BaseException:
                if directory is not None:
                    spark_files.discard(df.sparkSession, directory, self.properties, table)
                raise
        if not written:
            if directory is not None:
                spark_files.discard(df.sparkSession, directory, self.properties, table)
            trace(self.trace_path, "commit", sink=self.sink_name, batch=batch_id, files=0, rows=0, skipped=False)
            return
        pause = paused_batch(os.environ.get(FAULT_ENV, ""))
        if pause is not None and batch_id >= pause[0] and not _PAUSED:
            _PAUSED.append(batch_id)
            pause_for_a_fault(
                f"{self.sink.table}: batch {batch_id} written ({len(written)} files), not committed", pause[1]
            )
        props = {QUERY_ID: self.query_id, BATCH_ID: str(batch_id), JOB: self.job}
        timings = {"prepare_s": round(prepared - started, 4), "write_s": round(wrote - prepared, 4)}
        entry = Pending(batch_id, written, props, needs, timings)
        if self.committer is None or self.log is None:
            self._commit(entry, table=table)
        else:
            self.log.put(entry)  # durable before Spark logs the batch: a crash loses nothing
            self.committer.submit(entry)
            if os.environ.get(FAULT_ENV) == f"kill-after-commit:{batch_id}":
                self.committer.wait()  # the fault's point: our commit done, Spark's not yet
        self._written += 1
        policy = self.sink.compaction
        if policy.every and self._written % policy.every == 0:
            if self.committer is not None:
                self.committer.wait()  # compaction rewrites committed files only
            begun = time.monotonic()
            compacted = self.compact(df, batch_id)
            if compacted is not None:
                trace(
                    self.trace_path,
                    "compact",
                    sink=self.sink_name,
                    batch=batch_id,
                    compacted_files=compacted.files_before,
                    compacted_into=compacted.files_after,
                    compact_s=round(time.monotonic() - begun, 4),
                )

    def _commit(self, entry: Pending, table: Table | None = None, recovered: bool = False) -> None:
        """One recorded batch into the branch (skipped when already there), then the history
        kept bounded; on the committer's thread when pipelined."""
        started = time.monotonic()
        if os.environ.get(FAULT_ENV) == f"kill-before-commit:{entry.batch_id}":
            self._die_after_sparks_commit(entry.batch_id)
        load = self.loader(table) if table is not None else self.table
        outcome = commit_batch(
            load, self.branch, entry.files, entry.properties, self.sink.commit_retries, entry.table_properties
        )
        committed = time.monotonic()
        if self.log is not None:
            self.log.done(entry.batch_id)
        expired = self.expire() if not outcome.skipped else None
        trace(
            self.trace_path,
            "commit",
            sink=self.sink_name,
            batch=entry.batch_id,
            files=len(entry.files),
            rows=sum(f.record_count for f in entry.files),
            bytes=sum(f.file_size_in_bytes for f in entry.files),
            attempts=outcome.attempts,
            skipped=outcome.skipped,
            snapshot_id=str(outcome.snapshot_id),
            # Where a batch's time goes: the table lookups, the Spark job (source read, the
            # pipeline, the state store, the file writes), the Iceberg commit (off the batch's
            # path when pipelined).
            **entry.timings,
            commit_s=round(committed - started, 4),
            pipelined=self.committer is not None,
            **({"recovered": True} if recovered else {}),
            **({"expired": expired.snapshots, "kept": expired.kept} if expired else {}),
            **({"expire_s": round(time.monotonic() - committed, 4)} if expired else {}),
        )
        if os.environ.get(FAULT_ENV) == f"kill-after-commit:{entry.batch_id}":
            # Fault injection for tests: die like a killed driver, after our commit, before Spark's.
            os.killpg(os.getpgrp(), signal.SIGKILL)

    def _die_after_sparks_commit(self, batch_id: int) -> None:
        """Fault injection for tests: the pipelined commit's window. Spark logged the batch as
        done, ours has not started: die there."""
        commits = f"{self.checkpoint.rstrip('/')}/commits/{batch_id}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not os.path.exists(commits):
            time.sleep(0.01)
        os.killpg(os.getpgrp(), signal.SIGKILL)
