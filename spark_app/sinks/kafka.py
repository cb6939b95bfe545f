"""The ``foreachBatch`` function of a Kafka sink: at least once, with idempotent keys, and a
log of what each batch produced.

Spark's Kafka writer has no transactions: a batch that Spark replays after a crash is written
again. So each batch's produced offsets are recorded next to Spark's own logs, in
``<checkpoint>/kafka-produced/<batch id>``: the topic's end offsets before the write (the
intent, recorded first) and after it. A replayed batch whose record is complete is not
written again. Only a driver killed between the write and its record leaves a batch twice in
the topic, under the same keys: a consumer keeping the last record per key sees each row
once, and the record says which offsets the second write started at.

The log is what a cascade Rewind needs: the restored batch N's record says where N's output
ends in the topic; every record after that, up to the topic's end once the job is stopped,
is the output being undone, which the downstream job must skip (``sources.<name>.skip``).
The log is kept with the checkpoint's batches (a snapshot of batch N holds the records up to
N; ``contract.checkpoints.layout.PRODUCED``), so a restored checkpoint still knows it.

The topic is this sink's alone: records another producer writes in between would be counted
as this sink's output.
"""

from __future__ import annotations

import logging
import re

from pydantic import BaseModel, ConfigDict
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from spark_app.contract.checkpoints.kafka_offsets import end_offsets
from spark_app.contract.checkpoints.layout import PRODUCED
from spark_app.contract.kafka_reach import reach
from spark_app.contract.kafka_security import spark_options
from spark_app.contract.schema_registry import register
from spark_app.contract.sinks import KafkaSink
from spark_app.contract.storage import Location, open_location
from spark_app.contract.trace import trace
from spark_app.jvm.calls import avro_schema
from spark_app.sinks.iceberg.writer import checkpoint_query_id

log = logging.getLogger("kappa.sink")

RETAIN = 1000
"""Records kept in the live checkpoint (snapshots keep their own): Spark keeps ~100 batches."""

MICROS_JSON = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
"""Values keep microseconds (Spark's default JSON timestamp format writes milliseconds)."""

QUERY_HEADER, BATCH_HEADER = "kappa.query", "kappa.batch"


class Produced(BaseModel):
    """One batch's output in the topic: per partition, ``[start, end)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    batch_id: int
    query_id: str
    topic: str
    start: dict[int, int]
    """The topic's end offsets before the write (a partition absent: it did not exist, 0)."""
    end: dict[int, int] | None = None
    """After the write; None: the write started and was not recorded done (it may have landed)."""
    again_from: dict[int, int] | None = None
    """Set when an earlier attempt of this batch started and was not recorded done: this
    attempt's start (what the earlier attempt may have written lies in ``[start, again_from)``)."""


def entry_name(batch_id: int) -> str:
    return f"{PRODUCED}/{batch_id}"


def read_produced(checkpoint: Location, batch_id: int) -> Produced | None:
    name = entry_name(batch_id)
    if checkpoint.stat(name) is None:
        return None
    return Produced.model_validate_json(checkpoint.read_bytes(name))


def _record(checkpoint: Location, entry: Produced) -> None:
    checkpoint.write_bytes(entry_name(entry.batch_id), entry.model_dump_json().encode())


def records(
    df: DataFrame,
    sink: KafkaSink,
    query_id: str,
    batch_id: int,
    avro: tuple[int, str] | None = None,
    avro_key: tuple[int, str] | None = None,
) -> DataFrame:
    """Rows as Kafka records: key = the ``key`` columns, value = the row, both JSON (each in
    the registry's wire format when ``avro``/``avro_key`` give the registered id and schema);
    headers name the query and batch (what a consumer dedupes by, what an operator traces)."""
    headers: list[Column] = [
        F.struct(F.lit(QUERY_HEADER).alias("key"), F.lit(query_id).cast("binary").alias("value")),
        F.struct(F.lit(BATCH_HEADER).alias("key"), F.lit(str(batch_id)).cast("binary").alias("value")),
    ]
    return df.select(
        wire_or_json(F.struct(*(F.col(c) for c in sink.key)), avro_key).alias("key"),
        value_of(df, avro).alias("value"),
        F.array(*headers).alias("headers"),
    )


