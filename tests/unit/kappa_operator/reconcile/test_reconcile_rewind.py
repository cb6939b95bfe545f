"""The Rewind state machine (pure): each phase's intent, commands and next phase; the
downstream rule; and the StreamingJob's side of it (paused, moved checkpoint)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from kappa_operator.models.rewind import SKIP_PARTITIONS_MAX, Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.rewind import (
    Observed,
    Pause,
    Resume,
    RewindDownstream,
    RunRestore,
    decide_rewind,
    downstream_of,
    reads_from,
    step_failed,
)
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    PAUSED_ANNOTATION,
    SKIP_ANNOTATION,
    streaming_job_config,
)
from spark_app.contract.checkpoints.kafka_retention import Loss, kafka_offsets, losses, read_none_of, refusal
from spark_app.contract.checkpoints.layout import parse_offsets
from spark_app.contract.config import parse_config
from spark_app.contract.reports.restore import RestoreReport, SinkRestored
from spark_app.contract.sources import OffsetRange

ROOT = Path(__file__).resolve().parents[4]
NOW = "2026-11-21T10:00:00Z"
POINT = SinkRestore(sink="attributed_plays", batch_id=41, committed_at="2026-11-01T13:58:00Z", query_id="q-1")


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


def rewind(phase: str | None = None, **spec: Any) -> Rewind:
    data = load("rmi-rewind.yaml")
    data["metadata"].update(uid="rw-uid-12345", generation=1)
    data["spec"].update(spec)
    if phase is not None:
        data["status"] = {
            "phase": phase,
            "restores": [POINT.model_dump(by_alias=True)],
            "checkpointLocation": "s3a://lake/checkpoints/rmi/rewinds/rmi-before-outage-rw-uid-1",
        }
    return Rewind.model_validate(data)


def job(name: str = "rmi", annotations: dict[str, str] | None = None, **spec: Any) -> StreamingJob:
    data = load("rmi-streamingjob.yaml")
    data["metadata"].update(name=name, uid=f"uid-{name}", annotations=annotations or {})
    data["spec"].update(spec)
    return StreamingJob.model_validate(data)


APP = {"metadata": {"name": "rmi", "annotations": {}}, "status": {"applicationState": {"state": "RUNNING"}}}


def restore_app(state: str, error: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": "rmi-before-outage-rewind"},
        "status": {"applicationState": {"state": state, "errorMessage": error}},
    }


def report(files: int = 3, error: str | None = None) -> RestoreReport:
    done = (
        []
        if error
        else [SinkRestored(sink="attributed_plays", batch_id=41, query_id="q-1", table="t", files_removed=files)]
    )
    return RestoreReport(
        rewind="default/rmi-before-outage",
        state="Failed" if error else "Restored",
        sinks=done,
        error=error,
        started_at="2026-11-21T10:00:00Z",  # type: ignore[arg-type]
        finished_at="2026-11-21T10:01:00Z",  # type: ignore[arg-type]
    )


def test_pending_chooses_points_records_them_and_pauses_the_job() -> None:
    plan = decide_rewind(rewind(), Observed(job=job(), app=APP, chosen=(POINT,)), NOW)
    assert plan.status["phase"] == "Stopping" and plan.status["restoredBatch"] == 41
    assert plan.status["restores"][0]["queryId"] == "q-1"
    assert plan.status["checkpointLocation"] == "s3a://lake/checkpoints/rmi/rewinds/rmi-before-outage-rw-uid-1"
    assert plan.commands == (Pause("rewind/rmi-before-outage"),)


def test_pending_refuses_clearly_without_a_restorable_point() -> None:
    why = "sink attributed_plays: no snapshot committed before 2026-11-01T14:00:00Z (earliest: batch 50 at ...)"
    plan = decide_rewind(rewind(), Observed(job=job(), app=APP, chosen=why), NOW)
    assert plan.status["phase"] == "Failed" and why in plan.status["message"] and not plan.commands
    assert plan.events[0].reason == "NoRestorablePoint"
    assert decide_rewind(rewind(), Observed(job=None, app=None), NOW).status["phase"] == "Pending"


def test_pending_refuses_offsets_retention_deleted_before_stopping_anything() -> None:
    lost = [Loss("impressions", 1, resume_at=120, earliest=300), Loss("impressions", 0, resume_at=5, earliest=6)]
    why = refusal(lost, 41, {"impressions": "ingest.impressions"})
    assert "impressions[1] offsets 120..299" in why and "impressions[0] offsets 5..5" in why
    assert "(181 records)" in why and "Nothing was stopped" in why
    assert "Backfill" in why and "impressions -> ingest.impressions" in why, "the fix, with the archive named"
    plan = decide_rewind(rewind(), Observed(job=job(), app=APP, chosen=(POINT,), expired=why), NOW)
    assert plan.status["phase"] == "Failed" and plan.status["message"] == why
    assert not plan.commands, "the job is not paused"
    assert plan.events[0].reason == "KafkaOffsetsExpired"


def test_kafka_offsets_are_read_from_an_offset_log_entry_and_compared_with_retention() -> None:
    entry = parse_offsets(
        "v1\n"
        '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
        '{"impressions":{"1":120,"0":5}}\n'
        '{"snapshotId":7,"position":3}\n'
        '{"other":{"0":9}}\n'
        '{"plays-eu":{"0":-2}}\n'
    )
    stored = kafka_offsets(entry, topics=["impressions"], patterns=["plays-.*"])
    assert stored == {"impressions": {0: 5, 1: 120}, "plays-eu": {0: -2}}, "topics of the job only, by name or pattern"
    earliest = {("impressions", 0): 5, ("impressions", 1): 300, ("plays-eu", 0): 50}
    assert losses(stored, earliest) == [Loss("impressions", 1, 120, 300)], "-2 (earliest) loses nothing"
    gone = losses(stored, {("impressions", 1): 0})
    assert gone == [Loss("impressions", 0, 5, None)], "a partition the cluster no longer has is lost"
    assert "impressions[0] from offset 5 (the partition no longer exists)" in refusal(gone, 3, {})


def test_stopping_waits_for_the_application_then_restores() -> None:
    waiting = decide_rewind(rewind("Stopping"), Observed(job=job(), app=APP), NOW)
    assert waiting.status["phase"] == "Stopping" and waiting.next_phase is None
    assert waiting.commands == (Pause("rewind/rmi-before-outage"),), "re-asserted: a restart may have lost it"
    stopped = decide_rewind(rewind("Stopping"), Observed(job=job(), app=None), NOW)
    assert stopped.status["phase"] == "Restoring" and not stopped.commands


def upgrading(step: str) -> StreamingJob:
    """The job with a blueGreen upgrade recorded at ``step``."""
    data = job().model_dump(by_alias=True, exclude_none=True)
    data["status"] = {
        "phase": "Upgrading",
        "upgrade": {"mode": "blueGreen", "step": step, "toHash": "h2", "startedAt": NOW},
    }
    return StreamingJob.model_validate(data)


def test_a_rewind_waits_for_a_blue_green_switch_under_way_and_gives_an_earlier_step_up() -> None:
    for step in ("StoppingBlue", "Draining", "Switching", "Promoting"):
        waiting = decide_rewind(rewind(), Observed(job=upgrading(step), app=None, chosen=(POINT,)), NOW)
        assert waiting.status["phase"] == "Pending" and not waiting.commands, f"nothing paused during {step}"
        assert waiting.status["conditions"][-1]["reason"] == "UpgradeInProgress" and step in waiting.status["message"]
    comparing = decide_rewind(rewind(), Observed(job=upgrading("Comparing"), app=APP, chosen=(POINT,)), NOW)
    assert comparing.commands == (Pause("rewind/rmi-before-outage"),), "paused: the job gives its upgrade up"


def test_a_rewind_stopping_a_job_that_began_its_switch_waits_or_fails_by_name() -> None:
    held = decide_rewind(rewind("Stopping"), Observed(job=upgrading("Draining"), app=None), NOW)
    assert held.status["phase"] == "Stopping" and held.commands == (Pause("rewind/rmi-before-outage"),)
    assert "only forward is safe" in held.status["message"]
    switched = decide_rewind(rewind("Stopping"), Observed(job=upgrading("Promoting"), app=None), NOW)
    assert switched.status["phase"] == "Failed" and "restore points chosen are blue's" in switched.status["message"]
    assert [e.reason for e in switched.events] == ["UpgradedMeanwhile"]


def test_restoring_renders_the_restore_application_with_the_jobs_config_and_waits_for_it() -> None:
    rw = rewind("Restoring")
    plan = decide_rewind(rw, Observed(job=job(), app=None), NOW)
    (run,) = plan.commands
    assert isinstance(run, RunRestore) and plan.next_phase is None
    assert plan.status["restoreApplicationName"] == "rmi-before-outage-rewind"
    app = run.app
    assert app["metadata"]["name"] == "rmi-before-outage-rewind"
    assert app["metadata"]["ownerReferences"][0]["kind"] == "Rewind"
    assert app["spec"]["arguments"][0] == "restore" and app["spec"]["restartPolicy"] == {"type": "Never"}
    assert app["spec"]["driver"]["serviceAccount"] == job().spec.service_account, "the job's credentials"
    assert app["spec"]["volumes"][0]["configMap"]["name"] == run.config_map["metadata"]["name"]
    cfg = parse_config(json.loads(run.config_map["data"]["job.json"]))
    assert cfg.checkpoint.location == rw.status.checkpoint_location  # type: ignore[union-attr]
    assert cfg.checkpoint.external is not None and cfg.checkpoint.external.location == "s3://lake/kappa-snapshots/rmi"
    assert cfg.restore is not None and cfg.restore.reset_sinks
    assert [(p.sink, p.batch_id, p.query_id) for p in cfg.restore.points] == [("attributed_plays", 41, "q-1")]
    no_reset = decide_rewind(rewind("Restoring", resetSinks=False), Observed(job=job(), app=None), NOW)
    (run,) = no_reset.commands
    assert isinstance(run, RunRestore) and not json.loads(run.config_map["data"]["job.json"])["restore"]["resetSinks"]

    for state in ("", "SUBMITTED", "RUNNING"):
        waiting = decide_rewind(rw, Observed(job=job(), app=None, restore_app=restore_app(state)), NOW)
        assert waiting.status["phase"] == "Restoring" and not waiting.commands and waiting.next_phase is None


def test_restoring_ends_on_the_report_resuming_or_failed_naming_the_reason() -> None:
    rw = rewind("Restoring", downstream=False)
    done = decide_rewind(rw, Observed(job=job(), app=None, restore_app=restore_app("COMPLETED"), report=report()), NOW)
    assert done.next_phase == "Resuming" and not done.commands
    assert done.status["restores"][0]["filesRemoved"] == 3 and done.status["restores"][0]["table"] == "t"
    gone = "sink attributed_plays: the snapshot of batch 41 is gone from s3://x (retention?)"
    refused = decide_rewind(
        rw, Observed(job=job(), app=None, restore_app=restore_app("FAILED"), report=report(error=gone)), NOW
    )
    assert refused.status["phase"] == "Failed" and refused.events[0].reason == "RestoreFailed"
    assert gone in refused.status["message"] and "delete this Rewind" in refused.status["message"]
    crashed = decide_rewind(rw, Observed(job=job(), app=None, restore_app=restore_app("FAILED", "OOMKilled")), NOW)
    assert crashed.status["phase"] == "Failed" and "OOMKilled" in crashed.status["message"]
    silent = decide_rewind(rw, Observed(job=job(), app=None, restore_app=restore_app("COMPLETED")), NOW)
    assert silent.status["phase"] == "Failed" and "without a report" in silent.status["message"]


def test_resuming_moves_the_checkpoint_and_succeeds_once_the_job_runs_from_it() -> None:
    rw = rewind("Resuming")
    location = rw.status.checkpoint_location  # type: ignore[union-attr]
    paused = job(annotations={PAUSED_ANNOTATION: "rewind/rmi-before-outage"})
    first = decide_rewind(rw, Observed(job=paused, app=None), NOW)
    assert first.commands == (Resume(location),) and first.status["phase"] == "Resuming"  # type: ignore[arg-type]
    moved = job(annotations={CHECKPOINT_ANNOTATION: location})  # type: ignore[dict-item]
    assert decide_rewind(rw, Observed(job=moved, app=None), NOW).status["phase"] == "Resuming", "no app yet"
    done = decide_rewind(rw, Observed(job=moved, app=APP), NOW)
    assert done.status["phase"] == "Succeeded" and done.events[0].reason == "Resumed"
    again = decide_rewind(
        Rewind.model_validate({**rw.model_dump(by_alias=True), "status": done.status}),
        Observed(job=None, app=None),
        NOW,
    )
    assert again.status["phase"] == "Succeeded" and not again.commands, "a finished rewind does nothing"


def test_a_deleted_job_fails_the_rewind() -> None:
    for phase in ("Stopping", "Resuming"):
        assert decide_rewind(rewind(phase), Observed(job=None, app=None), NOW).status["phase"] == "Failed"


def downstream_job() -> StreamingJob:
    up = job()
    sources = copy.deepcopy(load("rmi-streamingjob.yaml")["spec"]["sources"])
    sources = {"plays": {**sources["impressions"], "live": {"kind": "icebergLive", "table": "marts.attributed_plays"}}}
    return job("plays-per-title", sources=sources, catalogs=up.spec.model_dump(by_alias=True)["catalogs"])


def test_downstream_jobs_are_those_reading_a_sink_table_of_the_same_catalog() -> None:
    up, down = job(), downstream_job()
    assert reads_from(up, down) and not reads_from(down, up)
    elsewhere = job("other", catalogs={"default": {"type": "rest", "uri": "http://another:8181"}})
    assert downstream_of(up, [up, down, elsewhere]) == (down,)
    seen = Observed(job=up, app=None, downstream=(down,), restore_app=restore_app("COMPLETED"), report=report())
    plan = decide_rewind(rewind("Restoring"), seen, NOW)
    (child,) = plan.commands
    assert isinstance(child, RewindDownstream) and plan.next_phase == "Resuming"
    assert plan.status["downstream"] == ["rmi-before-outage-plays-per-title"]
    manifest = child.manifests[0]
    assert manifest["metadata"]["name"] == "rmi-before-outage-plays-per-title"
    assert manifest["spec"]["target"] == {"time": POINT.committed_at}, "to before the first output removed upstream"
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "rw-uid-12345"
    Rewind.model_validate(json.loads(json.dumps(manifest)))


def test_the_job_is_stopped_while_paused_and_resumes_from_the_moved_checkpoint() -> None:
    paused = job(annotations={PAUSED_ANNOTATION: "rewind/x"})
    plan = decide_streaming_job(paused, APP, NOW)
    assert plan.delete_app and plan.status["phase"] == "Rewinding" and plan.create_app is None
    assert decide_streaming_job(paused, None, NOW).create_app is None, "not recreated while paused"
    moved = job(annotations={CHECKPOINT_ANNOTATION: "s3a://lake/checkpoints/rmi/rewinds/x-1"})
    created = decide_streaming_job(moved, None, NOW)
    assert created.create_app is not None and created.config_map is not None
    cfg = json.loads(created.config_map["data"]["job.json"])
    assert cfg["checkpoint"]["location"] == "s3a://lake/checkpoints/rmi/rewinds/x-1"
    assert created.status["checkpointLocation"] == "s3a://lake/checkpoints/rmi/rewinds/x-1"


def test_a_step_refused_for_good_fails_and_says_how_to_get_the_job_back() -> None:
    plan = step_failed(rewind("Restoring"), "Restoring", "the snapshot of batch 41 is gone", NOW)
    assert plan.status["phase"] == "Failed" and plan.events[0].reason == "RestoringFailed"
    assert "batch 41 is gone" in plan.status["message"] and "delete this Rewind" in plan.status["message"]


# --- the Kafka cascade (seed 003, caveat 3) ---------------------------------------------------


def kafka_upstream() -> StreamingJob:
    """rmi writing its plays to a topic as well (a Kafka sink)."""
    servers = "kafka-0:9092,kafka-1:9092"
    plays = {"kind": "kafka", "bootstrapServers": servers, "topic": "plays", "key": ["playback_id", "impression_id"]}
    return job(sinks={"attributed_plays": plays})


def kafka_reader(name: str, **live: Any) -> StreamingJob:
    sources = copy.deepcopy(load("rmi-streamingjob.yaml")["spec"]["sources"])
    sources = {"plays": {**sources["impressions"], "live": {"kind": "kafka", **live}}}
    return job(name, sources=sources)


def kafka_report() -> RestoreReport:
    undone = [
        OffsetRange(topic="plays", partition=0, start=120, end=200),
        OffsetRange(topic="plays", partition=2, start=7, end=9),
    ]
    done = [
        SinkRestored(
            sink="attributed_plays",
            batch_id=41,
            query_id="q-1",
            undone_records=undone,
            bootstrap_servers="kafka-0:9092",
        )
    ]
    return report().model_copy(update={"sinks": done})


def test_a_job_reading_the_topic_of_a_kafka_sink_on_the_same_brokers_is_downstream() -> None:
    up = kafka_upstream()
    by_topic = kafka_reader("by-topic", bootstrapServers="kafka-1:9092", topic="plays")
    by_pattern = kafka_reader("by-pattern", bootstrapServers="KAFKA-0:9092", topicPattern="pl.*")
    other_cluster = kafka_reader("other-cluster", bootstrapServers="elsewhere:9092", topic="plays")
    other_topic = kafka_reader("other-topic", bootstrapServers="kafka-0:9092", topic="plays-eu")
    jobs = [up, by_topic, by_pattern, other_cluster, other_topic]
    assert downstream_of(up, jobs) == (by_topic, by_pattern)
    assert not reads_from(by_topic, up)


def test_a_cascade_records_the_undone_records_and_has_the_downstream_rewind_skip_exactly_them() -> None:
    up, down = kafka_upstream(), kafka_reader("plays-per-title", bootstrapServers="kafka-0:9092", topic="plays")
    seen = Observed(job=up, app=None, downstream=(down,), restore_app=restore_app("COMPLETED"), report=kafka_report())
    plan = decide_rewind(rewind("Restoring", downstream=True), seen, NOW)
    (restored,) = plan.status["restores"]
    assert restored["undoneRecords"] == {
        "topic": "plays",
        "partitions": [{"partition": 0, "start": 120, "end": 200}, {"partition": 2, "start": 7, "end": 9}],
    }
    (child,) = plan.commands
    assert isinstance(child, RewindDownstream)
    manifest = child.manifests[0]
    assert manifest["spec"]["target"] == {"beforeSkippedOffsets": True}, "by offsets: the jobs' batches are not in step"
    assert manifest["spec"]["skipOffsets"] == [restored["undoneRecords"]]
    child_rw = Rewind.model_validate(json.loads(json.dumps(manifest)))

    # the child resumes its job skipping those records, keeping ranges an earlier cascade set
    earlier = [{"topic": "plays", "partition": 1, "start": 5, "end": 6}]
    status = {
        "phase": "Resuming",
        "restores": [POINT.model_dump(by_alias=True)],
        "checkpointLocation": "s3a://lake/checkpoints/plays-per-title/rewinds/x",
    }
    child_rw = Rewind.model_validate({**child_rw.model_dump(by_alias=True), "status": status})
    paused = kafka_reader("plays-per-title", bootstrapServers="kafka-0:9092", topic="plays").model_copy(
        update={"metadata": down.metadata.model_copy(update={"annotations": {SKIP_ANNOTATION: json.dumps(earlier)}})}
    )
    (resume,) = decide_rewind(child_rw, Observed(job=paused, app=None), NOW).commands
    assert isinstance(resume, Resume) and resume.location == "s3a://lake/checkpoints/plays-per-title/rewinds/x"
    assert resume.skip is not None
    assert json.loads(resume.skip) == [
        *earlier,
        {"topic": "plays", "partition": 0, "start": 120, "end": 200},
        {"topic": "plays", "partition": 2, "start": 7, "end": 9},
    ]
    resumed = paused.model_copy(
        update={
            "metadata": paused.metadata.model_copy(
                update={"annotations": {SKIP_ANNOTATION: resume.skip, CHECKPOINT_ANNOTATION: resume.location}}
            )
        }
    )
    done = decide_rewind(child_rw, Observed(job=resumed, app=APP), NOW)
    assert done.status["phase"] == "Succeeded" and "skipping 2 offset range(s)" in done.status["message"]

    # and the job's config carries them to its Kafka source
    cfg = streaming_job_config(resumed)
    assert [r.model_dump() for r in cfg.sources["plays"].skip] == json.loads(resume.skip)  # type: ignore[union-attr]


def test_an_iceberg_downstream_of_a_kafka_cascade_gets_no_skip() -> None:
    up, down = kafka_upstream(), downstream_job()
    seen = Observed(job=up, app=None, downstream=(down,), restore_app=restore_app("COMPLETED"), report=kafka_report())
    (child,) = decide_rewind(rewind("Restoring", downstream=True), seen, NOW).commands
    assert isinstance(child, RewindDownstream) and "skipOffsets" not in child.manifests[0]["spec"]


def test_skip_ranges_are_refused_backwards_and_an_offsets_target_needs_them() -> None:
    bad = {"topic": "plays", "partitions": [{"partition": 0, "start": 9, "end": 3}]}
    with pytest.raises(ValidationError, match="end 3 is before start 9"):
        rewind(skipOffsets=[bad])
    with pytest.raises(ValidationError, match=r"target\.beforeSkippedOffsets needs spec\.skipOffsets"):
        rewind(target={"beforeSkippedOffsets": True})
    with pytest.raises(ValidationError, match=r"set exactly one of target\.time, target\.batchId"):
        rewind(target={"batchId": 3, "beforeSkippedOffsets": True})


def test_a_checkpoint_read_none_of_the_skipped_records_when_its_offsets_are_at_most_their_start() -> None:
    starts = {("plays", 0): 120, ("plays", 2): 7}
    assert read_none_of({"plays": {0: 120, 1: 999, 2: 3}}, starts)
    assert read_none_of({"plays": {0: -2}, "other": {0: 10**6}}, starts), "not read yet; other topics"
    assert not read_none_of({"plays": {0: 121, 2: 3}}, starts)


def test_undone_records_in_more_partitions_than_skip_offsets_holds_fail_the_rewind_never_skip_part() -> None:
    many = [OffsetRange(topic="plays", partition=p, start=0, end=1) for p in range(SKIP_PARTITIONS_MAX + 1)]
    done = [SinkRestored(sink="attributed_plays", batch_id=41, query_id="q-1", undone_records=many)]
    wide = kafka_report().model_copy(update={"sinks": done})
    up, down = kafka_upstream(), kafka_reader("plays-per-title", bootstrapServers="kafka-0:9092", topic="plays")
    seen = Observed(job=up, app=None, downstream=(down,), restore_app=restore_app("COMPLETED"), report=wide)
    plan = decide_rewind(rewind("Restoring", downstream=True), seen, NOW)
    assert plan.status["phase"] == "Failed" and not plan.commands
    assert f"in {SKIP_PARTITIONS_MAX + 1} partitions" in plan.status["message"]
    assert "rewind the jobs reading it by hand" in plan.status["message"]
