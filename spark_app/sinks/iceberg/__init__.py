"""The exactly-once Iceberg sink: executors write Parquet into the table's data location, the
driver commits one snapshot per micro-batch (``commit``), plus what changes a table's data
after the fact: ``publish`` (a backfill branch's window into main) and ``undo`` (the
batches a query wrote after N, for rewind), and what keeps a long-running table cheap:
``history`` (snapshot expiry) and ``compaction``, both safe for undo through ``batch_tags``."""
