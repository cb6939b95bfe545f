"""A rewind with real local Spark and a real S3 API (moto's server): the stateful ``sessions``
example reads an Iceberg table live (one snapshot per micro-batch) into the exactly-once
Iceberg sink, while its own driver externalizes its checkpoint to S3 (a query listener, with
the standard AWS environment a pod would have: the operator copies nothing).

The story, as in the Netflix talk: an ingestion outage writes bad playbacks for a while and the
job processes them. Once the source is corrected (the bad commits rolled back and re-ingested),
the operator rewinds: it chooses the newest snapshot committed before the outage, restores it
into a fresh checkpoint location, undoes what the sink wrote after that batch, and resumes.
The final output must equal a run that never saw the bad data, the live checkpoint must be
untouched, and the restored query must resume at exactly batch N+1 with the state and the
source offsets of batch N.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from harness.s3 import MotoS3
from spark_app.apps.run import run
from spark_app.contract.checkpoints import (
    choose,
    discard_after,
    layout,
    list_batches,
    list_snapshots,
    open_location,
    restore,
)
from spark_app.contract.config import JobConfig, parse_config
from spark_app.examples.generator import SNAPSHOT_COMMIT_INDEX, Commit, GeneratorConfig, create_tables, iter_commits
from spark_app.sinks.iceberg.undo import undo
from tests.spark.conftest import T0

pytestmark = pytest.mark.spark

GEN = GeneratorConfig(start=T0, hours=1.5, impressions_per_hour=2400, commit_interval=timedelta(minutes=5))
GOOD_BEFORE, OUTAGE, GOOD_AFTER = slice(0, 8), slice(8, 10), slice(10, None)
SINK = "sessions"
COLUMNS = ["profile_id", "session_start", "session_end", "plays", "watch_s", "first_play_ts", "last_play_ts"]


def corrupted(c: Commit) -> pa.Table:
    """What the outage ingested instead: profiles collapsed onto a few ids (sessions merge) and
    durations in milliseconds."""
    t = c.playbacks
    t = t.set_column(
        t.schema.get_field_index("profile_id"), "profile_id", pc.add(pc.bit_wise_and(t["profile_id"], 3), 1)
    )
    t = t.set_column(t.schema.get_field_index("duration_s"), "duration_s", pc.multiply(t["duration_s"], 1000))
    return t.cast(c.playbacks.schema)


def append(table: Table, c: Commit, rows: pa.Table | None = None) -> int:
    table.append(c.playbacks if rows is None else rows, snapshot_properties={SNAPSHOT_COMMIT_INDEX: str(c.index)})
    snap = table.refresh().current_snapshot()
    assert snap is not None
    return snap.snapshot_id


def config(props: dict[str, str], location: Path, table: str) -> JobConfig:
    return parse_config(
        {
            "name": "sessions",
            "pipeline": "spark_app.examples.sessions:pipeline",
            "mode": "live",
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {
                "playbacks": {
                    "kind": "icebergLive",
                    "table": GEN.playbacks_table,
                    "startingPosition": "earliest",
                    "readLimit": {"maxSnapshots": 1},
                }
            },
            "sinks": {SINK: {"kind": "iceberg", "table": table, "timeColumn": "session_start"}},
            "checkpoint": {"location": str(location)},
            "trigger": {"kind": "availableNow"},
        }
    )


def parse_config_checkpoint(cfg: JobConfig, external: dict[str, Any]) -> Any:
    """``cfg``'s checkpoint with the driver's snapshot settings, as a StreamingJob renders them."""
    return type(cfg.checkpoint).model_validate({"location": cfg.checkpoint.location, "external": external})


def output(catalog: SqlCatalog, table: str) -> list[tuple[Any, ...]]:
    t = catalog.load_table(table).scan().to_arrow().select(COLUMNS)
    return sorted(tuple(r.values()) for r in t.to_pylist())


def digest(root: Path) -> dict[str, str]:
    """Every file below ``root`` (hidden ones too) -> sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def state_rows(spark: SparkSession, checkpoint: Path | str, batch_id: int) -> list[str]:
    """The state after ``batch_id``, through Spark's state data source."""
    df = spark.read.format("statestore").option("path", str(checkpoint)).option("batchId", batch_id).load()
    return sorted(json.dumps(r.asDict(recursive=True), default=str, sort_keys=True) for r in df.collect())


