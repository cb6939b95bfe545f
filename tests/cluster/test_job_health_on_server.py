"""A live job's health through the operator on the real server (issue 30 item 4): its
driver's progress report becomes ``status.progress``, the job's watermark and last progress,
the ``Stalled`` condition with a Warning Event, the gauges, and the Spark UI address the Spark
operator published. The report's making is tested on a real broker and real Spark in
tests/spark/test_kafka_broker.py; the decisions (Stalled cleared by a new batch too) in
tests/unit/kappa_operator/reconcile/test_job_health.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from spark_app.contract.reports.progress import ProgressReport, report_name
from tests.cluster.conftest import LIVE_PROGRESS_INTERVAL
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import create, example, in_phase, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ = "StreamingJob"


def test_a_silent_query_is_stalled_with_its_progress_and_ui_in_status(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = example(
        "rmi-streamingjob.yaml",
        ns,
        checkpoints={"location": str(tmp_path / "ck")},
        health={"progressTimeout": "5s"},
    )
    sink = next(iter(job["spec"]["sinks"]))
    last_batch = datetime.now(UTC) - timedelta(hours=1)
    report = ProgressReport(
        sink=sink,
        batch_id=41,
        at=last_batch,
        input_rows_per_second=120.0,
        processed_rows_per_second=240.0,
        batch_duration_ms=2500,
        state_rows=77,
        watermark=last_batch - timedelta(minutes=30),
    )
    reports = tmp_path / "ck" / "live" / "_kappa"
    reports.mkdir(parents=True)
    (reports / report_name(sink)).write_text(report.model_dump_json())
    create(plane, job)
    eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Submitted"), "submitted")
    driver = {"webUIServiceName": "rmi-ui-svc", "webUIPort": 4040}
    body = {"status": {"applicationState": {"state": "RUNNING"}, "driverInfo": driver}}
    plane.admin.ok(plane.admin.merge(path_of("SparkApplication", ns, "rmi") + "/status", body), "RUNNING")
    s = eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Running"), "running")
    assert s["sparkUI"] == f"http://rmi-ui-svc.{ns}.svc:4040", "the driver's UI, from the Spark operator"

    def stalled() -> dict[str, object] | None:
        now = status(plane, SJ, ns, "rmi")
        kinds = {c["type"]: (c["status"], c["reason"]) for c in now.get("conditions") or []}
        return now if kinds.get("Stalled") == ("True", "NoProgress") else None

    # the report is an hour old: Stalled once the job has run 5 s, at the operator's next look
    s = eventually(stalled, "condition Stalled", timeout=2 * LIVE_PROGRESS_INTERVAL + 15)
    (progress,) = s["progress"]
    assert progress["batchId"] == 41 and progress["stateRows"] == 77 and progress["batchDurationMs"] == 2500
    assert s["watermark"] == (last_batch - timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert s["lastProgressAt"] == last_batch.strftime("%Y-%m-%dT%H:%M:%SZ")

    def warned() -> list[dict[str, Any]] | None:  # Events are posted from a thread of their own, after status
        answer = plane.admin.get(f"/api/v1/namespaces/{ns}/events")
        return [e for e in plane.admin.ok(answer, "events")["items"] if e["reason"] == "Stalled"] or None

    (event, *_) = eventually(warned, "the Stalled Warning event", timeout=60)
    assert event["type"] == "Warning" and sink in event["message"]
    metrics = in_process_operator.context.metrics
    assert metrics is not None
    text = generate_latest(metrics.registry).decode()
    assert f'kappa_streamingjob_condition{{condition="Stalled",namespace="{ns}",streamingjob="rmi"}} 1.0' in text
    assert f'kappa_streamingjob_state_rows{{namespace="{ns}",sink="{sink}",streamingjob="rmi"}} 77.0' in text


def test_records_lost_before_the_first_read_are_a_condition_and_one_warning(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, tmp_path: Path
) -> None:
    """Issue 44, case 5, on the operator's path: the driver's report carries what it found at
    the job's first start (tests/spark/test_kafka_edges.py makes that report on a real broker)."""
    plane, ns = control_plane, fresh_namespace
    job = example("rmi-streamingjob.yaml", ns, checkpoints={"location": str(tmp_path / "ck")})
    sink = next(iter(job["spec"]["sinks"]))
    lost = (
        "source impressions: 12 records were removed from the topic (its retention, or a deletion) before this "
        "job first read it: impressions[0] from offset 12; they are in no output of this job and no archive it writes"
    )
    now = datetime.now(UTC)
    report = ProgressReport(sink=sink, batch_id=0, at=now, notices=[lost])
    reports = tmp_path / "ck" / "live" / "_kappa"
    reports.mkdir(parents=True)
    (reports / report_name(sink)).write_text(report.model_dump_json())
    create(plane, job)
    eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Submitted"), "submitted")
    body = {"status": {"applicationState": {"state": "RUNNING"}, "driverInfo": {}}}
    plane.admin.ok(plane.admin.merge(path_of("SparkApplication", ns, "rmi") + "/status", body), "RUNNING")

    def condition() -> dict[str, object] | None:
        found = [c for c in status(plane, SJ, ns, "rmi").get("conditions") or [] if c["type"] == "RecordsLost"]
        return found[0] if found and found[0]["status"] == "True" else None

    cond = eventually(condition, "condition RecordsLost", timeout=2 * LIVE_PROGRESS_INTERVAL + 15)
    assert cond["reason"] == "RetentionBeforeRead" and cond["message"] == lost
    time.sleep(LIVE_PROGRESS_INTERVAL + 1)  # another look: the same loss is not said again
    answer = plane.admin.get(f"/api/v1/namespaces/{ns}/events")
    warned = [e for e in plane.admin.ok(answer, "events")["items"] if e["reason"] == "RecordsLost"]
    assert len(warned) == 1 and warned[0]["type"] == "Warning" and warned[0]["message"] == lost
    assert warned[0].get("count", 1) == 1
