"""An Avro topic in the schema registry's wire format, read by a job's Kafka source from the real
broker and decoded with the schemas of a real registry (Apicurio, Confluent's API): each record
with the schema its id names, a version registered while the query runs read without a restart of
the job, and each record that cannot be decoded stopping the query at its offset, said in one
line (no Java trace), with nothing from it on written."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.sql import SparkSession

from kappa_operator.local.kafka import KafkaBroker
from kappa_operator.local.schema_registry import SchemaRegistry
from spark_app.apps.run import run
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.schema_registry import RegistryUnavailableError
from spark_app.sources.kafka_avro import LEARNED, UndecodableRecordError, UnknownSchemaIdError

pytestmark = pytest.mark.spark

V1 = {
    "type": "record",
    "name": "Impression",
    "namespace": "kappa.test",
    "fields": [{"name": "impression_id", "type": "string"}, {"name": "user_id", "type": "long"}],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "country", "type": "string", "default": "unknown"}]}
"""v1 and a field with a default: BACKWARD compatible."""
COLUMNS = "impression_id STRING, user_id BIGINT, country STRING"


def topic_of(broker: KafkaBroker) -> str:
    name = f"avro-{uuid.uuid4().hex[:8]}"
    broker.create_topic(name)
    return name


def produce(
    broker: KafkaBroker,
    registry: SchemaRegistry,
    topic: str,
    schema: dict[str, Any],
    rows: list[dict[str, Any]],
    **conf: Any,
) -> None:
    """``rows`` as a producer's serializer writes them (registering ``schema`` as it does)."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), json.dumps(schema), conf=conf or None)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for row in rows:
        producer.produce(topic, value=serializer(row, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def produce_raw(broker: KafkaBroker, topic: str, *values: bytes) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def config(topic: str, registry_url: str, out: Path, **more: Any) -> JobConfig:
    return parse_config(
        {
            "name": f"avro-{uuid.uuid4().hex[:6]}",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "impressions": {
                    "kind": "kafka",
                    "bootstrapServers": more.pop("bootstrap"),
                    "topic": topic,
                    "schemaDdl": COLUMNS,
                    "valueFormat": "avro",
                    "registry": {"url": registry_url, "subjects": [f"{topic}-value"]},
                    "options": {"startingOffsets": "earliest", **more.pop("options", {})},
                }
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(out / "rows")}},
            "checkpoint": {"location": str(out / "ck")},
            "trigger": more.pop("trigger", {"kind": "availableNow"}),
        }
    )


def rows_in(spark: SparkSession, out: Path) -> dict[str, tuple[int, str | None]]:
    if not (out / "rows" / "_spark_metadata").exists():
        return {}
    found = spark.read.schema(COLUMNS).parquet(str(out / "rows")).collect()
    return {r["impression_id"]: (r["user_id"], r["country"]) for r in found}


def v1_rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"impression_id": f"i{i}", "user_id": i} for i in range(start, start + n)]


def v2_rows(start: int, n: int) -> list[dict[str, Any]]:
    return [{"impression_id": f"i{i}", "user_id": i, "country": f"c{i}"} for i in range(start, start + n)]


