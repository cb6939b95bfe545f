"""The Rewind of the stateful ``sessions`` job, at demo scale (the recipe of
tests/spark/test_checkpoints.py, with a local directory as the external location), through
the code a cluster runs: the job's driver externalizes its checkpoint after every batch
(``spark_app.checkpoints.driver``) and the restore application's code
(``spark_app.apps.restore``) restores and undoes.

Sessions are state: a backfill from the middle would not know where the sessions around the
window began, so the safe recovery is a rewind. The story: the job runs live while its
checkpoint is externalized; during the outage window the ingestion writes bad playbacks
(profiles collapsed, durations in ms) and the job processes them; the source is corrected
(bad commits rolled back, re-ingested). Then the Rewind's phases, in order: choose the newest
snapshot committed before the outage began, restore it into a fresh location, undo what the
sink wrote after that batch, resume the same query. Its output must equal a clean run over the
corrected source."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from kappa_operator.demo.jobs import DemoSettings, sessions_job
from kappa_operator.demo.outage import compare_tables
from kappa_operator.demo.steps import Steps, batches_poll, plural
from spark_app.apps.restore import run_restore
from spark_app.apps.result import RunResult
from spark_app.apps.run import run
from spark_app.contract.checkpoints import Manifest, choose, list_snapshots, open_location
from spark_app.contract.config import CheckpointConfig, ExternalCheckpoints, RestoreConfig, RestorePoint
from spark_app.contract.errors import KappaError
from spark_app.examples import sessions
from spark_app.examples.generator import SNAPSHOT_COMMIT_INDEX, Commit, create_tables, iter_commits
from spark_app.sinks.iceberg.undo import UndoResult
from spark_app.sinks.iceberg.validation import Comparison

TABLE, CLEAN = "rewind.sessions", "rewind.sessions_clean"
COLUMNS = ["profile_id", "session_start", "session_end", "plays", "watch_s", "first_play_ts", "last_play_ts"]


@dataclass(frozen=True)
class RewindResult:
    commits: tuple[int, int, int]
    """Generator commits before, during and after the outage."""
    outage_started: datetime
    last_good_snapshot: int
    """The playbacks snapshot of the last commit before the outage."""
    snapshots: int
    """Checkpoint snapshots externalized while the job ran (both timelines)."""
    chosen: Manifest
    discarded: list[int]
    """Snapshots of the abandoned timeline (after the chosen batch), dropped."""
    undone: UndoResult
    bad_rows: int
    """Sessions in the output before the rewind that a clean run does not have."""
    before: RunResult
    outage: RunResult
    resumed: RunResult
    clean: RunResult
    result: Comparison
    """The rewound job's output against the clean run's."""

    @property
    def restored_source_snapshot(self) -> int | None:
        return self.chosen.batch.sources[0].snapshot_id if self.chosen.batch.sources else None

    def summary(self) -> dict[str, Any]:
        first = [p["batchId"] for p in self.resumed.progress if "batchId" in p]
        return {
            "commits_before_during_after_outage": list(self.commits),
            "outage_started": self.outage_started.isoformat(),
            "snapshots_externalized": self.snapshots,
            "restored_batch": self.chosen.batch_id,
            "restored_batch_committed_at": self.chosen.committed_at.isoformat(),
            "restored_watermark_ms": self.chosen.watermark_ms,
            "restored_source_snapshot": self.restored_source_snapshot,
            "last_good_source_snapshot": self.last_good_snapshot,
            "discarded_snapshots": self.discarded,
            "undone_batches": list(self.undone.batches),
            "rows_undone": self.undone.rows_removed,
            "resumed_at_batch": min(first) if first else None,
            "bad_rows_before_rewind": self.bad_rows,
            "before": self.before.summary(),
            "outage": self.outage.summary(),
            "resumed": self.resumed.summary(),
            "clean": self.clean.summary(),
            "sessions_rows": self.result.branch_rows,
            "clean_rows": self.result.main_rows,
            "matched": self.result.matched,
            "match_ratio": round(self.result.match_ratio, 6),
        }


def corrupted(c: Commit) -> pa.Table:
    """What the broken ingestion wrote: profiles collapsed onto four ids, durations in ms."""
    t = c.playbacks
    i, j = t.schema.get_field_index("profile_id"), t.schema.get_field_index("duration_s")
    t = t.set_column(i, "profile_id", pc.add(pc.bit_wise_and(t["profile_id"], 3), 1))
    t = t.set_column(j, "duration_s", pc.multiply(t["duration_s"], 1000))
    return t.cast(c.playbacks.schema)


def _append(table: Table, c: Commit, rows: pa.Table | None = None) -> int:
    table.append(c.playbacks if rows is None else rows, snapshot_properties={SNAPSHOT_COMMIT_INDEX: str(c.index)})
    snap = table.refresh().current_snapshot()
    assert snap is not None
    return snap.snapshot_id


def _output(catalog: SqlCatalog, table: str) -> pa.Table:
    return catalog.load_table(table).scan().to_arrow().select(COLUMNS)


def run_rewind(s: DemoSettings, steps: Steps, spark: SparkSession) -> RewindResult:
    catalog = SqlCatalog("default", **s.catalog_props)
    gen = s.generator(namespace="rewind")
    w_start, w_end = s.rewind_window
    commits = list(iter_commits(gen))
    before = [c for c in commits if c.ingestion_end <= w_start]
    during = [c for c in commits if w_start < c.ingestion_end <= w_end]
    after = [c for c in commits if c.ingestion_end > w_end]
    root = s.out / "rewind"
    external = open_location(str(root / "snapshots" / sessions.OUTPUT))
    live_dir = root / "live"
    cfg = sessions_job(s, TABLE, live_dir, {"maxSnapshots": 1})
    # the driver copies each committed batch (a local run's minute, not a 10-minute interval)
    every = ExternalCheckpoints(location=str(root / "snapshots"), keep_last=10_000, every_batch=True)
    cfg = cfg.model_copy(update={"checkpoint": CheckpointConfig(location=str(live_dir), external=every)})
    taken: set[int] = set()

    def snapshots() -> None:
        taken.update(m.batch_id for m in list_snapshots(external))

    def ingest(batch: list[Commit], bad: bool = False) -> int:
        ids = [_append(playbacks, c, corrupted(c) if bad else None) for c in batch]
        return ids[-1]

    _, playbacks = create_tables(catalog, gen)
    ck = live_dir / sessions.OUTPUT
    last_good: list[int] = []

    def until_outage() -> RunResult:
        last_good.append(ingest(before))
        return run(cfg, spark)

    report_before = steps.run(
        "sessions live until the outage",
        until_outage,
        batches_poll(ck, len(before)),
        lambda r: f"{plural(r.batches, 'batch')}, checkpoint externalized",
    )
    snapshots()
    outage_started = datetime.now(UTC)

    def outage() -> RunResult:
        ingest(during, bad=True)
        ingest(after)
        return run(cfg, spark)

    report_outage = steps.run(
        "sessions through the outage",
        outage,
        batches_poll(ck, len(commits)),
        lambda r: f"{len(during)} bad commits in {plural(r.batches, 'batch')}",
    )
    snapshots()
    bad_output = _output(catalog, TABLE)

    def correct() -> None:
        playbacks.manage_snapshots().rollback_to_snapshot(last_good[0]).commit()
        ingest(during + after)

    steps.run("sessions source corrected", correct, detail=lambda _: "rolled back, re-ingested")
    restored_dir = root / "restored"

    def rewind() -> tuple[Manifest, list[int], UndoResult]:
        """Pending's choice (from the manifests), then what the restore application does."""
        chosen = choose(list_snapshots(external), time=outage_started)
        point = RestorePoint(sink=sessions.OUTPUT, batch_id=chosen.batch_id, query_id=chosen.query_id)
        where = cfg.checkpoint.model_copy(update={"location": str(restored_dir)})
        report = run_restore(cfg.model_copy(update={"checkpoint": where, "restore": RestoreConfig(points=[point])}))
        if report.state != "Restored":
            raise KappaError(f"the restore failed: {report.error}")
        (done,) = report.sinks
        undone = UndoResult(tuple(done.batches), done.files_removed, done.rows_removed, done.snapshot_id)
        return chosen, done.discarded, undone

    chosen, discarded, undone = steps.run(
        "rewind sessions",
        rewind,
        detail=lambda r: f"restored batch {r[0].batch_id} (of {len(taken)} snapshots), undid {r[2].rows_removed} rows",
    )
    resumed_cfg = cfg.model_copy(update={"checkpoint": CheckpointConfig(location=str(restored_dir))})
    report_resumed = steps.run(
        "sessions resumed",
        lambda: run(resumed_cfg, spark),
        batches_poll(restored_dir / sessions.OUTPUT, len(commits)),
        lambda r: f"from batch {chosen.batch_id + 1}, {plural(r.batches, 'batch')}",
    )
    clean_cfg = sessions_job(s, CLEAN, root / "clean", None)
    report_clean = steps.run(
        "sessions clean run",
        lambda: run(clean_cfg, spark),
        batches_poll(root / "clean" / sessions.OUTPUT, 2),
        lambda r: f"the reference, {plural(r.batches, 'batch')}",
    )
    reference, result = _output(catalog, CLEAN), _output(catalog, TABLE)
    bad = compare_tables(reference, bad_output, [])
    return RewindResult(
        commits=(len(before), len(during), len(after)),
        outage_started=outage_started,
        last_good_snapshot=last_good[0],
        snapshots=len(taken),
        chosen=chosen,
        discarded=discarded,
        undone=undone,
        bad_rows=bad.only_branch,
        before=report_before,
        outage=report_outage,
        resumed=report_resumed,
        clean=report_clean,
        result=compare_tables(reference, result, []),
    )
