"""An Avro source and sink rendered into the JobConfig (pure): the registry named once in the
spec, the topic's subject by the serializers' TopicNameStrategy, a Backfill's topic's own
subject; nothing new in a JSON job's config (its hash is what it was)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.jobconfig import backfill_config, streaming_job_config
from spark_app.contract.sinks import KafkaSink
from spark_app.contract.sources import KafkaSource

ROOT = Path(__file__).resolve().parents[4]
REGISTRY = {"company": {"url": "http://registry:8080/apis/ccompat/v7"}}


def kafka_rmi(**spec: Any) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "examples" / "kafka-rmi-streamingjob.yaml").read_text())
    data["metadata"]["uid"] = "u-1"
    data["spec"].update(spec)
    return data


def avro(data: dict[str, Any]) -> dict[str, Any]:
    data["spec"]["schemaRegistries"] = REGISTRY
    data["spec"]["sources"]["impressions"]["live"].update(valueFormat="avro", schemaRegistry="company")
    data["spec"]["sinks"]["attributed_plays"] = {
        "kind": "kafka",
        "bootstrapServers": "kafka:9092",
        "topic": "plays",
        "key": ["playback_id"],
        "valueFormat": "avro",
        "schemaRegistry": "company",
    }
    return data


def test_an_avro_source_and_sink_name_the_registry_and_their_topics_subjects() -> None:
    job = StreamingJob.model_validate(avro(kafka_rmi()))
    cfg = streaming_job_config(job)
    src, plain = cfg.sources["impressions"], cfg.sources["playbacks"]
    assert isinstance(src, KafkaSource) and src.value_format == "avro" and src.registry is not None
    assert (src.registry.url, src.registry.subjects) == (REGISTRY["company"]["url"], ["impressions-value"])
    assert isinstance(plain, KafkaSource) and plain.value_format == "json" and plain.registry is None
    sink = cfg.sinks["attributed_plays"]
    assert isinstance(sink, KafkaSink) and sink.registry is not None and sink.registry.subject == "plays-value"

    data = yaml.safe_load((ROOT / "examples" / "rmi-backfill.yaml").read_text())
    backfill = Backfill.model_validate({**data, "metadata": {**data["metadata"], "uid": "abcdef0123"}})
    rewritten = backfill_config(backfill, job, None).sinks["attributed_plays"]
    assert isinstance(rewritten, KafkaSink) and rewritten.registry is not None
    assert rewritten.registry.subject == "plays-backfill-rmi-outage-value", "the backfill topic's own subject"


def test_a_json_job_renders_as_before() -> None:
    text = streaming_job_config(StreamingJob.model_validate(kafka_rmi())).to_json()
    assert "avro" not in text and "registry" not in text
    sink = streaming_job_config(StreamingJob.model_validate(kafka_rmi())).sinks
    assert all("valueFormat" not in s.model_dump_json(by_alias=True, exclude_none=True) for s in sink.values())


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["spec"].pop("schemaRegistries"), "must name an entry of spec.schemaRegistries"),
        (lambda d: d["spec"]["sources"]["impressions"]["live"].pop("schemaRegistry"), "valueFormat avro needs"),
        (lambda d: d["spec"]["sinks"]["attributed_plays"].pop("valueFormat"), "valueFormat avro needs"),
    ],
)
def test_avro_without_its_registry_is_refused_naming_the_field(edit: Any, said: str) -> None:
    data = avro(kafka_rmi())
    edit(data)
    with pytest.raises(ValueError, match=said):
        StreamingJob.model_validate(data)


def test_a_dead_letter_table_reaches_the_job_config_with_one_query_per_avro_source() -> None:
    data = avro(kafka_rmi(deadLetterTable={"table": "ops.rmi_dead_letters"}))
    cfg = streaming_job_config(StreamingJob.model_validate(data))
    assert cfg.dead_letters is not None and (cfg.dead_letters.catalog, cfg.dead_letters.table) == (
        "default",
        "ops.rmi_dead_letters",
    )
    assert cfg.dead_letter_outputs == ("_dead_letters/impressions",), "playbacks is JSON: it has none"
    sink = cfg.sink_config("_dead_letters/impressions")
    assert sink.kind == "iceberg" and cfg.sink_branch("_dead_letters/impressions") == "main"
    assert "deadLetters" not in streaming_job_config(StreamingJob.model_validate(avro(kafka_rmi()))).to_json()


def test_a_dead_letter_table_without_an_avro_source_or_with_an_unknown_catalog_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="deadLetterTable holds the records an Avro source cannot decode"):
        StreamingJob.model_validate(kafka_rmi(deadLetterTable={"table": "ops.dead"}))
    job = StreamingJob.model_validate(avro(kafka_rmi(deadLetterTable={"catalog": "ops", "table": "ops.dead"})))
    with pytest.raises(Exception, match=r"deadLetters.catalog 'ops' is not in catalogs \(default\)"):
        streaming_job_config(job)


def test_a_registry_that_asks_for_credentials_gets_its_secrets_mounted_and_named_as_files() -> None:
    from kappa_operator.render.spark_application import job_launch

    data = avro(kafka_rmi())
    data["spec"]["schemaRegistries"] = {
        "company": {
            "url": "https://registry.example:8081",
            "basicAuth": {"secretRef": {"name": "registry-key"}},
            "ca": {"secretRef": {"name": "registry-ca"}},
        }
    }
    job = StreamingJob.model_validate(data)
    cfg = streaming_job_config(job)
    src, sink = cfg.sources["impressions"], cfg.sinks["attributed_plays"]
    assert isinstance(src, KafkaSource) and src.registry is not None
    assert isinstance(sink, KafkaSink) and sink.registry is not None
    for access in (src.registry, sink.registry):
        assert (access.username_file, access.password_file, access.ca_file) == (
            "/etc/kappa/kafka/registry-key/username",
            "/etc/kappa/kafka/registry-key/password",
            "/etc/kappa/kafka/registry-ca/ca.crt",
        )
    assert job.spec.secrets_in_use == ("registry-key", "registry-ca"), "a rotation of either restarts the job"
    volumes, mounts = job_launch(job, {}).kafka_secrets
    assert [v["secret"]["secretName"] for v in volumes] == ["registry-key", "registry-ca"]
    assert len(mounts) == 2
    assert "password" not in cfg.to_json().replace("passwordFile", "").replace("/password", "")


def test_a_registry_without_credentials_renders_as_before() -> None:
    text = streaming_job_config(StreamingJob.model_validate(avro(kafka_rmi()))).to_json()
    assert "usernameFile" not in text and "caFile" not in text


def test_avro_keys_render_their_topics_key_subjects() -> None:
    data = avro(kafka_rmi())
    data["spec"]["sources"]["impressions"]["live"]["keyFormat"] = "avro"
    data["spec"]["sinks"]["attributed_plays"]["keyFormat"] = "avro"
    cfg = streaming_job_config(StreamingJob.model_validate(data))
    src, sink = cfg.sources["impressions"], cfg.sinks["attributed_plays"]
    assert isinstance(src, KafkaSource) and src.key_format == "avro" and src.registry is not None
    assert src.registry.key_subjects == ["impressions-key"]
    assert isinstance(sink, KafkaSink) and sink.key_format == "avro" and sink.registry is not None
    assert sink.registry.key_subject == "plays-key"
    assert "keyFormat" not in streaming_job_config(StreamingJob.model_validate(avro(kafka_rmi()))).to_json()


@pytest.mark.parametrize("part", ["source", "sink"])
def test_avro_keys_without_avro_values_are_refused_naming_the_field(part: str) -> None:
    data = kafka_rmi()
    if part == "source":
        data["spec"]["sources"]["impressions"]["live"]["keyFormat"] = "avro"
    else:
        data["spec"]["sinks"]["attributed_plays"] = {
            "kind": "kafka", "bootstrapServers": "kafka:9092", "topic": "plays", "key": ["playback_id"],
            "keyFormat": "avro",
        }  # fmt: skip
    with pytest.raises(ValueError, match="keyFormat avro needs valueFormat avro"):
        StreamingJob.model_validate(data)
