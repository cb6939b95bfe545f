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
