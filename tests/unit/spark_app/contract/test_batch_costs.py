"""Issue 15's per-batch fixed costs that are decisions: state partitions sized to the cores,
and one table load per batch in the Iceberg sink (a conflict still retries on a fresh one)."""

from __future__ import annotations

from typing import Any

from spark_app.apps.session import shuffle_partitions
from spark_app.contract.config import CatalogConfig
from spark_app.contract.sinks import IcebergSink
from spark_app.sinks.iceberg.writer import PAUSE_S, IcebergBatchWriter, paused_batch


def test_state_partitions_follow_the_cores() -> None:
    assert shuffle_partitions(2) == 2
    assert shuffle_partitions(64) == 64
    assert shuffle_partitions(0) == 1, "never zero, whatever Spark reports"


def test_the_first_commit_attempt_reuses_the_batchs_table_and_a_retry_reloads() -> None:
    writer = IcebergBatchWriter(
        "job", "out", IcebergSink(kind="iceberg", table="db.t"), CatalogConfig(type="sql"), "main", "/ckpt"
    )
    fresh: list[Any] = []

    def load() -> Any:
        fresh.append(object())
        return fresh[-1]

    writer.table = load  # type: ignore[method-assign]
    loaded = object()
    attempt = writer.loader(loaded)  # type: ignore[arg-type]
    assert attempt() is loaded and not fresh, "no second metadata read for the first attempt"
    second, third = attempt(), attempt()
    assert second is fresh[0] and third is fresh[1], "after a conflict, the table as it is now"


def test_a_pause_fault_names_its_batch_and_how_long() -> None:
    assert paused_batch("pause-before-commit:1") == (1, PAUSE_S)
    assert paused_batch("pause-before-commit:3:10") == (3, 10.0)
    assert paused_batch("kill-before-commit:1") is None and paused_batch("") is None
