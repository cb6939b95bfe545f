"""The live candidate (``icebergLive``) and the source offsets, mostly at reader level.

Planners are built as the runtime builds them (``frame.reader_for(spec)``) and driven through
``initialOffset`` / ``latestOffset`` / ``task_splits``, as the JVM stream drives them, in this
process, which is fast and lets a second, freshly built planner stand in for a restart from the
checkpoint. The rows a batch stands for are read with pyarrow as an oracle (the JVM read of
planned pieces is checked in ``test_jvm_source.py``). One test runs a real streaming query
while commits land under it.

The oracle for "which rows should a range of offsets read" is the generator: each snapshot
the tests know of maps to the impression ids its commit wrote (original snapshots through
the summary's commit index, appended ones recorded as they are written).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles, ReadMaxRows

from spark_app.apps.queries import start_query
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import NonAppendSnapshotError, PlanChangedError, SnapshotExpiredError
from spark_app.contract.offsets import BackfillOffset, LiveOffset
from spark_app.contract.trace import read_trace
from spark_app.examples.generator import (
    SNAPSHOT_COMMIT_INDEX,
    Commit,
    GeneratorConfig,
    create_tables,
    iter_commits,
    write_commit,
)
from spark_app.planning.splits import FilePiece, Split
from spark_app.sinks.iceberg.compaction import compact
from spark_app.sinks.iceberg.history import expire
from spark_app.sources import frames
from spark_app.sources.iceberg.backfill_reader import BackfillReader
from spark_app.sources.iceberg.frame import reader_for
from spark_app.sources.iceberg.live_reader import LiveReader
from spark_app.sources.iceberg.spec import micros
from tests.spark.conftest import T0, Dataset, sources

pytestmark = pytest.mark.spark

ALL = ReadAllAvailable()
Offset = dict[str, Any]


# --- helpers -------------------------------------------------------------------------------


@pytest.fixture
def fresh_dataset(fresh_dataset: Callable[[float], Dataset], tmp_path: Path) -> Callable[[float], Dataset]:
    """conftest's fresh_dataset, with its root created (SQLite cannot create the directory)."""

    def make(hours: float) -> Dataset:
        (tmp_path / "data").mkdir(exist_ok=True)
        return fresh_dataset(hours)

    return make


def live_config(ds: Dataset, tmp: Path, **source: Any) -> JobConfig:
    """Live copy of impressions only; ``source`` overrides the source fields (camelCase)."""
    return ds.config(
        tmp,
        name="live",
        mode="live",
        pipeline="spark_app.examples.copy:pipeline",
        pipelineArgs={"source": "impressions"},
        output="copy",
        sources=sources("icebergLive", ("impressions",), **source),
        trigger={"kind": "processingTime", "interval": "1s"},
    )


def backfill_config(ds: Dataset, tmp: Path, window: dict[str, str], **source: Any) -> JobConfig:
    return ds.config(
        tmp,
        name="bf",
        mode="backfill",
        pipeline="spark_app.examples.copy:pipeline",
        pipelineArgs={"source": "impressions"},
        output="copy",
        sources=sources("icebergBackfill", ("impressions",), **source),
        window=window,
        alignment={"maxDrift": "5m", "stateDir": str(tmp / "alignment")},
    )


def build_reader(cfg: JobConfig, name: str = "impressions") -> Any:
    """The planner the runtime builds for the source (the JVM stream's counterpart)."""
    return reader_for(frames.source_spec(cfg, next(iter(cfg.sinks)), name, 2))


def walk(reader: Any, start: Offset, limit: ReadLimit = ALL, max_steps: int = 300) -> list[Offset]:
    """Offsets from ``start`` until latestOffset stops moving (the source is caught up)."""
    offsets = [start]
    for _ in range(max_steps):
        end = reader.latestOffset(offsets[-1], limit)
        if end == offsets[-1]:
            return offsets
        offsets.append(end)
    raise AssertionError(f"latestOffset did not settle in {max_steps} steps: last {offsets[-3:]}")


def batch_splits(reader: Any, start: Offset, end: Offset) -> list[list[Split]]:
    """The splits of each task of one batch."""
    return reader.task_splits(start, end)


def _micros(table: pa.Table, column: str) -> pa.ChunkedArray:
    root, *rest = column.split(".")
    col = table.column(root)
    for name in rest:
        col = pc.struct_field(col, name)
    return pc.cast(col, pa.int64())


