"""Sources: the Iceberg streaming source (live and backfill) and the Kafka passthrough."""
