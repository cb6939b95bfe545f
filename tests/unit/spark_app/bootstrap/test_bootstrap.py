"""Issue 31 item 1, the pure parts: where a topic takes over from its archive, the JobConfig
and the StreamingJob that ask for it (model and API server agreeing), what the operator renders,
and the phase and status it shows (Bootstrapping, then Running with the switch)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.bootstrap import bootstrap_status, switched_now
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.jobconfig import streaming_job_config
from spark_app.bootstrap.seam import EARLIEST, describe, starting_offsets, switch_offsets
from spark_app.contract.config import parse_config
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.bootstrap import BootstrapRecord
from spark_app.contract.sources import IcebergBackfillSource
from tests.crd_validation import validate
from tests.unit.crd_documents import crd

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "kafka-rmi-bootstrap-streamingjob.yaml"
NOW = "2026-11-26T10:00:00Z"


def test_each_partition_takes_over_after_its_newest_archived_offset() -> None:
    archived = {("imps", 0): 41, ("imps", 1): 0}
    offsets = switch_offsets(archived, [("imps", 0), ("imps", 1), ("imps", 2)])
    assert offsets == {"imps": {0: 42, 1: 1, 2: EARLIEST}}, "a partition the archive never saw: from its earliest"
    assert json.loads(starting_offsets(offsets)) == {"imps": {"0": 42, "1": 1, "2": -2}}
    assert describe(offsets) == "imps[0]@42, imps[1]@1, imps[2]@earliest"


def test_an_archived_partition_the_cluster_lost_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"imps\[1\], which the Kafka cluster no longer has"):
        switch_offsets({("imps", 0): 5, ("imps", 1): 7}, [("imps", 0)])


def live_config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "boot",
        "pipeline": "spark_app.examples.rmi:pipeline",
        "mode": "live",
        "catalogs": {"default": {"type": "sql", "uri": "sqlite:///x.db"}},
        "sources": {
            n: {"kind": "kafka", "bootstrapServers": "k:9092", "topic": n, "schemaDdl": "id STRING"}
            for n in ("impressions", "playbacks")
        },
        "sinks": {"out": {"kind": "console"}},
        "checkpoint": {"location": "/tmp/ck"},
        "bootstrap": {
            "from": "2026-11-01T00:00:00Z",
            "archives": {n: {"kind": "icebergBackfill", "table": f"archive.{n}"} for n in ("impressions", "playbacks")},
        },
    }
    base.update(changes)
    return base


def test_a_job_config_with_a_bootstrap_names_what_is_wrong() -> None:
    cfg = parse_config(live_config())
    assert cfg.bootstrap is not None and cfg.bootstrap.start == datetime(2026, 11, 1, tzinfo=UTC)
    boot = live_config()["bootstrap"]
    with pytest.raises(ConfigError, match=r"bootstrap.archives has no archive for sources.playbacks"):
        parse_config(live_config(bootstrap={**boot, "archives": {"impressions": boot["archives"]["impressions"]}}))
    with pytest.raises(ConfigError, match=r"bootstrap.archives.clicks is not one of the sources"):
        parse_config(
            live_config(bootstrap={**boot, "archives": {**boot["archives"], "clicks": boot["archives"]["impressions"]}})
        )
    iceberg = {"kind": "icebergLive", "table": "raw.impressions"}
    with pytest.raises(ConfigError, match=r"sources.impressions is icebergLive, not kafka"):
        parse_config(live_config(sources={**live_config()["sources"], "impressions": iceberg}))


def example(**spec: Any) -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["metadata"].update(uid="u1", generation=1)
    data["spec"].update(spec)
    return data


def test_the_model_and_the_api_server_refuse_a_bootstrap_of_a_source_that_is_not_kafka() -> None:
    data = example()
    StreamingJob.model_validate(data)
    assert validate(crd("StreamingJob"), data) == []
    data["spec"]["sources"]["impressions"]["live"] = {"kind": "icebergLive", "table": "raw.impressions"}
    with pytest.raises(ValueError, match=r"every source's live\.kind must be kafka"):
        StreamingJob.model_validate(data)
    assert any("every source's live.kind must be kafka" in e for e in validate(crd("StreamingJob"), data))


def test_the_operator_renders_each_sources_history_as_its_archive() -> None:
    cfg = streaming_job_config(StreamingJob.model_validate(example()))
    assert cfg.bootstrap is not None
    assert cfg.bootstrap.start == datetime(2026, 11, 19, tzinfo=UTC)
    assert {n: a.table for n, a in cfg.bootstrap.archives.items()} == {
        "impressions": "archive.impressions",
        "playbacks": "archive.playbacks",
    }
    assert cfg.alignment.max_drift.total_seconds() == 600 and cfg.mode == "live"


def record(switched: bool) -> BootstrapRecord:
    t = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)
    return BootstrapRecord(
        start=datetime(2026, 11, 19, tzinfo=UTC),
        archives={
            "impressions": IcebergBackfillSource(kind="icebergBackfill", table="archive.impressions", snapshot_id=7)
        },
        offsets={"impressions": {"impressions": {0: 120, 1: EARLIEST}}},
        decided_at=t,
        archive_end={"impressions": datetime(2026, 11, 26, 8, 59, tzinfo=UTC), "playbacks": None},
        switched_at=t if switched else None,
    )


def running_app(j: StreamingJob) -> dict[str, Any]:
    plan = decide_streaming_job(j, None, NOW)
    assert plan.create_app is not None
    return {**plan.create_app, "status": {"applicationState": {"state": "RUNNING"}}}


def with_status(data: dict[str, Any], status: dict[str, Any]) -> StreamingJob:
    return StreamingJob.model_validate({**data, "status": status})


def test_a_running_bootstrap_is_bootstrapping_until_the_switch_then_running_with_an_event() -> None:
    data = example()
    fresh = StreamingJob.model_validate(data)
    app = running_app(fresh)
    plan = decide_streaming_job(fresh, app, NOW)
    assert plan.status["phase"] == "Bootstrapping" and [e.reason for e in plan.events] == ["Bootstrapping"]
    ready = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert ready["Ready"] == "False", "not live yet"

    reading = bootstrap_status(record(switched=False))
    assert reading["switchedAt"] is None and reading["archiveEnd"] == "2026-11-26T08:59:00Z"
    assert reading["offsets"] == [
        {"source": "impressions", "topic": "impressions", "partition": 0, "offset": 120},
        {"source": "impressions", "topic": "impressions", "partition": 1, "offset": None},
    ]
    job = with_status(data, {**plan.status, "bootstrap": reading})
    again = decide_streaming_job(job, app, NOW)
    assert again.status["phase"] == "Bootstrapping" and "they end at 2026-11-26T08:59:00Z" in again.status["message"]
    assert not switched_now(job, {"bootstrap": reading})

    done = bootstrap_status(record(switched=True))
    assert switched_now(job, {"bootstrap": done}), "the timer sees the switch: the reconcile must write the phase"
    job = with_status(data, {**again.status, "bootstrap": done})
    live = decide_streaming_job(job, app, NOW)
    assert live.status["phase"] == "Running" and [e.reason for e in live.events] == ["Switched"]
    assert not switched_now(with_status(data, {**live.status, "bootstrap": done}), {"bootstrap": done})


def test_adding_a_bootstrap_to_a_job_that_ran_without_it_is_refused_before_anything_stops() -> None:
    plain = example(bootstrap=None)
    del plain["spec"]["bootstrap"]
    ran = StreamingJob.model_validate(plain)
    app = running_app(ran)
    stable = decide_streaming_job(ran, app, NOW).status
    edited = with_status(example(), stable)
    plan = decide_streaming_job(edited, app, NOW)
    assert plan.status["phase"] == "Failed" and not plan.delete_app and plan.create_app is None
    assert "make this edit with spec.upgrade.mode: stateless" in plan.status["message"], "the fix, named"
    assert "keeps running with the previous spec" in plan.status["message"]
    stateless = with_status(example(upgrade={"mode": "stateless"}), stable)
    moved = decide_streaming_job(stateless, app, NOW)
    assert moved.move_checkpoint is not None, "a stateless upgrade moves to a new checkpoint, where it bootstraps"


def test_a_local_run_shows_the_bootstrap_its_driver_recorded(tmp_path: Path) -> None:
    """Issue 44, item 6: `kappa run` of a bootstrapped job showed no status.bootstrap and no
    switch; it shows what the operator's progress timer would copy from the same record."""
    from kappa_operator.local.job import bootstrap_seen, describe_offsets
    from spark_app.contract.config import parse_config
    from spark_app.contract.reports.bootstrap import record_location, write_record

    cfg = parse_config(live_config(checkpoint={"location": str(tmp_path / "ck")}))
    assert bootstrap_seen(cfg) is None, "before the driver chose"
    location, name = record_location(cfg)
    write_record(location, record(switched=True), name)
    seen = bootstrap_seen(cfg)
    assert seen is not None and seen["switchedAt"] == "2026-11-26T09:00:00Z"
    assert describe_offsets(seen) == "impressions[0]@120, impressions[1]@earliest"