def test_each_record_decodes_with_the_schema_its_id_names_and_an_id_met_mid_run_is_learned_in_process(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """v1 records under the topic's subject, then v2 records registered under another subject
    (RecordNameStrategy): the query knows only the topic's subject when it starts, meets v2's
    id, and is started again in the same driver with it, from its checkpoint."""
    topic = topic_of(kafka_broker)
    produce(kafka_broker, schema_registry, topic, V1, v1_rows(0, 5))
    from confluent_kafka.schema_registry import record_subject_name_strategy

    produce(
        kafka_broker,
        schema_registry,
        topic,
        V2,
        v2_rows(5, 5),
        **{"subject.name.strategy": record_subject_name_strategy},
    )

    run(config(topic, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap), spark)

    got = rows_in(spark, tmp_path)
    assert got == {
        **{f"i{i}": (i, None) for i in range(5)},  # v1 knows no country; the topic's newest (v1) has no default
        **{f"i{i}": (i, f"c{i}") for i in range(5, 10)},
    }
    assert len(LEARNED.ids) == 1, "v2's id learned once, by id"


def test_a_compatible_version_registered_while_the_job_runs_is_read_without_a_restart_of_the_job(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """Schema evolution: v1 records, then (the job running) v2 registered with a field added
    with a default, v2 records, and v1 records of a producer not yet upgraded: every record in
    the sink; the v1 records read once v2 exists take its default. (Those read before v2
    existed were written with the field null: no version then declared it.)"""
    topic = topic_of(kafka_broker)
    produce(kafka_broker, schema_registry, topic, V1, v1_rows(0, 5))
    cfg = config(
        topic,
        schema_registry.url,
        tmp_path,
        bootstrap=kafka_broker.bootstrap,
        trigger={"kind": "processingTime", "interval": "1s"},
    )

    def evolve() -> None:
        deadline = time.monotonic() + 90
        while len(rows_in(spark, tmp_path)) < 5 and time.monotonic() < deadline:
            time.sleep(0.5)
        produce(kafka_broker, schema_registry, topic, V2, v2_rows(5, 5))
        produce(kafka_broker, schema_registry, topic, V1, v1_rows(10, 5))

    evolving = threading.Thread(target=evolve)
    evolving.start()
    run(cfg, spark, timeout=60)
    evolving.join()

    got = rows_in(spark, tmp_path)
    assert got == (
        {f"i{i}": (i, None) for i in range(5)}
        | {f"i{i}": (i, f"c{i}") for i in range(5, 10)}
        | {f"i{i}": (i, "unknown") for i in range(10, 15)}
    ), got


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("not the wire format", "is not in the schema registry's wire format"),
        ("does not decode", "does not decode with schema id"),
        ("an id the registry does not have", "names schema id 99999, which the schema registry does not have"),
    ],
)
def test_a_record_that_cannot_be_decoded_stops_the_query_at_its_offset_in_one_line(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path: Path,
    case: str,
    said: str,
) -> None:
    topic = topic_of(kafka_broker)
    produce(kafka_broker, schema_registry, topic, V1, v1_rows(0, 3))
    v1_id = SchemaRegistryClient({"url": schema_registry.url}).get_latest_version(f"{topic}-value").schema_id
    bad = {
        "not the wire format": b'{"impression_id": "json"}',
        "does not decode": b"\x00" + v1_id.to_bytes(4, "big") + b"\xff\xff\xff",
        "an id the registry does not have": b"\x00" + (99999).to_bytes(4, "big") + b"\x02a\x02",
    }[case]
    produce_raw(kafka_broker, topic, bad)
    produce(kafka_broker, schema_registry, topic, V1, v1_rows(4, 3))
    cfg = config(
        topic, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap, options={"maxOffsetsPerTrigger": "3"}
    )

    with pytest.raises((UndecodableRecordError, UnknownSchemaIdError)) as failed:
        run(cfg, spark)

    line = str(failed.value)
    assert line.startswith(f"sources.impressions: the record at {topic}[0] offset 3 "), line
    assert said in line and "\n" not in line and "org.apache" not in line, line
    assert set(rows_in(spark, tmp_path)) == {"i0", "i1", "i2"}, "nothing from the record on"


def test_a_registry_that_does_not_answer_is_retried_then_said_naming_it(
    spark: SparkSession, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    down = SchemaRegistry.start(tmp_path / "registry")
    url = down.url
    down.stop()
    topic = topic_of(kafka_broker)
    with pytest.raises(RegistryUnavailableError) as failed:
        run(config(topic, url, tmp_path, bootstrap=kafka_broker.bootstrap), spark)
    line = str(failed.value)
    assert line.startswith(f"sources.impressions: the schema registry at {url} did not answer after 4 tries"), line
    assert failed.value.restartable


def test_the_kafka_sink_writes_the_wire_format_registering_its_schema(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """Avro in, Avro out: the sink registers its output's schema under ``<topic>-value`` and
    every value names it; Confluent's deserializer reads them back with the registry alone."""
    from confluent_kafka import Consumer
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    source, sink = topic_of(kafka_broker), topic_of(kafka_broker)
    produce(kafka_broker, schema_registry, source, V2, v2_rows(0, 6))
    raw = config(source, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    raw["sinks"] = {
        "copy": {
            "kind": "kafka",
            "bootstrapServers": kafka_broker.bootstrap,
            "topic": sink,
            "key": ["impression_id"],
            "valueFormat": "avro",
            "registry": {"url": schema_registry.url, "subject": f"{sink}-value"},
        }
    }
    run(parse_config(raw), spark)

    client = SchemaRegistryClient({"url": schema_registry.url})
    registered = client.get_latest_version(f"{sink}-value")
    assert [f["name"] for f in json.loads(registered.schema.schema_str)["fields"]] == [
        "impression_id",
        "user_id",
        "country",
    ]
    consumer = Consumer(
        {"bootstrap.servers": kafka_broker.bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([sink])
    deserialize, got = AvroDeserializer(client), {}
    deadline = time.monotonic() + 60
    while len(got) < 6 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        value = message.value()
        assert value[:1] == b"\x00" and int.from_bytes(value[1:5], "big") == registered.schema_id
        row = deserialize(value, SerializationContext(sink, MessageField.VALUE))
        got[row["impression_id"]] = (row["user_id"], row["country"])
    consumer.close()
    assert got == {f"i{i}": (i, f"c{i}") for i in range(6)}
