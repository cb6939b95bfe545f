"""A real schema registry (Apicurio Registry's Confluent-compatible API, built from Maven Central:
``kappa_operator.local.schema_registry``), through Confluent's own client as a producer and a
job's Avro decode meet it: versions of a subject evolve under BACKWARD compatibility and an
incompatible one is refused; schemas are fetched by id; records cross in Confluent's wire format
(magic byte 0, the schema's id in 4 bytes, the Avro body) and decode with the writer's schema or a
newer reader's. Each test asks a fresh client (no cache): every answer checked is the registry's."""

from __future__ import annotations

import io
import json
import uuid
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from kappa_operator.local.schema_registry import SchemaRegistry

ID = {"name": "id", "type": "long"}
TITLE = {"name": "title", "type": "string"}
YEAR = {"name": "year", "type": "int", "default": 0}
AUTHOR = {"name": "author", "type": "string"}
V1 = {"type": "record", "name": "Play", "namespace": "kappa.test", "fields": [ID, TITLE]}
V2 = {**V1, "fields": [ID, TITLE, YEAR]}
"""v1 and a field with a default: BACKWARD compatible (v2 reads what v1 wrote, ``year`` 0)."""
V3 = {**V1, "fields": [ID, TITLE, YEAR, AUTHOR]}
"""v2 and a field without a default: v3 cannot read what v2 wrote, so BACKWARD refuses it."""


def avro(schema: dict[str, Any]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def fields(schema_str: str) -> list[str]:
    return [f["name"] for f in json.loads(schema_str)["fields"]]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def client(schema_registry: SchemaRegistry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry.url})


def test_the_registry_serves_confluents_api_on_its_own_port(schema_registry: SchemaRegistry) -> None:
    assert schema_registry.running
    assert schema_registry.url == f"http://127.0.0.1:{schema_registry.port}/apis/ccompat/v7"


def test_versions_evolve_under_backward_compatibility(schema_registry: SchemaRegistry) -> None:
    subject = unique("plays") + "-value"
    client = SchemaRegistryClient({"url": schema_registry.url})
    v1 = client.register_schema(subject, avro(V1))
    client.set_compatibility(subject, "BACKWARD")
    assert client.get_compatibility(subject) == "BACKWARD"

    assert client.test_compatibility(subject, avro(V2)) is True
    v2 = client.register_schema(subject, avro(V2))
    assert v2 != v1

    assert client.test_compatibility(subject, avro(V3)) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, avro(V3))
    assert refused.value.http_status_code == 409, refused.value

    fresh = SchemaRegistryClient({"url": schema_registry.url})
    assert fresh.get_versions(subject) == [1, 2]
    latest = fresh.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, v2)
    assert fields(latest.schema.schema_str) == ["id", "title", "year"]
    again = fresh.lookup_schema(subject, avro(V1))  # v1 is known: its version and id, no new version
    assert (again.version, again.schema_id) == (1, v1)
    assert fresh.register_schema(subject, avro(V1)) == v1
    assert SchemaRegistryClient({"url": schema_registry.url}).get_versions(subject) == [1, 2]


def test_the_refusal_is_the_compatibility_rules(client: SchemaRegistryClient) -> None:
    """The same v3 after v1 and v2 is taken when the subject's compatibility is NONE."""
    subject = unique("plays") + "-value"
    client.register_schema(subject, avro(V1))
    client.register_schema(subject, avro(V2))
    client.set_compatibility(subject, "NONE")
    v3 = client.register_schema(subject, avro(V3))
    assert client.get_latest_version(subject).schema_id == v3


def test_a_schema_by_its_id(schema_registry: SchemaRegistry, client: SchemaRegistryClient) -> None:
    subject = unique("ids") + "-value"
    v1 = client.register_schema(subject, avro(V1))
    fetched = SchemaRegistryClient({"url": schema_registry.url}).get_schema(v1)
    assert fetched.schema_type == "AVRO"
    assert fields(fetched.schema_str) == ["id", "title"]
    with pytest.raises(SchemaRegistryError) as unknown:
        SchemaRegistryClient({"url": schema_registry.url}).get_schema(v1 + 100_000)
    assert unknown.value.http_status_code == 404


def test_an_invalid_avro_schema_is_refused(client: SchemaRegistryClient) -> None:
    with pytest.raises(SchemaRegistryError) as invalid:
        client.register_schema(unique("bad") + "-value", Schema('{"type": "record", "name": "NoFields"}', "AVRO"))
    assert invalid.value.http_status_code == 422, invalid.value


def test_a_record_crosses_in_confluents_wire_format(schema_registry: SchemaRegistry) -> None:
    topic = unique("plays")
    value = SerializationContext(topic, MessageField.VALUE)
    writer = SchemaRegistryClient({"url": schema_registry.url})
    record = {"id": 7, "title": "Hamlet"}
    data = AvroSerializer(writer, json.dumps(V1))(record, value)  # registers v1 as <topic>-value

    registered = SchemaRegistryClient({"url": schema_registry.url}).get_latest_version(f"{topic}-value")
    assert data[0] == 0, "the magic byte"
    assert int.from_bytes(data[1:5], "big") == registered.schema_id
    assert fastavro.schemaless_reader(io.BytesIO(data[5:]), fastavro.parse_schema(V1)) == record

    reader = SchemaRegistryClient({"url": schema_registry.url})
    assert AvroDeserializer(reader)(data, value) == record  # the writer's schema, fetched by its id

    # the subject evolves; a reader on v2 reads v1's records with the default, and v2's own
    reader.set_compatibility(f"{topic}-value", "BACKWARD")
    newer = AvroSerializer(writer, json.dumps(V2))({"id": 8, "title": "Lear", "year": 1606}, value)
    assert int.from_bytes(newer[1:5], "big") != registered.schema_id
    on_v2 = AvroDeserializer(SchemaRegistryClient({"url": schema_registry.url}), json.dumps(V2))
    assert on_v2(data, value) == {"id": 7, "title": "Hamlet", "year": 0}
    assert on_v2(newer, value) == {"id": 8, "title": "Lear", "year": 1606}


def test_a_stopped_registry_refuses_connections(tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a client meets when the registry is down: its own registry, stopped (the session's
    serves the other tests)."""
    registry = SchemaRegistry.start(tmp_path_factory.mktemp("registry-down"))
    try:
        client = SchemaRegistryClient({"url": registry.url})
        assert client.get_subjects() == []  # each start is an empty registry
        client.register_schema(unique("down") + "-value", avro(V1))
    finally:
        registry.stop()
    assert not registry.running
    with pytest.raises(Exception) as down:
        SchemaRegistryClient({"url": registry.url, "max.retries": 0}).get_subjects()
    assert not isinstance(down.value, SchemaRegistryError), "no answer from a stopped registry"
    assert type(down.value).__name__ == "ConnectError" and "refused" in str(down.value), repr(down.value)