def _between(table: pa.Table, column: str, lo: int, hi: int) -> pa.Table:
    us = _micros(table, column)
    return table.filter(pc.and_(pc.greater_equal(us, lo), pc.less(us, hi)))


def _piece_rows(piece: FilePiece) -> pa.Table:
    """Test oracle: the rows a planned piece stands for, read with pyarrow (the product reads
    them in the JVM; tests/spark/test_jvm_source.py checks the two agree)."""
    with PyArrowFileIO().new_input(piece.path).open() as f:
        pf = pq.ParquetFile(f)
        table = pf.read() if piece.row_groups is None else pf.read_row_groups(list(piece.row_groups))
    if piece.time_range is not None:
        table = _between(table, piece.time_range.column, piece.time_range.lo, piece.time_range.hi)
    return table


def batch_rows(reader: Any, start: Offset, end: Offset) -> pa.Table:
    tables = [_piece_rows(p) for task in batch_splits(reader, start, end) for split in task for p in split.pieces]
    spec = reader.spec
    if spec.window is not None and spec.source.kind == "icebergBackfill":
        lo, hi = micros(spec.window.read_start), micros(spec.window.read_end)
        tables = [_between(t, spec.ordering_column, lo, hi) for t in tables]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.table({"impression_id": pa.array([], pa.string())})
    return pa.concat_tables(tables, promote_options="permissive")


def batch_ids(reader: Any, start: Offset, end: Offset) -> list[str]:
    return batch_rows(reader, start, end).column("impression_id").to_pylist()


def commit_ids_of(table: pa.Table) -> set[int]:
    if "__metadata__" not in table.column_names:
        return set()
    return set(table.column("__metadata__").combine_chunks().field("commit_id").to_pylist())


def history(table: Table) -> list[int]:
    """The current snapshot's ancestry, oldest first (independent of the source's helper)."""
    out = []
    snap = table.current_snapshot()
    while snap is not None:
        out.append(snap.snapshot_id)
        snap = table.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return out[::-1]


def impressions(ds: Dataset) -> Table:
    return ds.catalog().load_table(ds.generator.impressions_table)


def original_ids_by_snapshot(ds: Dataset) -> dict[int, list[str]]:
    """Impression ids each generated snapshot appended (from the generator, not the table)."""
    by_index = {c.index: c.impressions.column("impression_id").to_pylist() for c in iter_commits(ds.generator)}
    out = {}
    for snap in impressions(ds).snapshots():
        index = snap.summary.additional_properties.get(SNAPSHOT_COMMIT_INDEX) if snap.summary else None
        if index is not None:
            out[snap.snapshot_id] = by_index[int(index)]
    return out


def extra_commits(ds: Dataset, n: int, seed: int = 99, prefix: str = "x") -> list[Commit]:
    """``n`` more commits after the dataset's end (another seed), ids prefixed to stay unique."""
    gen = GeneratorConfig(
        start=ds.generator.end + timedelta(hours=1),
        hours=0.5,
        impressions_per_hour=600,
        commit_interval=timedelta(minutes=5),
        seed=seed,
    )
    out = []
    for c in islice(iter_commits(gen), n):
        imp = c.impressions.set_column(
            0, c.impressions.schema.field(0), pa.array([f"{prefix}-{v}" for v in c.impressions.column(0).to_pylist()])
        )
        play = c.playbacks.set_column(
            0, c.playbacks.schema.field(0), pa.array([f"{prefix}-{v}" for v in c.playbacks.column(0).to_pylist()])
        )
        out.append(replace(c, impressions=imp, playbacks=play))
    assert len(out) == n, "the extra generator config yields too few commits"
    return out


def append(ds: Dataset, commit: Commit) -> tuple[int, list[str]]:
    """Write one commit; returns the new impressions snapshot and the ids it appended."""
    assert commit.impressions.num_rows > 0
    imp, play = create_tables(ds.catalog(), ds.generator)
    write_commit(imp, play, commit)
    snap = imp.current_snapshot()
    assert snap is not None
    return snap.snapshot_id, commit.impressions.column("impression_id").to_pylist()


