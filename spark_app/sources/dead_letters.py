"""The dead-letter query of an Avro source: the same topic read again, decoded the same way,
keeping only the records that do not decode, as the dead-letter table's rows
(``spark_app.contract.dead_letters``). Spark runs one query per output, so while a job names a
dead-letter table each Avro topic is read and decoded twice: once for the pipeline (without the
dead letters) and once here."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_app.contract.config import JobConfig
from spark_app.contract.dead_letters import COLUMNS
from spark_app.contract.sources import KafkaSource
from spark_app.sources.kafka import decoded_fields, kafka_records, value_schema, without
from spark_app.sources.kafka_avro import MAGIC, avro_decoder


def dead_letter_frame(
    spark: SparkSession, cfg: JobConfig, name: str, src: KafkaSource, starting_offsets: str | None = None
) -> DataFrame:
    """Source ``name``'s records that do not decode, with why (``starting_offsets``: a
    bootstrapped job's topic, from where its archive ended)."""
    decoder = avro_decoder(src, f"sources.{name}", dead_letters=True)
    assert decoder is not None, f"sources.{name} is not Avro: it has no dead letters"
    raw = without(kafka_records(spark, name, src, starting_offsets=starting_offsets), src.skip)
    got = decoder(raw, decoded_fields(value_schema(cfg, src, name=name)))
    assert got.reason is not None and got.new_id is not None
    value = F.col("value")
    wire = (F.length(value) >= 5) & (F.substring(value, 1, 1) == F.lit(bytearray(MAGIC)))
    schema_id = F.when(wire, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10))
    picked = {
        "source": F.lit(name),
        "topic": F.col("topic"),
        "partition": F.col("partition"),
        "offset": F.col("offset"),
        "timestamp": F.col("timestamp"),
        "key": F.col("key"),
        "value": value,
        "schema_id": schema_id,
        "reason": got.reason,
    }
    letters = got.staged.where(got.reason.isNotNull() | got.new_id.isNotNull())
    return letters.select(*(picked[c].cast(kind).alias(c) for c, kind in COLUMNS))
