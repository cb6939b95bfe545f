"""Where a pipeline's outputs go: Spark's file sinks, or the exactly-once Iceberg sink."""