def ms_to_iso(ms: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat()


# --- 1. a running query reads every new snapshot exactly once ---------------------------------


def test_snapshots_appended_under_a_running_query_are_read_exactly_once(
    spark: SparkSession, fresh_dataset: Callable[[float], Dataset], tmp_path: Path
) -> None:
    ds = fresh_dataset(0.5)
    cfg = live_config(ds, tmp_path, startingPosition="earliest", readLimit={"maxSnapshots": 3})
    outputs = frames.outputs_for(spark, cfg, frames.load_pipeline(cfg.pipeline))
    q = start_query(cfg, "copy", outputs["copy"])
    appended: list[str] = []
    try:
        q.processAllAvailable()
        first = spark.read.parquet(str(tmp_path / "out")).count()
        assert first == ds.stats.impressions, "the existing history is read before any new commit"
        for commit in extra_commits(ds, 3):
            _, ids = append(ds, commit)
            appended += ids
            q.processAllAvailable()
        assert q.exception() is None
    finally:
        q.stop()
    assert q.exception() is None
    table_ids = impressions(ds).scan().to_arrow().column("impression_id").to_pylist()
    assert len(table_ids) == ds.stats.impressions + len(appended) and set(appended) <= set(table_ids)
    out_ids = [r[0] for r in spark.read.parquet(str(tmp_path / "out")).select("impression_id").collect()]
    dupes = {k: v for k, v in Counter(out_ids).items() if v > 1}
    assert not dupes, f"rows read more than once: {list(dupes.items())[:5]}"
    assert sorted(out_ids) == sorted(table_ids)


# --- 2. determinism without a Spark query ----------------------------------------------------


@pytest.mark.parametrize("limit", [ALL, ReadMaxFiles(2)], ids=["all-available", "max-files-2"])
def test_live_offsets_replan_identically_in_a_fresh_reader(dataset: Dataset, tmp_path: Path, limit: ReadLimit) -> None:
    cfg = live_config(dataset, tmp_path, startingPosition="earliest", readLimit={"maxSnapshots": 3})
    reader = build_reader(cfg)
    assert isinstance(reader, LiveReader)
    offsets = walk(reader, reader.initialOffset(), limit)
    assert len(offsets) > 3
    restarted = build_reader(cfg)
    seen: list[str] = []
    for start, end in pairwise(offsets):
        for off in (start, end):
            text = json.dumps(off, sort_keys=True)
            assert len(text) < 300, text
            assert json.loads(text) == off
            assert isinstance(off["snapshot_id"], str), "64-bit ids travel as strings"
            assert LiveOffset.from_dict(json.loads(text)).to_dict() == off
        planned = batch_splits(reader, start, end)
        assert planned, f"an offset moved without admitting anything: {start} -> {end}"
        assert batch_splits(restarted, start, end) == planned
        seen += batch_ids(restarted, start, end)
    expected = [i for ids in original_ids_by_snapshot(dataset).values() for i in ids]
    assert len(expected) == dataset.stats.impressions
    assert sorted(seen) == sorted(expected), "the walk must read every row of the history exactly once"


def test_live_max_snapshots_one_advances_exactly_one_snapshot_per_batch(dataset: Dataset, tmp_path: Path) -> None:
    cfg = live_config(dataset, tmp_path, startingPosition="earliest", readLimit={"maxSnapshots": 1})
    reader = build_reader(cfg)
    table = impressions(dataset)
    chain = history(table)
    index = {s: int(table.snapshot_by_id(s).summary.additional_properties[SNAPSHOT_COMMIT_INDEX]) for s in chain}
    offsets = walk(reader, reader.initialOffset())
    per_batch = [sorted(commit_ids_of(batch_rows(reader, a, b))) for a, b in pairwise(offsets)]
    assert per_batch == [[index[s]] for s in chain], (
        f"maxSnapshots 1 must read one commit per batch; commits read per batch: {per_batch[:4]} ..."
    )
    assert [LiveOffset.from_dict(o).snapshot_id for o in offsets[1:]] == chain, (
        "each latestOffset must end on the next snapshot of the history"
    )


@pytest.mark.parametrize("limit", [ALL, ReadMaxFiles(2)], ids=["all-available", "max-files-2"])
def test_backfill_offsets_replan_identically_and_detect_changed_split_settings(
    dataset: Dataset, tmp_path: Path, limit: ReadLimit
) -> None:
    window = {"start": (T0 + timedelta(minutes=20)).isoformat(), "end": (T0 + timedelta(minutes=70)).isoformat()}
    cfg = backfill_config(dataset, tmp_path, window)
    reader = build_reader(cfg)
    assert isinstance(reader, BackfillReader)
    initial = reader.initialOffset()
    offsets = walk(reader, initial, limit)
    assert len(offsets) > 3, "the drift bound (and the file limit) split the window into several batches"
    for off in offsets:
        text = json.dumps(off, sort_keys=True)
        assert len(text) < 300 and json.loads(text) == off
        assert BackfillOffset.from_dict(json.loads(text)).to_dict() == off
    assert {o["snapshot_id"] for o in offsets} == {str(impressions(dataset).current_snapshot().snapshot_id)}
    restarted = build_reader(cfg)
    rows = []
    for start, end in pairwise(offsets):
        planned = batch_splits(reader, start, end)
        flat = [s for part in planned for s in part]
        assert flat, f"an offset moved without admitting anything: {start} -> {end}"
        if isinstance(limit, ReadMaxFiles):
            assert len(flat) == 1 or _files(flat) <= limit.max_files, "the file limit caps a batch"
        assert batch_splits(restarted, start, end) == planned
        rows.append(batch_rows(restarted, start, end))
    got = pa.concat_tables(rows).column("impression_id").to_pylist()
    table = impressions(dataset).scan().to_arrow()
    ts = table.column("event_ts").to_pylist()
    lo, hi = (T0 + timedelta(minutes=20)).replace(tzinfo=None), (T0 + timedelta(minutes=70)).replace(tzinfo=None)
    expected = [i for i, t in zip(table.column("impression_id").to_pylist(), ts, strict=True) if lo <= t < hi]
    assert sorted(got) == sorted(expected)

    changed = build_reader(backfill_config(dataset, tmp_path, window, split={"targetBytes": 1}))
    assert changed.initialOffset()["plan"] != initial["plan"], "precondition: the split settings change the plan"
    for call in (lambda: changed.task_splits(offsets[0], offsets[1]), lambda: changed.latestOffset(offsets[1], ALL)):
        with pytest.raises(PlanChangedError) as err:
            call()
        msg = str(err.value)
        assert "split settings" in msg and "keep them unchanged" in msg and "fresh checkpoint" in msg


# --- 3. starting positions ---------------------------------------------------------------------


def test_starting_positions(fresh_dataset: Callable[[float], Dataset], tmp_path: Path) -> None:
    ds = fresh_dataset(0.5)
    table = impressions(ds)
    chain = history(table)
    snaps = [table.snapshot_by_id(s) for s in chain]
    by_snap = original_ids_by_snapshot(ds)
    assert len(chain) == 7 and set(by_snap) == set(chain)

    def read_all(**source: Any) -> tuple[Any, Offset, list[str]]:
        reader = build_reader(live_config(ds, tmp_path, readLimit={}, **{"startingPosition": None, **source}))
        start = reader.initialOffset()
        offsets = walk(reader, start)
        return reader, offsets[-1], batch_ids(reader, start, offsets[-1])

    def ids_from(k: int) -> list[str]:
        return sorted(i for s in chain[k:] for i in by_snap[s])

    _, _, got = read_all(startingPosition="earliest")
    assert sorted(got) == ids_from(0)
    _, _, got = read_all(startingSnapshotId=chain[2])
    assert sorted(got) == ids_from(2), "startingSnapshotId is inclusive"
    _, _, got = read_all(startingTimestamp=ms_to_iso(snaps[3].timestamp_ms))
    assert sorted(got) == ids_from(3), "startingTimestamp starts at the first snapshot at or after it"
    assert snaps[3].timestamp_ms > snaps[2].timestamp_ms + 1
    _, _, got = read_all(startingTimestamp=ms_to_iso(snaps[2].timestamp_ms + 1))
    assert sorted(got) == ids_from(3)

    latest, latest_end, got = read_all(startingPosition="latest")
    assert got == [], "latest reads nothing that exists when the query starts"
    after_end, after_last_end, got = read_all(startingTimestamp=ms_to_iso(snaps[-1].timestamp_ms + 60_000))
    assert got == []
    default, default_end, got = read_all()
    assert got == [], "no starting position means latest"

    new_sid, new_ids = append(ds, extra_commits(ds, 1)[0])
    for reader, start in ((latest, latest_end), (after_end, after_last_end), (default, default_end)):
        end = reader.latestOffset(start, ALL)
        assert LiveOffset.from_dict(end) == LiveOffset(new_sid, LiveOffset.from_dict(end).position, True)
        assert sorted(batch_ids(reader, start, end)) == sorted(new_ids), "then each new commit is read"

    with pytest.raises(SnapshotExpiredError) as err:
        build_reader(live_config(ds, tmp_path, startingPosition=None, startingSnapshotId=12345)).initialOffset()
    msg = str(err.value)
    assert "startingSnapshotId 12345" in msg and "not in the history" in msg and "demo.impressions" in msg


def test_a_start_before_expired_history_is_refused_not_silently_partial(
    fresh_dataset: Callable[[float], Dataset], tmp_path: Path
) -> None:
    """A table whose writer expires its history (as our sink does): the oldest retained snapshot
    added only its own files; "earliest" from there would never read the rest of the table."""
    ds = fresh_dataset(0.5)
    load = lambda: impressions(ds)  # noqa: E731
    assert len(load().snapshots()) > 4
    expire(load, keep_last=3, min_age=timedelta(0))
    first_kept = min(load().snapshots(), key=lambda s: s.timestamp_ms)
    for source, what in (
        ({"startingPosition": "earliest"}, "startingPosition earliest"),
        ({"startingPosition": None, "startingTimestamp": "2000-01-01T00:00:00Z"}, "startingTimestamp 2000-01-01"),
    ):
        with pytest.raises(SnapshotExpiredError) as err:
            build_reader(live_config(ds, tmp_path / what[:8], **source)).initialOffset()
        msg = str(err.value)
        assert what in msg and str(first_kept.snapshot_id) in msg and "startingPosition: latest" in msg
    # a start inside the retained history, or at the head, is exact as before
    late = ms_to_iso(first_kept.timestamp_ms + 1)
    reader = build_reader(live_config(ds, tmp_path / "late", startingPosition=None, startingTimestamp=late))
    assert LiveOffset.from_dict(reader.initialOffset()).snapshot_id != first_kept.snapshot_id


def test_a_compaction_of_the_table_read_is_skipped_by_a_live_reader(
    spark: SparkSession, fresh_dataset: Callable[[float], Dataset], tmp_path: Path
) -> None:
    """Another table shape than the sink's own: the generator's hour-partitioned, untagged
    files, compacted on the Spark side while a live reader follows the table."""
    ds = fresh_dataset(0.5)
    before = sorted(impressions(ds).scan().to_arrow()["impression_id"].to_pylist())
    files = len(list(impressions(ds).scan().plan_files()))
    reader = build_reader(live_config(ds, tmp_path / "r", startingPosition="latest"))
    start = reader.initialOffset()
    done = compact(spark, lambda: impressions(ds), "main", ds.props, "no-query", 0, 0, 2, 10**9, 10**9)
    assert done is not None and done.files_before > done.files_after >= 1
    table = impressions(ds)
    head = table.current_snapshot()
    assert head is not None and head.summary is not None and head.summary.operation.value == "replace"
    assert sorted(table.scan().to_arrow()["impression_id"].to_pylist()) == before, "same rows, fewer files"
    assert len(list(table.scan().plan_files())) == files - done.files_before + done.files_after
    _, new_ids = append(ds, extra_commits(ds, 1)[0])
    end = reader.latestOffset(start, ALL)
    assert sorted(batch_ids(reader, start, end)) == sorted(new_ids), "the compaction read nothing again"


# --- 4. non-append snapshots --------------------------------------------------------------------


def test_non_append_snapshots_fail_or_are_skipped(fresh_dataset: Callable[[float], Dataset], tmp_path: Path) -> None:
    ds = fresh_dataset(0.5)
    by_snap = original_ids_by_snapshot(ds)
    appends = history(impressions(ds))
    table = impressions(ds)
    table.delete("profile_id = 1")
    table = impressions(ds)
    non_appends = [s for s in history(table) if s not in appends]
    assert non_appends, "precondition: the delete committed a snapshot"
    ops = {s: table.snapshot_by_id(s).summary.operation.value for s in non_appends}
    assert set(ops.values()) <= {"overwrite", "delete"}, ops
    after_sid, after_ids = append(ds, extra_commits(ds, 1)[0])

    failing = build_reader(live_config(ds, tmp_path / "fail", startingPosition="earliest"))
    offsets = [failing.initialOffset()]
    with pytest.raises(NonAppendSnapshotError) as err:
        for _ in range(50):
            offsets.append(failing.latestOffset(offsets[-1], ALL))
    msg = str(err.value)
    assert "onNonAppend: skip" in msg and str(non_appends[0]) in msg and ops[non_appends[0]] in msg
    assert LiveOffset.from_dict(offsets[-1]) == LiveOffset(
        appends[-1], LiveOffset.from_dict(offsets[-1]).position, True
    ), "everything before the non-append snapshot is admitted, nothing after it"

    cfg = live_config(ds, tmp_path / "skip", startingPosition="earliest", onNonAppend="skip")
    skipping = build_reader(cfg)
    offsets = walk(skipping, skipping.initialOffset())
    ends = [LiveOffset.from_dict(o) for o in offsets]
    for sid in non_appends:
        assert LiveOffset(sid, 0, True) in ends, "the skipped snapshot is consumed (the offset moves past it)"
    assert ends[-1].snapshot_id == after_sid and ends[-1].complete
    got = [i for a, b in pairwise(offsets) for i in batch_ids(skipping, a, b)]
    expected = [i for s in appends for i in by_snap[s]] + after_ids
    dupes = [k for k, v in Counter(got).items() if v > 1]
    assert not dupes, f"rewritten files of the {ops} snapshot were read again: {dupes[:5]}"
    assert sorted(got) == sorted(expected)
    skips = read_trace(cfg.trace_path, "skip")  # type: ignore[arg-type]
    assert {(e["snapshot_id"], e["operation"]) for e in skips} == {(str(s), ops[s]) for s in non_appends}
    assert all(e["source"] == "impressions" for e in skips)


# --- 5. expired or rolled-back snapshots under a running query -----------------------------------


def _offset_at(reader: Any, index: int, chain: list[int]) -> list[Offset]:
    """Walk one snapshot at a time until the offset completes ``chain[index]``."""
    offsets = [reader.initialOffset()]
    while True:
        offsets.append(reader.latestOffset(offsets[-1], ALL))
        off = LiveOffset.from_dict(offsets[-1])
        assert off.snapshot_id in chain and offsets[-1] != offsets[-2]
        if chain.index(off.snapshot_id) >= index and off.complete:
            return offsets


def test_expired_snapshot_of_the_offset_raises(fresh_dataset: Callable[[float], Dataset], tmp_path: Path) -> None:
    ds = fresh_dataset(0.5)
    chain = history(impressions(ds))
    cfg = live_config(ds, tmp_path, startingPosition="earliest")
    reader = build_reader(cfg)
    offsets = _offset_at(reader, 3, chain)
    start, end = offsets[-2], offsets[-1]
    sid = LiveOffset.from_dict(end).snapshot_id
    assert sid is not None and sid != chain[-1]
    impressions(ds).maintenance.expire_snapshots().by_id(sid).commit()
    assert impressions(ds).snapshot_by_id(sid) is None

    with pytest.raises(SnapshotExpiredError) as err:
        reader.latestOffset(end, ALL)
    msg = str(err.value)
    assert str(sid) in msg and "no longer exists" in msg and "fresh checkpoint" in msg
    with pytest.raises(SnapshotExpiredError, match=str(sid)):
        build_reader(cfg).latestOffset(end, ALL)
    with pytest.raises(SnapshotExpiredError, match=str(sid)):
        build_reader(cfg).task_splits(start, end)  # a restart replaying the planned batch


def test_expired_unread_snapshot_between_offset_and_head_raises(
    fresh_dataset: Callable[[float], Dataset], tmp_path: Path
) -> None:
    ds = fresh_dataset(0.5)
    chain = history(impressions(ds))
    reader = build_reader(live_config(ds, tmp_path, startingPosition="earliest"))
    end = _offset_at(reader, 2, chain)[-1]
    position = chain.index(LiveOffset.from_dict(end).snapshot_id)
    unread = chain[position + 1]
    assert unread != chain[-1]
    impressions(ds).maintenance.expire_snapshots().by_id(unread).commit()
    with pytest.raises(SnapshotExpiredError) as err:
        reader.latestOffset(end, ALL)
    assert str(LiveOffset.from_dict(end).snapshot_id) in str(err.value) or str(unread) in str(err.value)


def test_rolled_back_snapshot_of_the_offset_raises(fresh_dataset: Callable[[float], Dataset], tmp_path: Path) -> None:
    ds = fresh_dataset(0.5)
    chain = history(impressions(ds))
    cfg = live_config(ds, tmp_path, startingPosition="earliest")
    reader = build_reader(cfg)
    offsets = _offset_at(reader, 4, chain)
    start, end = offsets[-2], offsets[-1]
    sid = LiveOffset.from_dict(end).snapshot_id
    planned = batch_splits(reader, start, end)
    back_to = chain[chain.index(sid) - 1]  # type: ignore[arg-type]
    impressions(ds).manage_snapshots().rollback_to_snapshot(back_to).commit()
    append(ds, extra_commits(ds, 1)[0])  # history goes on from the rolled-back state
    assert sid not in history(impressions(ds)) and impressions(ds).snapshot_by_id(sid) is not None

    with pytest.raises(SnapshotExpiredError) as err:
        reader.latestOffset(end, ALL)
    msg = str(err.value)
    assert str(sid) in msg and "no longer an ancestor" in msg and "fresh checkpoint" in msg

    # A restart replaying the planned batch: either the same splits (the snapshot still exists)
    # or a clear SnapshotExpiredError, never an unrelated error.
    try:
        assert batch_splits(build_reader(cfg), start, end) == planned
    except SnapshotExpiredError as exc:
        assert str(sid) in str(exc)


def test_rolled_back_snapshot_raises_under_available_now(
    fresh_dataset: Callable[[float], Dataset], tmp_path: Path
) -> None:
    """An availableNow run must not silently read nothing when its offset left the history."""
    ds = fresh_dataset(0.5)
    chain = history(impressions(ds))
    cfg = live_config(ds, tmp_path, startingPosition="earliest")
    end = _offset_at(build_reader(cfg), 4, chain)[-1]
    sid = LiveOffset.from_dict(end).snapshot_id
    impressions(ds).manage_snapshots().rollback_to_snapshot(chain[chain.index(sid) - 1]).commit()  # type: ignore[arg-type]
    append(ds, extra_commits(ds, 1)[0])
    restarted = build_reader(cfg)
    restarted.prepareForTriggerAvailableNow()
    with pytest.raises(SnapshotExpiredError, match="no longer an ancestor"):
        restarted.latestOffset(end, ALL)


# --- 6. read limits ----------------------------------------------------------------------------


def _batches(reader: Any, limit: ReadLimit) -> list[list[Split]]:
    offsets = walk(reader, reader.initialOffset(), limit)
    return [[s for part in batch_splits(reader, a, b) for s in part] for a, b in pairwise(offsets)]


def _files(splits: Iterable[Split]) -> int:
    return sum(s.files for s in splits)


def test_read_limits_cap_each_batch_but_always_admit_one_split(dataset: Dataset, tmp_path: Path) -> None:
    one_per_file = live_config(dataset, tmp_path, startingPosition="earliest", readLimit={}, split={"targetBytes": 1})
    total_files = len(impressions(dataset).scan().plan_files())

    batches = _batches(build_reader(one_per_file), ReadMaxFiles(1))
    assert [_files(b) for b in batches] == [1] * total_files

    batches = _batches(build_reader(one_per_file), ReadMaxFiles(3))
    assert all(1 <= _files(b) <= 3 for b in batches)
    assert any(_files(b) > 1 for b in batches), "a file limit admits splits across snapshots"
    assert sum(_files(b) for b in batches) == total_files

    batches = _batches(build_reader(one_per_file), ReadMaxRows(10))
    assert all(len(b) == 1 for b in batches), "a split above the row limit still goes in, alone"
    assert len(batches) == total_files

    batches = _batches(build_reader(one_per_file), ReadMaxRows(600))
    assert all(len(b) >= 1 and (len(b) == 1 or sum(s.rows for s in b) <= 600) for b in batches)
    assert any(len(b) > 1 for b in batches)
    assert sum(s.rows for b in batches for s in b) == dataset.stats.impressions

    bundled = build_reader(live_config(dataset, tmp_path, startingPosition="earliest", readLimit={}))
    assert all(len(b) == 1 for b in _batches(bundled, ReadMaxFiles(1)))

    configured = build_reader(live_config(dataset, tmp_path, readLimit={"maxFiles": 2}))
    assert configured.getDefaultReadLimit() == ReadMaxFiles(2)
    configured = build_reader(live_config(dataset, tmp_path, readLimit={"maxRows": 7}))
    assert configured.getDefaultReadLimit() == ReadMaxRows(7)
