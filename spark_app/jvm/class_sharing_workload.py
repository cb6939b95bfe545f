"""What a class-data-sharing archive of Spark's classes is dumped from: the Spark image's
(images/spark/Dockerfile) and a machine's for local sessions (``spark_app.jvm.class_sharing``).

Why: a Spark JVM spends most of its start loading and verifying classes (Spark's, Hadoop's,
Parquet's, Netty's). An archive of the classes a job loads, mapped at start instead of read
from the jars, roughly halves a driver's start and its first queries on 2 cores (measured in
bench/RESULTS.md). The JVM writes it at exit (``-XX:ArchiveClassesAtExit``) with the classes
this run loaded, so the run does what drivers and executors do: a session, Parquet written
and read, a shuffle, a join, a Python UDF over Arrow, and a stateful streaming query with a
watermark and checkpoint. Classes it does not load are read from the jars as before.
"""

from __future__ import annotations

import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    spark = SparkSession.builder.appName("cds-workload").config("spark.ui.enabled", "false").getOrCreate()
    with tempfile.TemporaryDirectory() as tmp:
        rows = spark.range(20_000).select(
            F.col("id"),
            (F.col("id") % 17).alias("k"),
            F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("ts"),
        )
        rows.write.mode("overwrite").parquet(f"{tmp}/rows")
        back = spark.read.parquet(f"{tmp}/rows")
        counts = back.groupBy("k").agg(F.count("*").alias("n"), F.max("ts").alias("last"))
        joined = back.join(counts, "k").where(F.col("n") > 0)

        @F.pandas_udf("long")
        def doubled(v):  # type: ignore[no-untyped-def]
            return v * 2

        assert joined.select(doubled("id")).count() == 20_000

        stream = (
            spark.readStream.schema(back.schema)
            .parquet(f"{tmp}/rows")
            .withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "2 seconds"))
            .count()
        )
        query = (
            stream.writeStream.outputMode("append")
            .format("parquet")
            .option("path", f"{tmp}/windows")
            .option("checkpointLocation", f"{tmp}/checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert spark.read.parquet(f"{tmp}/windows").count() > 0
    spark.stop()


if __name__ == "__main__":
    main()
