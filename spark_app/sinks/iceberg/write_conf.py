"""What the Iceberg sink's files need of the Spark session, set when it starts
(``apps.session``): a module of its own, without pyiceberg, so that the driver starts its
session before it imports the sink (issue 58: the executors are asked for sooner)."""

SESSION_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # A task writing into a few partitions (an hour-partitioned sink: a batch spans few hours)
    # keeps a writer open per partition instead of sorting its rows by partition first: 28.2 s
    # instead of 30.3 s for a bounded run's write at the dense profile (bench/RESULTS.md). Past
    # 8 partitions in a task Spark falls back to the sort.
    "spark.sql.maxConcurrentOutputFileWriters": "8",
}
