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


UNDECODABLE = [
    ("not the wire format", "is not in the schema registry's wire format"),
    ("does not decode", "does not decode with schema id"),
    ("an id the registry does not have", "names schema id 99999, which the schema registry does not have"),
]
"""The records no run can decode, and what the line naming each says."""


def undecodable_record(case: str, v1_id: int) -> tuple[bytes, int | None]:
    """The record of ``case`` (its value, and the schema id its header names)."""
    return {
        "not the wire format": (b'{"impression_id": "json"}', None),
        "does not decode": (b"\x00" + v1_id.to_bytes(4, "big") + b"\xff\xff\xff", v1_id),
        "an id the registry does not have": (b"\x00" + (99999).to_bytes(4, "big") + b"\x02a\x02", 99999),
    }[case]


def topic_with_a_bad_record(broker: KafkaBroker, registry: SchemaRegistry, case: str) -> tuple[str, bytes, int | None]:
    """i0..i2 (v1), the record of ``case`` at offset 3, i4..i6: the topic, the record's value
    and the id it names."""
    topic = topic_of(broker)
    produce(broker, registry, topic, V1, v1_rows(0, 3))
    v1_id = SchemaRegistryClient({"url": registry.url}).get_latest_version(f"{topic}-value").schema_id
    bad, bad_id = undecodable_record(case, v1_id)
    produce_raw(broker, topic, bad)
    produce(broker, registry, topic, V1, v1_rows(4, 3))
    return topic, bad, bad_id


