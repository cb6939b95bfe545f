"""History to live in one query: a job that starts from its Kafka topics' Iceberg archives and
goes on to the topics themselves, where each archive ends (Flink's hybrid source, FLIP-150,
which Spark does not have).

Each source of such a job is the union of two streams in one query and one checkpoint: the
archive, read by the aligned backfill source from ``bootstrap.from`` in event-time order
under ``maxDrift`` (the archives of all sources aligned with each other), and Spark's own
Kafka stream behind a gate (``dev.kappa.source.GatedKafkaSource``), whose first offsets are
where the archive ends: per partition, the newest archived offset plus one (``seam``). The
driver runs the query twice on the same checkpoint (``legs``): first with the gate closed
and ``Trigger.AvailableNow``, batches back to back until every archive is read; then, the
switch recorded (``record``), with the gate open and the job's own trigger. Spark carries the
state, the watermark and every offset across: nothing is read twice, nothing is skipped.
"""
