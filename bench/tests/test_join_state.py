"""What the join-state bench reads from Spark's progress, and the variants it takes."""

from __future__ import annotations

import argparse

import pytest

from bench.join_state import STORES, variant
from bench.source_throughput import batch_stats
from spark_app.contract.config import DEFAULT_BATCH_ROW_BUDGET


def progress(rows: int, updates: int, removals: int, commit: int) -> dict[str, object]:
    operator = {"allUpdatesTimeMs": updates, "allRemovalsTimeMs": removals, "commitTimeMs": commit, "numRowsTotal": 5}
    return {"numInputRows": rows, "durationMs": {"triggerExecution": 10, "addBatch": 8}, "stateOperators": [operator]}


def test_the_state_operators_times_are_summed_over_batches_and_operators() -> None:
    batches = [progress(10, 100, 40, 7), progress(20, 300, 60, 3), progress(0, 0, 5, 1)]
    batches[1]["stateOperators"].append(  # type: ignore[attr-defined]
        {"allUpdatesTimeMs": 1, "allRemovalsTimeMs": 2, "commitTimeMs": 3}
    )
    stats = batch_stats(batches)
    assert (stats["state_update_ms"], stats["state_removal_ms"], stats["state_commit_ms"]) == (401, 107, 14)


def test_a_run_without_state_reports_no_state_time() -> None:
    stats = batch_stats([{"numInputRows": 3, "durationMs": {"triggerExecution": 5, "addBatch": 4}}])
    assert (stats["state_update_ms"], stats["state_removal_ms"], stats["state_commit_ms"]) == (0, 0, 0)


def test_a_variant_names_a_store_and_optionally_a_budget() -> None:
    assert variant("hdfs") == ("hdfs", DEFAULT_BATCH_ROW_BUDGET)
    assert variant("rocksdb_v3:1000000") == ("rocksdb_v3", 1_000_000)
    with pytest.raises(argparse.ArgumentTypeError, match="hdfs, rocksdb, rocksdb_v3"):
        variant("memory")


def test_every_variant_sets_the_provider_and_the_join_format_so_none_leaks_into_the_next() -> None:
    keys = {"spark.sql.streaming.stateStore.providerClass", "spark.sql.streaming.join.stateFormatVersion"}
    assert all(keys <= conf.keys() for conf in STORES.values())
    assert STORES["rocksdb_v3"]["spark.sql.streaming.join.stateFormatVersion"] == "3"
