"""A blue/green upgrade's refusals (each one line naming the field and what to use instead)
and green's names, from the rmi example and edits of it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kappa_operator.models.streaming_job import StreamingJob, StreamingJobSpec
from kappa_operator.reconcile.blue_green import green_branch, green_checkpoint, refused, sinks_refused

ROOT = Path(__file__).resolve().parents[4]
RMI = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())


def spec(edit: Any = None) -> StreamingJobSpec:
    raw = copy.deepcopy(RMI["spec"])
    if edit is not None:
        edit(raw)
    return StreamingJobSpec.model_validate(raw)


def test_a_changed_pipeline_over_the_same_inputs_and_tables_can_switch() -> None:
    def v2(raw: dict[str, Any]) -> None:
        raw["image"] = "ghcr.io/kappa-dev/kappa-spark:0.2.0"
        raw["pipelineArgs"] = {"lateness": "45 minutes", "attribution_window": "2 hours"}

    assert refused(spec(), spec(v2)) is None
    assert sinks_refused(spec(v2)) == []


@pytest.mark.parametrize(
    ("sink", "said"),
    [
        (
            {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "plays", "key": ["playback_id"]},
            "upgrade.mode blueGreen: sinks.copy is a kafka sink: only an Iceberg sink can switch at one event-time "
            "boundary in one snapshot (a topic's records or a directory's files cannot be taken back); use "
            "upgrade.mode last-state or snapshot for this job",
        ),
        (
            {"kind": "parquet", "path": "s3a://lake/copy"},
            "upgrade.mode blueGreen: sinks.copy is a parquet sink: only an Iceberg sink",
        ),
        (
            {"kind": "iceberg", "table": "marts.copy"},
            "upgrade.mode blueGreen: sinks.copy needs timeColumn (the switch replaces its rows from one event time "
            "on); set sinks.copy.timeColumn, or use upgrade.mode last-state or snapshot for this job",
        ),
    ],
    ids=["kafka", "parquet", "no-time-column"],
)
def test_a_sink_that_cannot_switch_in_one_snapshot_is_refused_by_name(sink: dict[str, Any], said: str) -> None:
    def with_sink(raw: dict[str, Any]) -> None:
        raw["sinks"]["copy"] = sink

    both = spec(with_sink)
    (line,) = sinks_refused(both)
    assert line.startswith(said), line
    assert refused(both, both) == line


def test_changed_inputs_or_tables_are_refused_naming_the_field() -> None:
    def other_topic(raw: dict[str, Any]) -> None:
        raw["sources"]["playbacks"]["live"]["table"] = "ingest.playbacks_v2"
        raw["sources"]["playbacks"]["history"]["table"] = "ingest.playbacks_v2"

    line = refused(spec(), spec(other_topic))
    assert line is not None and line.startswith("upgrade.mode blueGreen: sources.playbacks differs from the running"), (
        line
    )
    assert line.endswith("change sources with upgrade.mode last-state or stateless")

    def fewer_sources(raw: dict[str, Any]) -> None:
        del raw["sources"]["playbacks"]

    line = refused(spec(), spec(fewer_sources))
    assert line is not None and line.startswith("upgrade.mode blueGreen: sources playbacks of the running spec"), line

    def other_table(raw: dict[str, Any]) -> None:
        raw["sinks"]["attributed_plays"]["table"] = "marts.attributed_plays_v2"

    line = refused(spec(), spec(other_table))
    assert line is not None and line.startswith("upgrade.mode blueGreen: sinks.attributed_plays.table differs"), line


def test_an_iceberg_live_source_whose_history_is_another_table_is_refused_by_the_model() -> None:
    def split_history(raw: dict[str, Any]) -> None:
        raw["sources"]["impressions"]["history"]["table"] = "archive.impressions"
        raw["upgrade"] = {"mode": "blueGreen"}

    with pytest.raises(ValidationError, match=r"sources\.impressions is icebergLive with history default/archive"):
        spec(split_history)
    assert refused(spec(), spec()) is None, "the rmi example's own kind: each table its own history"


def test_two_iceberg_live_sources_of_one_table_are_refused() -> None:
    def twice(raw: dict[str, Any]) -> None:
        raw["sources"]["playbacks"]["live"]["table"] = raw["sources"]["playbacks"]["history"]["table"] = (
            "ingest.impressions"
        )

    line = refused(spec(twice), spec(twice))
    assert line is not None and line.startswith(
        "upgrade.mode blueGreen: sources.impressions and sources.playbacks both read ingest.impressions live"
    ), line


def test_green_has_a_checkpoint_and_a_branch_of_its_own_per_attempt() -> None:
    raw = copy.deepcopy(RMI)
    raw["metadata"].update(uid="u1", generation=7)
    job = StreamingJob.model_validate(raw)
    assert green_checkpoint(job) == "s3a://lake/checkpoints/rmi/green-g7"
    assert green_branch(job) == "green-rmi-g7"