def records_of(broker: KafkaBroker, topic: str, n: int) -> list[tuple[bytes, bytes]]:
    """The first ``n`` records of ``topic`` as (key, value) bytes, waiting up to a minute."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    while len(out) < n and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            out.append((message.key(), message.value()))
    consumer.close()
    return out


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


@pytest.mark.parametrize(("case", "said"), UNDECODABLE)
def test_a_record_that_cannot_be_decoded_stops_the_query_at_its_offset_in_one_line(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path: Path,
    case: str,
    said: str,
) -> None:
    topic, _, _ = topic_with_a_bad_record(kafka_broker, schema_registry, case)
    cfg = config(
        topic, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap, options={"maxOffsetsPerTrigger": "3"}
    )

    with pytest.raises((UndecodableRecordError, UnknownSchemaIdError)) as failed:
        run(cfg, spark)

    line = str(failed.value)
    assert line.startswith(f"sources.impressions: the record at {topic}[0] offset 3 "), line
    assert said in line and "\n" not in line and "org.apache" not in line, line
    assert set(rows_in(spark, tmp_path)) == {"i0", "i1", "i2"}, "nothing from the record on"


@pytest.mark.parametrize(("case", "said"), UNDECODABLE)
def test_with_a_dead_letter_table_a_record_that_cannot_be_decoded_goes_there_and_the_job_goes_on(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path: Path,
    case: str,
    said: str,
) -> None:
    """The same three records, the job naming a dead-letter table: each is a row there (its
    place, its bytes, the id it names, why), every other record is in the sink, and a second run
    from the checkpoints adds nothing to either (exactly once)."""
    from pyiceberg.catalog import load_catalog

    topic, bad, bad_id = topic_with_a_bad_record(kafka_broker, schema_registry, case)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/w"}
    raw = config(
        topic, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap, options={"maxOffsetsPerTrigger": "3"}
    ).model_dump(by_alias=True, exclude_none=True, mode="json")
    raw |= {"catalogs": {"default": props}, "deadLetters": {"table": "ops.dead_letters"}}
    cfg = parse_config(raw)

    run(cfg, spark)
    produce(kafka_broker, schema_registry, topic, V1, v1_rows(7, 1))
    run(cfg, spark)  # from the checkpoints: only the new record

    assert set(rows_in(spark, tmp_path)) == {f"i{i}" for i in (0, 1, 2, 4, 5, 6, 7)}
    letters = load_catalog("default", **props).load_table("ops.dead_letters").scan().to_arrow().to_pylist()
    assert len(letters) == 1, letters
    (letter,) = letters
    assert (letter["source"], letter["topic"], letter["partition"], letter["offset"]) == ("impressions", topic, 0, 3)
    assert letter["value"] == bad and letter["schema_id"] == bad_id and letter["key"] is None
    assert letter["reason"].startswith(f"sources.impressions: the record at {topic}[0] offset 3 "), letter
    assert said in letter["reason"] and "\n" not in letter["reason"], letter["reason"]


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
    got = {}
    for _, value in records_of(kafka_broker, sink, 6):
        assert value[:1] == b"\x00" and int.from_bytes(value[1:5], "big") == registered.schema_id
        row = AvroDeserializer(client)(value, SerializationContext(sink, MessageField.VALUE))
        got[row["impression_id"]] = (row["user_id"], row["country"])
    assert got == {f"i{i}": (i, f"c{i}") for i in range(6)}


class GuardedRegistry:
    """The real registry behind a gate that asks for HTTP basic credentials, as a registry
    behind an authenticating proxy (or Confluent Cloud's API keys) asks: a request with the
    right pair is passed through to Apicurio unchanged, any other is answered 401. Apicurio's
    own authentication needs an OIDC server (Keycloak), which these tests do not run."""

    def __init__(self, upstream: str, user: str, password: str) -> None:
        import base64
        import http.server
        import urllib.error
        import urllib.parse
        import urllib.request

        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.refused = 0
        guard = self

        class Gate(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _pass(self, method: str) -> None:
                if self.headers.get("Authorization") != expected:
                    guard.refused += 1
                    body = b'{"error_code": 401, "message": "Unauthorized"}'
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="registry"')
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "content-type")}
                request = urllib.request.Request(upstream + self.path, data=data, headers=headers, method=method)
                try:
                    with urllib.request.urlopen(request, timeout=10) as answer:
                        status, body = answer.status, answer.read()
                except urllib.error.HTTPError as exc:
                    status, body = exc.code, exc.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._pass("GET")

            def do_POST(self) -> None:
                self._pass("POST")

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Gate)
        root = urllib.parse.urlsplit(upstream)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{root.path}"
        upstream = f"{root.scheme}://{root.netloc}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("given", ["right", "wrong", "none"])
def test_a_registry_that_asks_for_credentials_gets_them_from_the_secrets_files(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    schema_registry: SchemaRegistry,
    tmp_path: Path,
    given: str,
) -> None:
    """The source asks for its schemas and the Kafka sink registers its own through a registry
    that wants a user: with the Secret's files both work; a wrong password or none is one line
    naming the registry and the fix, the password in no message, nothing written."""
    password = f"pw-{uuid.uuid4().hex}"
    guarded = GuardedRegistry(schema_registry.url, "kappa-job", password)
    try:
        (tmp_path / "secret").mkdir()
        (tmp_path / "secret" / "username").write_text("kappa-job")
        (tmp_path / "secret" / "password").write_text(password if given == "right" else "not-it")
        secret = tmp_path / "secret"
        files = {"usernameFile": str(secret / "username"), "passwordFile": str(secret / "password")}
        files = files if given != "none" else {}
        source, sink = topic_of(kafka_broker), topic_of(kafka_broker)
        produce(kafka_broker, schema_registry, source, V1, v1_rows(0, 4))
        raw = config(source, guarded.url, tmp_path, bootstrap=kafka_broker.bootstrap).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
        raw["sources"]["impressions"]["registry"] |= files
        raw["sinks"]["avro"] = {
            "kind": "kafka",
            "bootstrapServers": kafka_broker.bootstrap,
            "topic": sink,
            "key": ["impression_id"],
            "valueFormat": "avro",
            "registry": {"url": guarded.url, "subject": f"{sink}-value", **files},
        }
        raw["pipelineArgs"] = {"outputs": "copy,avro"}
        cfg = parse_config(raw)
        if given == "right":
            run(cfg, spark)
            assert set(rows_in(spark, tmp_path)) == {f"i{i}" for i in range(4)}
            client = SchemaRegistryClient({"url": schema_registry.url})
            assert client.get_latest_version(f"{sink}-value").schema_id > 0, "registered through the gate"
            return
        from spark_app.contract.errors import ConfigError

        with pytest.raises(ConfigError) as failed:
            run(cfg, spark)
        line = str(failed.value)
        said = "refused the credentials given (401" if given == "wrong" else "refused no credentials (401"
        assert line.startswith(f"sources.impressions: the schema registry at {guarded.url} {said}"), line
        assert "basicAuth" in line and password not in line and "not-it" not in line and "\n" not in line, line
        assert rows_in(spark, tmp_path) == {} and guarded.refused >= 1
    finally:
        guarded.close()


EV1 = {
    "type": "record",
    "name": "Impression",
    "namespace": "kappa.test.events",
    "fields": [
        {"name": "impression_id", "type": "string"},
        {"name": "event_ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}
EV2 = {**EV1, "fields": [*EV1["fields"], {"name": "country", "type": "string", "default": "unknown"}]}
EVENT_COLUMNS = "impression_id STRING, event_ts TIMESTAMP, country STRING"


def events(start: int, n: int, country: bool = False) -> list[dict[str, Any]]:
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
    return [
        {"impression_id": f"e{i}", "event_ts": t0 + timedelta(minutes=i), **({"country": f"c{i}"} if country else {})}
        for i in range(start, start + n)
    ]


def test_the_archive_and_the_bootstrap_keep_working_on_an_avro_topic(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """An Avro topic archived into Iceberg by the archive job (its records decoded, with their
    place), then a v2 registered and more records produced; a job bootstrapped from the archive
    takes over the topic where the archive ends: every record once, the v1 ones from the archive,
    the v2 ones decoded from Kafka with their new field."""
    from datetime import UTC, datetime

    from pyiceberg.catalog import load_catalog

    from spark_app.contract.reports.bootstrap import read_record, record_location
    from tests.spark.test_kafka_archive import METADATA

    topic = topic_of(kafka_broker)
    produce(kafka_broker, schema_registry, topic, EV1, events(0, 30))
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/w"}
    registry = {"url": schema_registry.url, "subjects": [f"{topic}-value"]}
    source = {
        "kind": "kafka",
        "bootstrapServers": kafka_broker.bootstrap,
        "topic": topic,
        "valueFormat": "avro",
        "registry": registry,
        "options": {"startingOffsets": "earliest"},
    }
    archive = parse_config(
        {
            "name": "avro-archive",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "catalogs": {"default": props},
            "sources": {"impressions": {**source, "schemaDdl": f"{EVENT_COLUMNS}, {METADATA}"}},
            "sinks": {"copy": {"kind": "iceberg", "table": "archive.impressions", "partitionBy": ["hour(event_ts)"]}},
            "checkpoint": {"location": str(tmp_path / "archive-ck")},
            "trigger": {"kind": "availableNow"},
        }
    )
    run(archive, spark)
    archived = load_catalog("default", **props).load_table("archive.impressions").scan().to_arrow().to_pylist()
    assert sorted(r["impression_id"] for r in archived) == sorted(f"e{i}" for i in range(30))
    assert all(r["country"] is None and r["__metadata__"]["topic"] == topic for r in archived)

    produce(kafka_broker, schema_registry, topic, EV2, events(30, 20, country=True))
    boot = parse_config(
        {
            "name": "avro-boot",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "catalogs": {"default": props},
            "sources": {"impressions": {**source, "schemaFrom": "default:archive.impressions"}},
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "rows")}},
            "checkpoint": {"location": str(tmp_path / "ck")},
            "trigger": {"kind": "availableNow"},
            "alignment": {"maxDrift": "10m"},
            "bootstrap": {
                "from": datetime(2026, 11, 1, tzinfo=UTC).isoformat(),
                "archives": {"impressions": {"kind": "icebergBackfill", "table": "archive.impressions"}},
            },
        }
    )
    run(boot, spark)

    out = spark.read.parquet(str(tmp_path / "rows")).collect()
    got = {r["impression_id"]: (r["country"], r["__metadata__"]["offset"]) for r in out}
    assert len(out) == len(got) == 50, "every record once"
    assert {k: v[0] for k, v in got.items()} == {f"e{i}": (None if i < 30 else f"c{i}") for i in range(50)}
    record = read_record(*record_location(boot))
    assert record is not None and record.switched and record.offsets["impressions"] == {topic: {0: 30}}


def test_avro_keys_are_read_into_the_columns_the_value_lacks_and_written_registering_their_schema(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path
) -> None:
    """Producers that key by the user and leave it out of the value: the source reads each key
    with the schema it names (subject ``<topic>-key``) and the value's missing column takes the
    key's field. The Kafka sink writes its ``key`` columns as an Avro key registered under
    ``<topic>-key``, which Confluent's deserializer reads back."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    key_schema = {"type": "record", "name": "UserKey", "namespace": "kappa.test", "fields": [V1["fields"][1]]}
    value_schema = {**V1, "name": "KeyedImpression", "fields": [V1["fields"][0]]}
    client = SchemaRegistryClient({"url": schema_registry.url})
    keys = AvroSerializer(client, json.dumps(key_schema))
    values = AvroSerializer(client, json.dumps(value_schema))
    source, sink = topic_of(kafka_broker), topic_of(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(5):
        producer.produce(
            source,
            key=keys({"user_id": 100 + i}, SerializationContext(source, MessageField.KEY)),
            value=values({"impression_id": f"k{i}"}, SerializationContext(source, MessageField.VALUE)),
        )
    assert producer.flush(30) == 0
    raw = config(source, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    raw["sources"]["impressions"]["keyFormat"] = "avro"
    raw["sources"]["impressions"]["registry"]["keySubjects"] = [f"{source}-key"]
    raw["sinks"]["avro"] = {
        "kind": "kafka",
        "bootstrapServers": kafka_broker.bootstrap,
        "topic": sink,
        "key": ["impression_id"],
        "valueFormat": "avro",
        "keyFormat": "avro",
        "registry": {"url": schema_registry.url, "subject": f"{sink}-value", "keySubject": f"{sink}-key"},
    }
    raw["pipelineArgs"] = {"outputs": "copy,avro"}
    run(parse_config(raw), spark)

    assert rows_in(spark, tmp_path) == {f"k{i}": (100 + i, None) for i in range(5)}, "user_id from each key"
    deserialize, got = AvroDeserializer(client), {}
    for key_bytes, value_bytes in records_of(kafka_broker, sink, 5):
        key = deserialize(key_bytes, SerializationContext(sink, MessageField.KEY))
        got[key["impression_id"]] = deserialize(value_bytes, SerializationContext(sink, MessageField.VALUE))["user_id"]
    assert got == {f"k{i}": 100 + i for i in range(5)}
    assert client.get_latest_version(f"{sink}-key").schema.schema_str.count("impression_id") == 1


@pytest.mark.parametrize("dead_letters", [False, True])
def test_a_key_that_does_not_decode_stops_the_job_or_is_a_dead_letter(
    spark: SparkSession, kafka_broker: KafkaBroker, schema_registry: SchemaRegistry, tmp_path: Path, dead_letters: bool
) -> None:
    from pyiceberg.catalog import load_catalog

    key_schema = {"type": "record", "name": "UserKey", "namespace": "kappa.test", "fields": [V1["fields"][1]]}
    client = SchemaRegistryClient({"url": schema_registry.url})
    keys, values = AvroSerializer(client, json.dumps(key_schema)), AvroSerializer(client, json.dumps(V1))
    topic = topic_of(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i, key in enumerate([None, b"plain-text-key", None]):
        ctx = SerializationContext(topic, MessageField.KEY)
        producer.produce(
            topic,
            key=key if key is not None else keys({"user_id": i}, ctx),
            value=values({"impression_id": f"i{i}", "user_id": i}, SerializationContext(topic, MessageField.VALUE)),
        )
    assert producer.flush(30) == 0
    raw = config(topic, schema_registry.url, tmp_path, bootstrap=kafka_broker.bootstrap).model_dump(
        by_alias=True, exclude_none=True, mode="json"
    )
    raw["sources"]["impressions"]["keyFormat"] = "avro"
    raw["sources"]["impressions"]["registry"]["keySubjects"] = [f"{topic}-key"]
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/w"}
    if dead_letters:
        raw |= {"catalogs": {"default": props}, "deadLetters": {"table": "ops.dead_letters"}}
        run(parse_config(raw), spark)
        assert set(rows_in(spark, tmp_path)) == {"i0", "i2"}
        (letter,) = load_catalog("default", **props).load_table("ops.dead_letters").scan().to_arrow().to_pylist()
        assert letter["offset"] == 1 and letter["key"] == b"plain-text-key", letter
        assert letter["reason"].startswith(f"sources.impressions: the key of the record at {topic}[0] offset 1 ")
        return
    with pytest.raises(UndecodableRecordError) as failed:
        run(parse_config(raw), spark)
    line = str(failed.value)
    assert line.startswith(f"sources.impressions: the key of the record at {topic}[0] offset 1 is not in the"), line


@pytest.mark.parametrize("writer_order", [["id", "n"], ["n", "id"]], ids=["columns-order", "other-order"])
def test_a_writer_resolves_into_columns_that_may_not_be_null(spark: SparkSession, writer_order: list[str]) -> None:
    """A value schema from an Iceberg table has required columns; a writer whose fields are the
    columns in their order is one struct cast (the fast path), any other field by field: both
    give the same rows, nullable, and neither is refused by the analyzer."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from spark_app.sources.kafka_avro import resolved

    target = StructType([StructField("id", StringType(), False), StructField("n", LongType(), False)])
    record = F.struct(*(F.col(c) for c in writer_order))
    frame = spark.createDataFrame([("a", 1), (None, 2)], "id string, n int")
    out = frame.select(resolved(record, writer_order, target, {}).alias("v")).select("v.*")
    assert [tuple(r) for r in out.collect()] == [("a", 1), (None, 2)]
    assert [(f.name, f.dataType, f.nullable) for f in out.schema.fields] == [
        ("id", StringType(), True),
        ("n", LongType(), True),
    ]
