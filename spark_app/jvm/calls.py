"""Every py4j call this project makes into Spark's own JVM objects, in one place (the kappa
source's callback, the other way, is ``sources/iceberg/bridge.py``): a Spark upgrade that
renames one of them is found here, and ``tests/unit/project/test_import_rules.py`` keeps it so.

- Spark's analyzed plan of a DataFrame: the plan as text (what the edges, the lateness guard
  and ``auto``'s proof match operators in), the attribute ids of its leaf relations (which
  sources a pipeline's output reads, and in what order Spark asks them for offsets), and its
  event-time watermarks (where a bounded run's results close);
- the Hadoop filesystem Spark wrote a directory with (the Iceberg sink lists and removes its
  own write's files there);
- Spark's listener bus, drained before a run's progress listener is removed;
- the kappa source's Parquet relation over the files a table's manifests named
  (``dev.kappa.source.KnownFiles``: Spark's own index, made without a listing).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.types import StructType

from spark_app.jvm import KNOWN_FILES


def analyzed(df: DataFrame) -> Any:
    """The analyzed plan's root (a JVM ``LogicalPlan``): no data is read, no job runs."""
    return df._jdf.queryExecution().analyzed()


def analyzed_plan(df: DataFrame) -> str:
    """The analyzed plan as Spark prints it (``treeString``)."""
    return str(analyzed(df).toString())


def leaf_ids(df: DataFrame) -> list[set[int]]:
    """Expression ids of each leaf relation of the analyzed plan, in the plan's order (each
    ``load()`` makes a relation with fresh ids, so a frame is found in a plan by its ids)."""
    leaves = analyzed(df).collectLeaves()
    out = []
    for i in range(leaves.size()):
        output = leaves.apply(i).output()
        out.append({int(output.apply(j).exprId().id()) for j in range(output.size())})
    return out


class PlanWatermark(NamedTuple):
    """One ``EventTimeWatermark`` node of an analyzed plan."""

    child: str
    """The plan under it, as text (compared with a source frame's own plan)."""
    column: str
    delay_ms: int


def watermarks(df: DataFrame) -> list[PlanWatermark]:
    """Every event-time watermark in ``df``'s analyzed plan, in a depth-first walk."""
    from py4j.java_gateway import get_field  # CalendarInterval's are public fields, not methods

    found: list[PlanWatermark] = []
    stack = [analyzed(df)]
    while stack:
        node = stack.pop()
        if node.getClass().getSimpleName() == "EventTimeWatermark":
            interval = node.delay()
            days = int(get_field(interval, "months")) * 31 + int(get_field(interval, "days"))  # Spark's getDelayMs
            delay_ms = days * 86_400_000 + int(get_field(interval, "microseconds")) // 1000
            found.append(PlanWatermark(str(node.child().toString()), str(node.eventTime().name()), delay_ms))
        children = node.children()
        stack += [children.apply(i) for i in range(children.size())]
    return found


def hadoop_filesystem(spark: SparkSession, directory: str, options: dict[str, str]) -> tuple[Any, Any]:
    """The Hadoop filesystem Spark writes ``directory`` with (S3A with ``options``), and its path."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    for k, v in options.items():
        conf.set(k, v)
    path = jvm.org.apache.hadoop.fs.Path(directory)
    return path.getFileSystem(conf), path


def wait_for_listener_bus(spark: SparkSession, timeout_ms: int) -> None:
    """Until Spark's listener bus delivered every event posted so far (raises past the timeout)."""
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(timeout_ms)  # type: ignore[union-attr]


def known_files(
    spark: SparkSession, paths: Sequence[str], sizes: Sequence[int], schema_json: str, options: Mapping[str, str]
) -> DataFrame:
    """Spark's Parquet relation over ``paths`` (``sizes`` bytes each), its file index made from
    them in the JVM (``KNOWN_FILES``), read with ``schema_json`` and the Hadoop ``options``."""
    known = functools.reduce(getattr, KNOWN_FILES.split("."), spark._jvm)
    jdf = known.parquet(spark._jsparkSession, list(paths), list(sizes), schema_json, dict(options))
    return ClassicDataFrame(jdf, spark)


def avro_schema(spark: SparkSession, schema: StructType, record: str) -> str:
    """The Avro schema of rows of ``schema``, as Spark's own ``to_avro`` derives it (its
    ``SchemaConverters``: a nullable column is a union with null, a timestamp is
    timestamp-micros): what an Avro Kafka sink registers is exactly what it writes."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    struct = spark._jsparkSession.parseDataType(schema.json())
    converters = jvm.org.apache.spark.sql.avro.SchemaConverters  # a Scala object: its static forwarders
    return str(converters.toAvroType(struct, False, record, "kappa").toString())