def test_rewind_to_before_bad_input_gives_the_output_of_a_run_that_never_saw_it(
    spark: SparkSession, tmp_path: Path, s3_server: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    props = {"uri": f"sqlite:///{tmp_path}/data/catalog.db", "warehouse": f"file://{tmp_path}/data/warehouse"}
    catalog = SqlCatalog("default", **props)
    _, playbacks = create_tables(catalog, GEN)
    commits = list(iter_commits(GEN))
    assert len(commits) >= 14
    opts = s3_server.options()
    for var, value in (
        ("AWS_ENDPOINT_URL_S3", opts.endpoint),
        ("AWS_ACCESS_KEY_ID", opts.access_key),
        ("AWS_SECRET_ACCESS_KEY", opts.secret_key),
        ("AWS_REGION", opts.region),
    ):
        monkeypatch.setenv(var, str(value))
    bucket_uri = f"s3://{s3_server.create_bucket()}/kappa"
    external = open_location(f"{bucket_uri}/{SINK}", opts)
    live_dir = tmp_path / "live"
    live = open_location(str(live_dir / SINK))
    cfg = config(props, live_dir, "out.sessions")
    ext = {"location": bucket_uri, "interval": "0s", "keepLast": 100}
    cfg = cfg.model_copy(update={"checkpoint": parse_config_checkpoint(cfg, ext)})

    # 1. production: the job runs; its driver externalizes its checkpoint as batches commit
    before_outage = [append(playbacks, c) for c in commits[GOOD_BEFORE]]
    report = run(cfg, spark)
    while_running = list_snapshots(external)
    assert len(while_running) >= 2 and report.externalized[SINK], "the driver copied batches as they committed"
    good_batch = while_running[-1].batch_id
    assert good_batch == max(layout.committed_batches(live.list_files())), "the last committed batch is copied"
    outage_started = datetime.now(UTC)

    # 2. the outage: bad playbacks are ingested and processed, then good ones to the end
    for c in commits[OUTAGE]:
        append(playbacks, c, corrupted(c))
    for c in commits[GOOD_AFTER]:
        append(playbacks, c)
    run(cfg, spark)
    live_before = digest(live_dir)
    after_outage = list_snapshots(external)[-1]
    assert after_outage.batch_id >= good_batch + len(commits) - OUTAGE.start
    bad_output = output(catalog, "out.sessions")

    # 3. the source is corrected: the outage's commits rolled back and re-ingested properly
    snapshots = list_snapshots(external)
    chosen = choose(snapshots, time=outage_started)
    assert chosen.batch_id == good_batch, "the newest snapshot committed before the outage"
    (source,) = chosen.batch.sources
    assert (source.kind, source.snapshot_id, source.complete) == ("live", before_outage[-1], True)
    playbacks.manage_snapshots().rollback_to_snapshot(source.snapshot_id).commit()
    for c in commits[OUTAGE.start :]:
        append(playbacks, c)

    # a snapshot taken while the query ran restores to exactly the state Spark had at its batch
    early, early_dir = while_running[0], tmp_path / "early" / SINK
    restore(external, early, open_location(str(early_dir)))
    assert state_rows(spark, early_dir, early.batch_id) == state_rows(spark, live.path(), early.batch_id)

    # 4. the rewind: restore into a fresh location, undo the sink after batch N, resume
    abandoned = sorted(m.batch_id for m in list_snapshots(external) if m.batch_id > good_batch)
    assert after_outage.batch_id in abandoned
    assert sorted(discard_after(external, good_batch)) == abandoned, "the abandoned timeline's snapshots"
    rewound_dir = tmp_path / "rewound"
    restored = open_location(str(rewound_dir / SINK))
    # The same query resumed: its batches N+1, N+2, ... run again with new contents, and the
    # sink treats the undo of batches > N as a cut (it does not skip them as replays).
    restore(external, chosen, restored)
    listing = restored.list_files()
    assert max(layout.log_batches(listing, "offsets")) == max(layout.log_batches(listing, "commits")) == good_batch
    assert state_rows(spark, rewound_dir / SINK, good_batch) == state_rows(spark, live_dir / SINK, good_batch)
    assert len(state_rows(spark, rewound_dir / SINK, good_batch)) > 20, "a real amount of session state"
    undone = undo(lambda: catalog.load_table("out.sessions"), "main", chosen.query_id, good_batch)
    assert undone.batches and min(undone.batches) > good_batch

    resumed = run(
        cfg.model_copy(update={"checkpoint": cfg.checkpoint.model_copy(update={"location": str(rewound_dir)})}), spark
    )
    first = resumed.for_query(SINK)[0]
    assert first["batchId"] == good_batch + 1, "Spark resumes at exactly the batch after the snapshot"
    stored = layout.parse_offsets(restored.read_bytes(f"offsets/{good_batch}").decode()).sources[0][1]
    start = first["sources"][0]["startOffset"]
    assert (json.loads(start) if isinstance(start, str) else start) == json.loads(stored or "")
    assert [b.batch_id for b in list_batches(restored)][: good_batch + 2] == list(range(good_batch + 2))

    # 5. the reference: a fresh run over the corrected source that never saw the bad data
    reference_dir = tmp_path / "reference"
    run(config(props, reference_dir, "out.reference"), spark)
    expected = output(catalog, "out.reference")
    assert len(expected) > 50
    assert set(bad_output) - set(expected), "the bad input changed the output"
    assert output(catalog, "out.sessions") == expected
    after = digest(live_dir)
    assert {k: after.get(k) for k in live_before} == live_before, "the live checkpoint is untouched, byte for byte"
    # Spark's state-store maintenance (a thread of the shared session's executor) may still
    # write a snapshot of the stopped live query's state: added, never a changed file
    added = set(after) - set(live_before)
    assert all(re.search(r"/state/\d+/\d+/\.?\d+\.snapshot(\.crc)?$", k) for k in added), sorted(added)
