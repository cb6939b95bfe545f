"""The Iceberg streaming source: live incremental appends and aligned backfill of history."""
