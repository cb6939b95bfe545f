"""Issue 30 item 4: a live job's health (pure decisions). Progress in status and gauges, the
Stalled and Lagging conditions, restarts with exponential backoff and a cap, the Spark UI."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kappa_operator.models.streaming_job import RestartSpec, StreamingJob
from kappa_operator.reconcile.health import decide_health, health_gauges
from kappa_operator.reconcile.restarts import backoff
from kappa_operator.reconcile.streaming_job import decide_streaming_job, spark_ui
from kappa_operator.service.metrics import OperatorMetrics
from spark_app.contract.reports.progress import PartitionLag, ProgressReport, from_progress

ROOT = Path(__file__).resolve().parents[4]
T0 = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)


def rfc(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def job(status: dict[str, Any] | None = None, **spec: Any) -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    data["metadata"].update(uid="u1", generation=2)
    data["spec"].update(spec)
    if status is not None:
        data["status"] = status
    return StreamingJob.model_validate(data)


def running_since(t: datetime, **more: Any) -> dict[str, Any]:
    ready = {"type": "Ready", "status": "True", "reason": "Running", "message": "", "lastTransitionTime": rfc(t)}
    return {"phase": "Running", "applicationState": "RUNNING", "conditions": [ready], **more}


def report(sink: str, at: datetime, heartbeat: datetime | None = None, **fields: Any) -> ProgressReport:
    return ProgressReport(sink=sink, batch_id=7, at=at, heartbeat_at=heartbeat, **fields)


SINK = "attributed_plays"  # the example's one sink


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}


def test_a_progress_event_becomes_the_report_status_shows() -> None:
    progress = {
        "name": "rmi-enriched",
        "batchId": 12,
        "numInputRows": 900,
        "inputRowsPerSecond": 150.0,
        "processedRowsPerSecond": 300.5,
        "batchDuration": 3000,
        "stateOperators": [{"numRowsTotal": 40}, {"numRowsTotal": 2}],
        "eventTime": {"watermark": "2026-11-26T09:30:00.000Z"},
        "sources": [],
    }
    r = from_progress(SINK, progress, T0)
    assert (r.batch_id, r.input_rows, r.state_rows, r.batch_duration_ms) == (12, 900, 42, 3000)
    assert r.watermark == datetime(2026, 11, 26, 9, 30, tzinfo=UTC)
    assert (
        from_progress(SINK, {**progress, "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}}, T0).watermark is None
    )
    plan = decide_health(job(running_since(T0)), [r], T0 + timedelta(minutes=1))
    (shown,) = plan.status["progress"]
    assert shown == {
        "sink": SINK,
        "batchId": 12,
        "at": "2026-11-26T10:00:00Z",
        "lastHeartbeat": "2026-11-26T10:00:00Z",
        "inputRowsPerSecond": 150.0,
        "processedRowsPerSecond": 300.5,
        "batchDurationMs": 3000,
        "stateRows": 42,
        "watermark": "2026-11-26T09:30:00Z",
    }
    assert plan.status["lastProgressAt"] == "2026-11-26T10:00:00Z" and plan.status["watermark"] == shown["watermark"]


def test_silence_past_the_timeout_is_stalled_and_an_idle_heartbeat_is_not() -> None:
    j = job(running_since(T0), health={"progressTimeout": "10m"})
    fine = decide_health(j, [report(SINK, T0 + timedelta(minutes=2))], T0 + timedelta(minutes=11))
    assert conditions(fine.status)["Stalled"] == ("False", "Progressing") and fine.events == ()
    silent = decide_health(j, [report(SINK, T0 + timedelta(minutes=2))], T0 + timedelta(minutes=13))
    assert conditions(silent.status)["Stalled"] == ("True", "NoProgress")
    assert [(e.type, e.reason) for e in silent.events] == [("Warning", "Stalled")]
    assert SINK in silent.events[0].message and "10m" in silent.events[0].message
    idle = report(SINK, T0 + timedelta(minutes=2), heartbeat=T0 + timedelta(minutes=12))
    assert conditions(decide_health(j, [idle], T0 + timedelta(minutes=13)).status)["Stalled"][0] == "False"
    nothing = decide_health(j, [], T0 + timedelta(minutes=11))
    assert conditions(nothing.status)["Stalled"] == ("True", "NoProgress"), "never reported since it runs"
    again = job({**running_since(T0), "conditions": silent.status["conditions"]})
    back = decide_health(again, [report(SINK, T0 + timedelta(minutes=14))], T0 + timedelta(minutes=15))
    assert conditions(back.status)["Stalled"] == ("False", "Progressing")
    assert [(e.type, e.reason) for e in back.events] == [("Normal", "Progressing")]


def test_a_report_from_before_a_restart_counts_from_the_restart() -> None:
    restarted = job(running_since(T0 + timedelta(hours=1)))
    old = report(SINK, T0)
    plan = decide_health(restarted, [old], T0 + timedelta(hours=1, minutes=5))
    assert conditions(plan.status)["Stalled"][0] == "False"


def test_a_job_that_does_not_run_is_not_assessed_and_a_refused_spec_stays_stalled() -> None:
    stopped = job({"phase": "BackingOff", "conditions": []})
    assert "conditions" not in decide_health(stopped, [], T0).status, "no condition written"
    refused = running_since(T0)
    refused["conditions"].append(
        {"type": "Stalled", "status": "True", "reason": "InvalidSpec", "message": "x", "lastTransitionTime": rfc(T0)}
    )
    plan = decide_health(job(refused), [report(SINK, T0)], T0 + timedelta(minutes=1))
    assert conditions(plan.status)["Stalled"] == ("True", "InvalidSpec")


def test_lagging_by_kafka_records_or_by_watermark() -> None:
    j = job(running_since(T0), health={"maxKafkaLag": 100, "maxWatermarkDelay": "30m"})
    behind = [PartitionLag(topic="t", partition=0, offset=0, latest=150)]
    plan = decide_health(j, [report(SINK, T0, partitions=behind)], T0 + timedelta(minutes=1))
    assert conditions(plan.status)["Lagging"] == ("True", "Behind")
    assert "150 Kafka records" in plan.events[0].message
    old_mark = report(SINK, T0, watermark=T0 - timedelta(hours=1))
    plan = decide_health(j, [old_mark], T0 + timedelta(minutes=1))
    assert conditions(plan.status)["Lagging"] == ("True", "Behind") and "maxWatermarkDelay" in plan.events[0].message
    fresh = report(SINK, T0, watermark=T0 - timedelta(minutes=5))
    assert conditions(decide_health(j, [fresh], T0 + timedelta(minutes=1)).status)["Lagging"][0] == "False"


def test_progress_and_health_are_gauges() -> None:
    metrics = OperatorMetrics()
    r = report(SINK, T0, input_rows_per_second=5.0, batch_duration_ms=1500, state_rows=9, watermark=T0)
    metrics.resources.progress("ads", "rmi", health_gauges([r]), {"Stalled": True, "Lagging": False})
    text = generate_latest(metrics.registry).decode()
    labels = f'namespace="ads",sink="{SINK}",streamingjob="rmi"'
    assert f"kappa_streamingjob_batch_duration_seconds{{{labels}}} 1.5" in text
    assert f"kappa_streamingjob_state_rows{{{labels}}} 9.0" in text
    (mark,) = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kappa_streamingjob_watermark_timestamp_seconds"
    ]
    assert mark == T0.timestamp()
    assert 'kappa_streamingjob_condition{condition="Stalled",namespace="ads",streamingjob="rmi"} 1.0' in text
    metrics.resources.forget("StreamingJob", "ads", "rmi")
    assert "kappa_streamingjob_state_rows{" not in generate_latest(metrics.registry).decode()


def test_backoff_grows_by_the_multiplier_up_to_the_cap() -> None:
    spec = RestartSpec(initial_backoff="10s", max_backoff="5m", multiplier=2.0)
    assert [backoff(spec, n).total_seconds() for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]
    assert backoff(spec, 10_000).total_seconds() == 300, "no overflow however long it loops"


def failed_app(j: StreamingJob, error: str = "driver OOM") -> dict[str, Any]:
    plan = decide_streaming_job(j, None, rfc(T0))
    assert plan.create_app is not None
    return {**plan.create_app, "status": {"applicationState": {"state": "FAILED", "errorMessage": error}}}


def test_a_failed_application_backs_off_then_restarts_from_its_checkpoint() -> None:
    j = job(running_since(T0), restart={"initialBackoff": "10s", "maxBackoff": "1m", "resetAfter": "30m"})
    app = failed_app(j)
    first = decide_streaming_job(j, app, rfc(T0 + timedelta(minutes=1)))
    assert first.status["phase"] == "BackingOff" and first.status["restarts"] == 1 and not first.delete_app
    assert first.status["nextRestartAt"] == rfc(T0 + timedelta(minutes=1, seconds=10))
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "BackingOff")]
    assert "driver OOM" in first.status["message"]
    waiting = job({**running_since(T0), **first.status})
    assert decide_streaming_job(waiting, app, rfc(T0 + timedelta(minutes=1, seconds=5))).status == {}, "not yet"
    due = decide_streaming_job(waiting, app, rfc(T0 + timedelta(minutes=1, seconds=10)))
    assert due.delete_app and due.status["phase"] == "Restarting" and due.create_app is None
    gone = decide_streaming_job(job({**first.status, "phase": "Restarting"}), None, rfc(T0 + timedelta(minutes=2)))
    assert gone.create_app is not None, "recreated once deleted"
    assert gone.create_app["spec"]["restartPolicy"] == {"type": "Never"}, "the operator restarts, not Spark's"


def test_failing_again_soon_doubles_the_delay_and_after_a_long_run_starts_over() -> None:
    spec = {"initialBackoff": "10s", "maxBackoff": "1m", "resetAfter": "30m"}
    soon = job(running_since(T0, restarts=3), restart=spec)
    plan = decide_streaming_job(soon, failed_app(soon), rfc(T0 + timedelta(minutes=2)))
    assert plan.status["restarts"] == 4 and plan.status["nextRestartAt"] == rfc(T0 + timedelta(minutes=2, seconds=60))
    never_ran = job({"phase": "Submitted", "restarts": 2, "conditions": []}, restart=spec)
    assert decide_streaming_job(never_ran, failed_app(never_ran), rfc(T0)).status["restarts"] == 3
    long_run = job(running_since(T0, restarts=5), restart=spec)
    plan = decide_streaming_job(long_run, failed_app(long_run), rfc(T0 + timedelta(hours=1)))
    assert plan.status["restarts"] == 1 and plan.status["nextRestartAt"] == rfc(T0 + timedelta(hours=1, seconds=10))


def test_the_restart_limit_leaves_it_failed() -> None:
    j = job(running_since(T0, restarts=2), restart={"maxAttempts": 2})
    app = failed_app(j)
    plan = decide_streaming_job(j, app, rfc(T0 + timedelta(minutes=1)))
    assert plan.status["phase"] == "Failed" and not plan.delete_app
    assert [e.reason for e in plan.events] == ["RestartLimitReached"] and "maxAttempts" in plan.status["message"]
    stays = job({**running_since(T0, restarts=2), **plan.status})
    assert decide_streaming_job(stays, app, rfc(T0 + timedelta(minutes=5))).status == {}


def test_a_submission_that_found_its_driver_pod_is_restarted_without_counting_it() -> None:
    """The Spark operator's double submission (kubeflow/spark-operator#2788): at the limit, the
    job is restarted again with the same count; another failure then fails it."""
    j = job(running_since(T0, restarts=2), restart={"maxAttempts": 2})
    twice = "failed to submit spark application: failed to run spark-submit: driver pod already exist"
    plan = decide_streaming_job(j, failed_app(j, twice), rfc(T0 + timedelta(minutes=1)))
    assert plan.status["phase"] == "BackingOff" and plan.status["restarts"] == 2, plan.status
    assert "not counted" in plan.status["message"]
    assert decide_streaming_job(j, failed_app(j), rfc(T0 + timedelta(minutes=1))).status["phase"] == "Failed"


def test_the_spark_ui_address_comes_from_the_spark_operators_driver_info() -> None:
    app = {"status": {"driverInfo": {"webUIServiceName": "rmi-ui-svc", "webUIPort": 4040}}}
    assert spark_ui(app, "ads") == "http://rmi-ui-svc.ads.svc:4040"
    ingress = {"status": {"driverInfo": {"webUIServiceName": "x", "webUIIngressAddress": "ui.example.com/ads/rmi"}}}
    assert spark_ui(ingress, "ads") == "http://ui.example.com/ads/rmi"
    assert spark_ui({"status": {}}, "ads") is None
    j = job(running_since(T0))
    running = {**failed_app(j), "status": {"applicationState": {"state": "RUNNING"}, **app["status"]}}
    namespace = j.metadata.namespace
    assert decide_streaming_job(j, running, rfc(T0)).status["sparkUI"] == f"http://rmi-ui-svc.{namespace}.svc:4040"


def test_the_progress_look_decides_a_settled_job_on_the_watchs_copy_and_a_change_again_on_a_fresh_read() -> None:
    """Issue 62: a settled job's look sends no request; one that would change status reads the
    object again first (``handlers.progress``: the conditions are one list, written whole)."""
    from kappa_operator.handlers.progress import JobReports, _shown

    status = running_since(T0)
    reports = JobReports([report(SINK, T0 + timedelta(minutes=2))], None, None)
    first = _shown(job(status), reports, None, T0 + timedelta(minutes=3))
    assert not first.moves_nothing({"metadata": {"generation": 2}, "status": status}), "no progress shown yet"
    settled = {**status, **first.fields}
    body = {"metadata": {"generation": 2}, "status": settled}
    assert _shown(job(settled), reports, None, T0 + timedelta(minutes=4)).moves_nothing(body)
    newer = JobReports([report(SINK, T0 + timedelta(minutes=3))], None, None)
    assert not _shown(job(settled), newer, None, T0 + timedelta(minutes=4)).moves_nothing(body), "a new batch"
    silent = _shown(job(settled, health={"progressTimeout": "10m"}), reports, None, T0 + timedelta(minutes=13))
    assert silent.events and not silent.moves_nothing(body), "Stalled now: an Event and a condition"
    unreadable = _shown(job(settled), None, "OSError: no route", T0 + timedelta(minutes=4))
    assert not unreadable.moves_nothing(body), "ProgressUnknown turns True"