def value_of(df: DataFrame, avro: tuple[int, str] | None) -> Column:
    return wire_or_json(F.struct(*(F.col(c) for c in df.columns)), avro)


def wire_or_json(row: Column, avro: tuple[int, str] | None) -> Column:
    """``row`` as JSON, or in the registry's wire format with the registered ``(id, schema)``."""
    if avro is None:
        return F.to_json(row, MICROS_JSON)
    schema_id, schema = avro
    header = F.lit(bytearray(b"\x00" + schema_id.to_bytes(4, "big")))
    return F.concat(header, to_avro(row, schema))


class KafkaBatchWriter:
    def __init__(self, sink_name: str, sink: KafkaSink, checkpoint: str, trace_path: str | None = None) -> None:
        self.sink_name, self.sink, self.checkpoint, self.trace_path = sink_name, sink, checkpoint, trace_path
        self._query_id: str | None = None
        self._avro: tuple[int, str] | None = None
        self._avro_key: tuple[int, str] | None = None
        if sink.security is not None and sink.security.protocol != "PLAINTEXT":
            reach(sink.bootstrap_servers, sink.security, f"sinks.{sink_name}")  # before the query, in one line

    def registered(self, df: DataFrame) -> tuple[int, str] | None:
        """An Avro sink's schema, registered once per query (the registry answers the same
        schema again with its id): the id its values name."""
        registry = self.sink.registry
        if registry is None:
            return None
        if self._avro is None:
            record = re.sub(r"\W", "_", self.sink_name) or "record"
            record = record if not record[0].isdigit() else f"_{record}"
            where = f"sinks.{self.sink_name}"
            schema = avro_schema(df.sparkSession, df.schema, record)
            self._avro = (register(registry, registry.subject, schema, where), schema)
            if registry.key_subject is not None:  # the key columns' own record, under <topic>-key
                key_schema = avro_schema(df.sparkSession, df.select(*self.sink.key).schema, f"{record}_key")
                self._avro_key = (register(registry, registry.key_subject, key_schema, where), key_schema)
        return self._avro

    @property
    def query_id(self) -> str:
        if self._query_id is None:
            self._query_id = checkpoint_query_id(self.checkpoint)
        return self._query_id

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        sink, ckpt = self.sink, open_location(self.checkpoint)
        earlier = read_produced(ckpt, batch_id)
        if earlier is not None and earlier.end is not None:
            trace(self.trace_path, "kafka-produce", sink=self.sink_name, batch=batch_id, skipped=True)
            log.info("batch %d of %s already in %s: not written again", batch_id, self.sink_name, sink.topic)
            return
        now = end_offsets(sink.bootstrap_servers, sink.topic, sink.security)
        if earlier is None:
            entry = Produced(batch_id=batch_id, query_id=self.query_id, topic=sink.topic, start=now)
        else:
            log.warning(
                "batch %d of %s: an earlier attempt may have written %s from %s: written again from %s",
                batch_id, self.sink_name, sink.topic, earlier.start, now,
            )  # fmt: skip
            entry = earlier.model_copy(update={"again_from": now})
        _record(ckpt, entry)  # the intent, before anything lands in the topic
        (
            records(df, sink, self.query_id, batch_id, self.registered(df), self._avro_key)
            .write.format("kafka")
            .option("kafka.bootstrap.servers", sink.bootstrap_servers)
            .option("topic", sink.topic)
            .options(**sink.options)
            .options(**spark_options(sink.security))
            .save()
        )
        done = entry.model_copy(update={"end": end_offsets(sink.bootstrap_servers, sink.topic, sink.security)})
        _record(ckpt, done)
        ckpt.delete(entry_name(batch_id - RETAIN))
        written = sum(done.end.get(p, 0) - (entry.again_from or entry.start).get(p, 0) for p in done.end or {})
        trace(self.trace_path, "kafka-produce", sink=self.sink_name, batch=batch_id, skipped=False, records=written)
