"""Tests for the synthetic Iceberg data generator (spark_app.examples.generator).

The generator is the ground truth for the backfill tests and the demo, so these tests check the
properties those rely on: determinism, skew, lateness bounds, one snapshot per ingestion commit,
attribution, stats that match the tables, and files whose event-time ranges overlap.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.conversions import from_bytes
from pyiceberg.transforms import HourTransform
from pyiceberg.types import TimestampType

from spark_app.examples.event_tables import IMPRESSIONS_ARROW_SCHEMA, PLAYBACKS_ARROW_SCHEMA
from spark_app.examples.generator import (
    ATTRIBUTED_FRACTION,
    LATE_THRESHOLD,
    SNAPSHOT_COMMIT_INDEX,
    Commit,
    GeneratedStats,
    GeneratorConfig,
    create_tables,
    generate,
    iter_commits,
    write_commit,
)

# 12:45 so the half hour crosses an hour boundary: some commits then write two hour partitions.
START = datetime(2026, 3, 1, 12, 45, tzinfo=UTC)
TEN_MIN = timedelta(minutes=10)


def small_cfg(**overrides: object) -> GeneratorConfig:
    base = GeneratorConfig(start=START, hours=0.5, impressions_per_hour=2000, commit_interval=TEN_MIN)
    return replace(base, **overrides)


def make_catalog(tmp: Path) -> SqlCatalog:
    return SqlCatalog("local", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")


def all_rows(cfg: GeneratorConfig) -> tuple[pa.Table, pa.Table]:
    commits = list(iter_commits(cfg))
    return (
        pa.concat_tables([c.impressions for c in commits]),
        pa.concat_tables([c.playbacks for c in commits]),
    )


def delays_us(table: pa.Table) -> np.ndarray:
    ingestion = table.column("__metadata__").combine_chunks().field("ingestion_ts").to_numpy()
    event = table.column("event_ts").to_numpy()
    return (ingestion - event).astype("timedelta64[us]").astype(np.int64)


def utc(naive: datetime) -> datetime:
    return naive.replace(tzinfo=UTC)


# --- pure generation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        {"start": datetime(2026, 3, 1)},  # naive: ambiguous, Iceberg timestamps are UTC
        {"max_lateness": timedelta(seconds=30)},  # below the late/on-time threshold
        {"late_fraction": 1.5},
        {"hours": 0.0},
        {"skew": 0.0},
    ],
)
def test_invalid_config_is_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        small_cfg(**overrides)


def test_iter_commits_is_deterministic_for_a_seed() -> None:
    first = list(iter_commits(small_cfg(seed=11)))
    again = list(iter_commits(small_cfg(seed=11)))
    other = list(iter_commits(small_cfg(seed=12)))

    assert [c.index for c in first] == [c.index for c in again]
    for a, b in zip(first, again, strict=True):
        assert a.ingestion_end == b.ingestion_end
        assert a.impressions.equals(b.impressions)
        assert a.playbacks.equals(b.playbacks)
    imp_first = pa.concat_tables([c.impressions for c in first])
    imp_other = pa.concat_tables([c.impressions for c in other])
    assert not imp_first.equals(imp_other)


def test_commits_hold_exactly_their_ingestion_interval_sorted_by_ingestion() -> None:
    cfg = small_cfg(late_fraction=0.1)
    commits = list(iter_commits(cfg))

    indexes = [c.index for c in commits]
    assert indexes == sorted(set(indexes))
    # Late arrivals spill past the end of event time into tail commits.
    assert commits[-1].ingestion_end > cfg.end
    for c in commits:
        assert c.impressions.schema == IMPRESSIONS_ARROW_SCHEMA
        assert c.playbacks.schema == PLAYBACKS_ARROW_SCHEMA
        assert c.impressions.num_rows + c.playbacks.num_rows > 0
        assert c.ingestion_end == cfg.start + cfg.commit_interval * (c.index + 1)
        lo = (c.ingestion_end - cfg.commit_interval).replace(tzinfo=None)
        hi = c.ingestion_end.replace(tzinfo=None)
        for table in (c.impressions, c.playbacks):
            meta = table.column("__metadata__").combine_chunks()
            ingestion = meta.field("ingestion_ts").to_pylist()
            assert set(meta.field("commit_id").to_pylist()) <= {c.index}
            assert ingestion == sorted(ingestion)
            assert all(lo <= ts < hi for ts in ingestion)


def test_ids_are_unique_and_counts_follow_config() -> None:
    cfg = small_cfg()
    impressions, playbacks = all_rows(cfg)
    assert impressions.num_rows == 1000
    ids = impressions.column("impression_id").to_pylist()
    assert sorted(ids) == sorted(f"imp-{i}" for i in range(1000))
    play_ids = playbacks.column("playback_id").to_pylist()
    assert len(set(play_ids)) == len(play_ids) == playbacks.num_rows
    assert all(30 <= d <= 7200 for d in playbacks.column("duration_s").to_pylist())
    for table in (impressions, playbacks):
        event = table.column("event_ts").to_pylist()
        assert min(event) >= START.replace(tzinfo=None)
        assert max(event) < cfg.end.replace(tzinfo=None)


@pytest.mark.parametrize("skew", [4.0, 2.5])
def test_impressions_outnumber_playbacks_by_skew(skew: float) -> None:
    impressions, playbacks = all_rows(small_cfg(skew=skew))
    assert impressions.num_rows / playbacks.num_rows == pytest.approx(skew, rel=0.02)


def test_late_fraction_and_lateness_bounds() -> None:
    cfg = small_cfg(impressions_per_hour=20000, late_fraction=0.1, max_lateness=timedelta(minutes=7))
    delays = np.concatenate([delays_us(t) for t in all_rows(cfg)])
    late = delays >= LATE_THRESHOLD // timedelta(microseconds=1)

    assert late.mean() == pytest.approx(0.1, abs=0.015)
    assert delays.min() >= 0
    assert delays[late].max() <= 7 * 60 * 1_000_000
    on_time = delays[~late]
    assert on_time.max() < 60 * 1_000_000
    assert on_time.mean() == pytest.approx(5_000_000, rel=0.1)  # exponential, mean 5 s

    none_late = np.concatenate([delays_us(t) for t in all_rows(small_cfg(late_fraction=0.0))])
    assert none_late.max() < 60 * 1_000_000


def test_attributed_playbacks_follow_a_matching_impression_within_the_window() -> None:
    cfg = small_cfg()
    impressions, playbacks = all_rows(cfg)
    imps = impressions.select(["profile_id", "title_id", "event_ts"]).to_pandas()
    plays = playbacks.select(["playback_id", "profile_id", "title_id", "event_ts"]).to_pandas()
    pairs = plays.merge(imps, on=["profile_id", "title_id"], suffixes=("_play", "_imp"))
    lag = pairs["event_ts_play"] - pairs["event_ts_imp"]
    in_window = pairs[(lag >= pd.Timedelta(0)) & (lag <= pd.Timedelta(cfg.attribution_window))]
    matched = set(in_window["playback_id"])

    # Attributed playbacks are generated first: play-0 .. play-(n_attr - 1).
    n_attr = round(playbacks.num_rows * ATTRIBUTED_FRACTION)
    assert {f"play-{i}" for i in range(n_attr)} <= matched
    # Organic ones match only by chance (200 profiles x 300 titles): the share stays near 80 %.
    assert len(matched) / playbacks.num_rows == pytest.approx(ATTRIBUTED_FRACTION, abs=0.03)


# --- writing to Iceberg ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[SqlCatalog, GeneratorConfig, GeneratedStats]:
    catalog = make_catalog(tmp_path_factory.mktemp("generated"))
    cfg = small_cfg(late_fraction=0.05)
    calls: list[tuple[int, int]] = []
    stats = generate(catalog, cfg, progress=lambda done, total: calls.append((done, total)))
    total = len(list(iter_commits(cfg)))
    assert calls == [(i, total) for i in range(1, total + 1)]
    return catalog, cfg, stats


def test_one_snapshot_per_non_empty_table_per_commit_in_ingestion_order(
    generated: tuple[SqlCatalog, GeneratorConfig, GeneratedStats],
) -> None:
    catalog, cfg, _ = generated
    commits = list(iter_commits(cfg))
    for name, attr in ((cfg.impressions_table, "impressions"), (cfg.playbacks_table, "playbacks")):
        table = catalog.load_table(name)
        batches = {c.index: getattr(c, attr) for c in commits if getattr(c, attr).num_rows}
        snapshots = table.snapshots()

        assert [int(s.summary[SNAPSHOT_COMMIT_INDEX]) for s in snapshots] == sorted(batches)
        seqs = [s.sequence_number for s in snapshots]
        assert seqs == sorted(set(seqs))
        assert [s.timestamp_ms for s in snapshots] == sorted(s.timestamp_ms for s in snapshots)
        seen = 0
        for snapshot in snapshots:
            index = int(snapshot.summary[SNAPSHOT_COMMIT_INDEX])
            assert snapshot.summary.operation.value == "append"
            assert int(snapshot.summary["added-records"]) == batches[index].num_rows
            rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
            seen += batches[index].num_rows
            assert rows.num_rows == seen
            commit_ids = rows.column("__metadata__").combine_chunks().field("commit_id").to_numpy()
            assert commit_ids.max() == index  # nothing from a later ingestion window yet


def test_stats_match_a_full_scan(generated: tuple[SqlCatalog, GeneratorConfig, GeneratedStats]) -> None:
    catalog, cfg, stats = generated
    impressions = catalog.load_table(cfg.impressions_table)
    playbacks = catalog.load_table(cfg.playbacks_table)
    imp_rows = impressions.scan().to_arrow()
    play_rows = playbacks.scan().to_arrow()

    assert stats.impressions == imp_rows.num_rows == 1000
    assert stats.playbacks == play_rows.num_rows == 250
    both = [imp_rows, play_rows]
    events = [ts for t in both for ts in t.column("event_ts").to_pylist()]
    assert stats.first_event == utc(min(events))
    assert stats.last_event == utc(max(events))
    delays = np.concatenate([delays_us(t) for t in both])
    assert stats.late_events == int((delays >= 60_000_000).sum()) > 0
    frames = [
        pd.DataFrame(
            {
                "commit": t.column("__metadata__").combine_chunks().field("commit_id").to_numpy(),
                "event": t.column("event_ts").to_numpy(),
            }
        )
        for t in both
    ]
    assert stats.commits == len(set().union(*(set(f["commit"]) for f in frames)))

    # One data file per (commit, touched hour): recompute each file's span from the rows.
    spans = []
    n_groups = 0
    for frame in frames:
        grouped = frame.groupby(["commit", frame["event"].dt.floor("h")])["event"]
        spans.extend((grouped.max() - grouped.min()).dt.total_seconds())
        n_groups += grouped.ngroups
    n_files = sum(len(list(t.scan().plan_files())) for t in (impressions, playbacks))
    assert n_files == n_groups
    assert stats.max_file_span_s == pytest.approx(max(spans), abs=1e-6)


def test_files_event_time_ranges_overlap_across_commits(
    generated: tuple[SqlCatalog, GeneratorConfig, GeneratedStats],
) -> None:
    catalog, cfg, _ = generated
    table = catalog.load_table(cfg.impressions_table)
    ts_id = table.schema().find_field("event_ts").field_id
    # pyiceberg keeps no bounds for nested fields (__metadata__.commit_id): map each file to its
    # commit through the snapshot that added it instead.
    commit_of_snapshot = {s.snapshot_id: int(s.summary[SNAPSHOT_COMMIT_INDEX]) for s in table.snapshots()}
    entries = table.inspect.entries()
    paths = entries.column("data_file").combine_chunks().field("file_path").to_pylist()
    commit_of_file = {
        path: commit_of_snapshot[snapshot_id]
        for path, snapshot_id in zip(paths, entries.column("snapshot_id").to_pylist(), strict=True)
    }
    files = []
    for task in table.scan().plan_files():
        f = task.file
        lo = from_bytes(TimestampType(), f.lower_bounds[ts_id])
        hi = from_bytes(TimestampType(), f.upper_bounds[ts_id])
        files.append((commit_of_file[f.file_path], lo, hi))

    # Some commit crossed the 13:00 boundary and wrote one file per hour partition.
    per_commit = [c for c, _, _ in files]
    assert max(per_commit.count(c) for c in set(per_commit)) == 2
    overlapping = [
        (a, b) for i, a in enumerate(files) for b in files[i + 1 :] if a[0] != b[0] and a[1] <= b[2] and b[1] <= a[2]
    ]
    assert overlapping


def test_create_tables_is_idempotent_and_hour_partitioned(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    cfg = small_cfg(namespace="ns")
    impressions, playbacks = create_tables(catalog, cfg)
    first = next(iter_commits(cfg))
    write_commit(impressions, playbacks, first)

    again_imp, again_play = create_tables(catalog, cfg)
    assert again_imp.name() == ("ns", "impressions")
    assert again_play.name() == ("ns", "playbacks")
    assert len(again_imp.snapshots()) == 1  # loaded, not recreated
    for table, arrow_schema in ((again_imp, IMPRESSIONS_ARROW_SCHEMA), (again_play, PLAYBACKS_ARROW_SCHEMA)):
        schema = table.schema()
        assert [f.name for f in schema.fields] == arrow_schema.names
        assert all(f.required for f in schema.fields)
        (field,) = table.spec().fields
        assert isinstance(field.transform, HourTransform)
        assert field.source_id == schema.find_field("event_ts").field_id
        assert table.scan().to_arrow().schema.equals(arrow_schema)


def test_write_commit_skips_an_empty_table(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    cfg = small_cfg()
    impressions, playbacks = create_tables(catalog, cfg)
    commit = next(iter_commits(cfg))
    only_impressions = Commit(
        index=commit.index,
        ingestion_end=commit.ingestion_end,
        impressions=commit.impressions,
        playbacks=commit.playbacks.slice(0, 0),
    )
    write_commit(impressions, playbacks, only_impressions)
    assert len(impressions.snapshots()) == 1
    assert playbacks.snapshots() == []
