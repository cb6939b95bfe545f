"""Read planned splits through the real JVM data path, in one micro-batch.

``OneBatch`` is a planner (the JVM stream calls it through the bridge like any other) whose only
batch is the given splits, packed into tasks exactly as a backfill's are: what a test gets back
is what Spark's Parquet reader, the slice bounds and the source's filters return for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pyspark.sql import Row, SparkSession

from spark_app.planning.read_rate import FileLayout
from spark_app.planning.splits import Split
from spark_app.sources.iceberg.backfill_reader import BackfillReader
from spark_app.sources.iceberg.frame import iceberg_frame
from spark_app.sources.iceberg.spec import SourceSpec


class OneBatch(BackfillReader):
    def __init__(self, spec: SourceSpec, splits: Sequence[Split], layouts: dict[str, FileLayout]) -> None:
        super().__init__(spec)
        self.splits = list(splits)
        self._layouts.update(layouts)

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0}

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"batch": 1}

    def task_splits(self, start: dict[str, Any], end: dict[str, Any]) -> list[list[Split]]:
        return self.packed(self.splits) if start["batch"] == 0 else []

    def later(self, start: dict[str, Any]) -> Callable[[str], list[tuple[int, int]]]:
        return lambda _: []  # one batch: no later read of a file to keep rows for


def read_splits(
    spark: SparkSession, spec: SourceSpec, splits: Sequence[Split], layouts: dict[str, FileLayout], checkpoint: str
) -> list[Row]:
    """The rows the JVM reads for ``splits`` (tasks as ``spec.parallelism`` packs them)."""
    df = iceberg_frame(spark, spec, OneBatch(spec, splits, layouts))
    name = f"jvm_reads_{abs(hash(checkpoint))}"
    q = df.writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint)
    query = q.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
        return spark.table(name).collect()
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
