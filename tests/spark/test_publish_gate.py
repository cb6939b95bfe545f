"""Publish and validate are safe by default (local Spark, a real SqlCatalog): a partial branch never
replaces main's rows unless the caller opts out explicitly, and a missing branch says why."""

from __future__ import annotations

import inspect
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType
from pyspark.sql import SparkSession

from kappa_operator.models.backfill import PublishSpec
from spark_app.sinks.iceberg.publish import (
    DEFAULT_MIN_MATCH_RATIO,
    BranchMissingError,
    ValidationFailedError,
    compare,
    publish,
    validate,
)
from spark_app.sinks.iceberg.window import TimeWindow

T0 = datetime(2026, 11, 1, 10, tzinfo=UTC)
WINDOW = TimeWindow("ts", T0, T0 + timedelta(hours=1))
BRANCH = "backfill-x"
KEY = ["id"]


def rows(ids: range, start: datetime, step: timedelta) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([f"r{i}" for i in ids], pa.string()),
            "ts": pa.array([start + step * n for n, _ in enumerate(ids)], pa.timestamp("us", "UTC")),
            "v": pa.array(list(ids), pa.int64()),
        }
    )


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    c = SqlCatalog("default", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    c.create_namespace("ns")
    schema = Schema(
        NestedField(1, "id", StringType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "v", LongType(), required=False),
    )
    t = c.create_table("ns.out", schema)
    # main: 40 rows in the window (one a minute and a half), 10 before it
    t.append(
        pa.concat_tables(
            [
                rows(range(40), T0, timedelta(seconds=90)),
                rows(range(100, 110), T0 - timedelta(hours=2), timedelta(minutes=1)),
            ]
        )
    )
    return c


def props(catalog: SqlCatalog) -> dict[str, str]:
    return dict(catalog.properties)


def load(catalog: SqlCatalog) -> Table:
    return catalog.load_table("ns.out")


def state(table: Table) -> tuple[int | None, list[dict[str, Any]]]:
    snap = table.snapshot_by_name("main")
    data = table.scan(snapshot_id=snap.snapshot_id).to_arrow() if snap else pa.table({})
    return (snap.snapshot_id if snap else None), sorted(data.to_pylist(), key=lambda r: r["id"])


def partial_branch(catalog: SqlCatalog) -> None:
    """A run that ended early: the branch holds the window's first 10 rows only (all correct)."""
    load(catalog).append(rows(range(10), T0, timedelta(seconds=90)), branch=BRANCH)


def test_every_entry_point_defaults_to_the_backfills_min_match_ratio() -> None:
    assert PublishSpec().min_match_ratio == DEFAULT_MIN_MATCH_RATIO == 0.999
    for fn in (publish, validate):
        assert inspect.signature(fn).parameters["min_match_ratio"].default == DEFAULT_MIN_MATCH_RATIO, fn.__name__


def test_publish_with_its_defaults_refuses_a_partial_branch_and_leaves_main_untouched(
    spark: SparkSession, catalog: SqlCatalog
) -> None:
    partial_branch(catalog)
    before = state(load(catalog))
    with pytest.raises(ValidationFailedError) as err:
        publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW, key=KEY)
    assert "0.2500" in str(err.value) and "30 rows only in main" in str(err.value)
    assert "nothing was published" in str(err.value)
    assert state(load(catalog)) == before, "same main snapshot, same rows"
    with pytest.raises(ValidationFailedError):
        validate(spark, load(catalog), props(catalog), BRANCH, WINDOW, KEY)
    with pytest.raises(ValidationFailedError):  # without a key: whole rows, same gate
        publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW)
    assert state(load(catalog)) == before


def test_an_explicit_zero_publishes_whatever_the_match_and_says_so(
    spark: SparkSession, catalog: SqlCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    partial_branch(catalog)
    before_id, _ = state(load(catalog))
    with caplog.at_level(logging.WARNING, logger="kappa.publish"):
        result = publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW, key=KEY, min_match_ratio=0.0)
    assert (result.comparison.match_ratio, result.rows_removed, result.rows_added) == (0.25, 40, 10)
    assert any("min_match_ratio=0.0 (no check)" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    after_id, after_rows = state(load(catalog))
    assert after_id != before_id
    assert [r["id"] for r in after_rows] == sorted([f"r{i}" for i in range(10)] + [f"r{i}" for i in range(100, 110)])


def test_none_is_not_a_silent_opt_out(spark: SparkSession, catalog: SqlCatalog) -> None:
    partial_branch(catalog)
    before = state(load(catalog))
    with pytest.raises(TypeError, match=r"pass 0\.0"):
        publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW, key=KEY, min_match_ratio=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW, key=KEY, min_match_ratio=1.5)
    assert state(load(catalog)) == before


def test_a_missing_branch_says_the_run_emitted_no_row_in_the_window(spark: SparkSession, catalog: SqlCatalog) -> None:
    load(catalog).append(rows(range(3), T0, timedelta(minutes=1)), branch="backfill-other")
    before = state(load(catalog))
    for call in (
        lambda: publish(spark, lambda: load(catalog), props(catalog), BRANCH, WINDOW, key=KEY, min_match_ratio=0.0),
        lambda: validate(spark, load(catalog), props(catalog), BRANCH, WINDOW, KEY, min_match_ratio=0.0),
        lambda: compare(spark, load(catalog), props(catalog), BRANCH, WINDOW, KEY),
    ):
        with pytest.raises(BranchMissingError) as err:
            call()
        message = str(err.value)
        assert "creates the branch with its first commit" in message
        assert message.startswith(f"ns.out: branch {BRANCH!r} does not exist")
        assert "in the window (ts in [2026-11-01T10:00:00+00:00, 2026-11-01T11:00:00+00:00))" in message
        assert "the backfill run emitted no row in the window" in message
        for cause in ("no input data", "warm-up or drain was too short", "ended early"):
            assert cause in message
        assert "Branches of this table: backfill-other, main" in message
        assert "nothing was backfilled" not in message
    assert state(load(catalog)) == before
