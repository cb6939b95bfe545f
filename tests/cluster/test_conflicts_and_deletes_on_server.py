"""Issue 14's defects and issue 27's Fix 8, each through the operator (``kappa operator`` in this
process, with the chart's ServiceAccount) on the real kube-apiserver: status only through
/status, 409 on a taken name, schema and CEL, finalizers, garbage collection and Events are the
server's own. Each test names the defect it would have caught; the pure decisions behind them
are in tests/unit.

Not here, because another test on the real server covers it: a running Backfill's window
cannot be edited (issue 14, defect 6: tests/cluster/test_crds_on_server.py
``test_backfill_spec_is_immutable_on_the_server``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from kappa_operator.handlers.backfill import PROGRESS_INTERVAL
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.models.common import SPARK_CONF_MAX
from kappa_operator.reconcile.backfill.intent import NONCE
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import (
    APP,
    NO_RESTART,
    absent,
    conditions,
    create,
    events,
    example,
    get,
    in_phase,
    items,
    reasons,
    spark_state,
    status,
)

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ, BF, RW = "StreamingJob", "Backfill", "Rewind"
BF_APP, BF_SECRET = "rmi-outage-backfill", "rmi-outage-backfill-coordinator"


def said(plane: ControlPlane, ns: str, name: str, reason: str, times: int | None = None) -> bool:
    """An Event of ``reason`` about ``name`` (``times`` occurrences exactly, if given)."""
    seen = reasons(plane, ns, name).count(reason)
    return seen == times if times is not None else seen > 0


def delete(plane: ControlPlane, kind: str, ns: str, name: str) -> None:
    plane.admin.ok(plane.admin.delete(path_of(kind, ns, name)), f"delete {kind} {name}")


def unreachable_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    """s3:// and s3a:// locations on an S3 endpoint nothing listens on."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def test_defect_1_and_2_a_backfill_named_like_its_job(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    """Defect 1: the Backfill renders its own children and never touches the live job's;
    deleting it leaves the live application running. Defect 2: only submitted is not Ready;
    a failed one is Failed, not Ready."""
    plane, ns = control_plane, fresh_namespace
    create(plane, example("rmi-streamingjob.yaml", ns))
    live = eventually(lambda: get(plane, APP, ns, "rmi"), "the live application")
    spark_state(plane, ns, "rmi", "RUNNING")
    create(plane, example("rmi-backfill.yaml", ns, "rmi", jobRef={"name": "rmi"}, **NO_RESTART))
    eventually(lambda: get(plane, APP, ns, "rmi-backfill"), "the backfill's own application")
    assert get(plane, "ConfigMap", ns, "rmi-backfill-jobconfig") is not None
    app = get(plane, APP, ns, "rmi")
    assert app is not None and app["metadata"]["uid"] == live["metadata"]["uid"], "the live app is untouched"
    assert [r["kind"] for r in app["metadata"]["ownerReferences"]] == ["StreamingJob"]
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi", "Running"), "the backfill running")
    assert conditions(s)["Ready"] == "False", "submitted is not Ready"
    assert {c["observedGeneration"] for c in s["conditions"]} == {1}

    spark_state(plane, ns, "rmi-backfill", "FAILED")
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi", "Failed"), "the backfill failed")
    assert conditions(s) == {"Ready": "False", "Progressing": "False", "Succeeded": "False", "Failed": "True"}

    delete(plane, BF, ns, "rmi")
    eventually(lambda: absent(plane, BF, ns, "rmi"), "the backfill deleted")
    eventually(lambda: absent(plane, APP, ns, "rmi-backfill"), "its own application removed")
    app = get(plane, APP, ns, "rmi")
    assert app is not None and app["metadata"]["uid"] == live["metadata"]["uid"], "the live app survives"
    job = status(plane, SJ, ns, "rmi")
    assert job["phase"] == "Running" and conditions(job)["Ready"] == "True"


def test_defect_1_a_409_on_someone_elses_object_is_an_error_never_adoption(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    plane, ns = control_plane, fresh_namespace
    create(plane, example("rmi-streamingjob.yaml", ns))
    eventually(lambda: get(plane, APP, ns, "rmi"), "the live application")
    # a SparkApplication already holds the Backfill's name: another owner's (one that exists,
    # or the garbage collector would take the application away)
    theirs = create(plane, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": ns}})
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "theirs", "uid": theirs["metadata"]["uid"]}
    foreign = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": BF_APP, "namespace": ns, "ownerReferences": [owner]},
        "spec": {
            "type": "Python",
            "image": "theirs",
            "sparkVersion": "4.0.0",
            "mainApplicationFile": "local:///theirs.py",
            "driver": {},
            "executor": {},
        },
    }
    create(plane, foreign)
    spark_state(plane, ns, BF_APP, "RUNNING")
    create(plane, example("rmi-backfill.yaml", ns))

    def conflict() -> dict[str, Any] | None:
        s = status(plane, BF, ns, "rmi-outage")
        return s if any(c.get("reason") == "NameConflict" for c in s.get("conditions") or []) else None

    s = eventually(conflict, "NameConflict in the Backfill's status")
    assert "belongs to ConfigMap theirs" in s["message"] and "rename this Backfill" in s["message"]
    assert s["retries"] >= 1 and conditions(s)["Reconciling"] == "True"
    eventually(lambda: said(plane, ns, "rmi-outage", "NameConflict"), "an Event", 30)
    app = get(plane, APP, ns, BF_APP)
    assert app is not None and app["spec"]["image"] == "theirs", "never adopted, never rewritten"
    assert (s.get("progress") or "0%") == "0%", "another's RUNNING application is not our progress"

    delete(plane, BF, ns, "rmi-outage")
    eventually(lambda: absent(plane, BF, ns, "rmi-outage"), "the backfill deleted")
    assert get(plane, APP, ns, BF_APP) is not None, "deletes check ownership"


def test_defect_3_a_job_the_pipeline_refuses_says_so_on_the_object(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    plane, ns = control_plane, fresh_namespace
    job = example("rmi-streamingjob.yaml", ns)
    job["spec"]["sinks"]["attributed_plays"]["partitionBy"] = ["hour("]
    create(plane, job)
    s = eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Failed"), "Failed with the reason")
    assert "hour(" in s["message"] and conditions(s)["Ready"] == "False"
    assert [c["reason"] for c in s["conditions"] if c["type"] == "Ready"] == ["InvalidSpec"]
    eventually(lambda: said(plane, ns, "rmi", "InvalidSpec"), "an Event", 30)
    assert absent(plane, APP, ns, "rmi")
    # fixed by an edit: handled afresh
    fix = {"spec": {"sinks": {"attributed_plays": {"partitionBy": ["hour(playback_ts)"]}}}}
    plane.admin.ok(plane.admin.merge(path_of(SJ, ns, "rmi"), fix), "the fix")
    eventually(lambda: get(plane, APP, ns, "rmi"), "the application once the spec is fixed")


def test_defect_3_a_publish_report_on_unreachable_storage_shows_its_retries(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill's application completed (its driver validated and published), but the report
    it left (next to the checkpoint, s3a://lake/...) sits on an S3 endpoint nothing listens on:
    the Backfill stays Running and says why, with the attempt, and its timer keeps trying,
    instead of guessing an outcome (or publishing again in a second application)."""
    plane, ns = control_plane, fresh_namespace
    unreachable_storage(monkeypatch)
    create(plane, example("rmi-streamingjob.yaml", ns))
    create(plane, example("rmi-backfill.yaml", ns, publish={"enabled": True}))
    eventually(lambda: get(plane, APP, ns, BF_APP), "the backfill's application")
    spark_state(plane, ns, BF_APP, "COMPLETED")

    def retried() -> dict[str, Any] | None:
        s = status(plane, BF, ns, "rmi-outage")
        return s if s.get("retries") else None

    s = eventually(retried, "a retry count in status", 60)
    assert s["phase"] == "Running" and s["lastError"] and "attempt" in s["message"]
    assert absent(plane, APP, ns, f"{BF_APP}-publish"), "no publish application on a report it could not read"
    assert conditions(s)["Reconciling"] == "True" and conditions(s)["Succeeded"] == "False"
    eventually(lambda: said(plane, ns, "rmi-outage", "RetryingAfterError"), "an Event", 30)

    # and kopf's own line about the failed handler (its timer, deciding again) is an Event too,
    # not only a log line
    def kopf_failure_posted() -> bool:
        logged = [e for e in events(plane, ns, "rmi-outage") if e["reason"] == "Logging"]
        return any("failed" in str(e["message"]) for e in logged)

    eventually(kopf_failure_posted, "kopf's failure as an Event", 30)


def test_defect_7_and_issue_27_8_a_running_backfill_whose_job_is_deleted_says_so_and_finishes(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    """No change of its application follows the deletion: the Backfill still shows jobDeleted
    and a JobDeleted Warning within a tick of its timer, once, and keeps running on the copy
    kept at submission; when its application completes it succeeds and releases its group."""
    plane, ns, op = control_plane, fresh_namespace, in_process_operator
    group = f"{ns}.rmi-outage"
    create(plane, example("rmi-streamingjob.yaml", ns))
    create(plane, example("rmi-backfill.yaml", ns, publish={"enabled": False}))
    eventually(lambda: get(plane, APP, ns, BF_APP), "the backfill's application")
    spark_state(plane, ns, BF_APP, "RUNNING")
    eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Running"), "the backfill running")
    assert group in op.groups()
    app = get(plane, APP, ns, BF_APP)
    assert app is not None
    delete(plane, SJ, ns, "rmi")
    eventually(lambda: absent(plane, SJ, ns, "rmi"), "the StreamingJob deleted")

    def noticed() -> dict[str, Any] | None:
        s = status(plane, BF, ns, "rmi-outage")
        return s if s.get("jobDeleted") else None

    s = eventually(noticed, "status.jobDeleted without an application event", 2 * PROGRESS_INTERVAL + 2)
    assert s["phase"] == "Running", "it goes on with the configuration kept at submission"
    eventually(lambda: said(plane, ns, "rmi-outage", "JobDeleted"), "the Event", 5)
    (warning,) = [e for e in events(plane, ns, "rmi-outage") if e["reason"] == "JobDeleted"]
    assert warning["type"] == "Warning" and "kept at submission" in str(warning["message"])
    still = get(plane, APP, ns, BF_APP)
    assert still is not None and still["metadata"]["resourceVersion"] == app["metadata"]["resourceVersion"]
    assert group in op.groups() and get(plane, "Secret", ns, BF_SECRET) is not None
    time.sleep(PROGRESS_INTERVAL + 1)
    assert said(plane, ns, "rmi-outage", "JobDeleted", times=1), "said once, not on every tick"

    spark_state(plane, ns, BF_APP, "COMPLETED")
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Succeeded"), "Succeeded without its job")
    assert s["progress"] == "100%" and conditions(s)["Ready"] == "True" and s["jobDeleted"] is True
    assert group not in op.groups(), "the group is released"
    assert said(plane, ns, "rmi-outage", "JobDeleted", times=1), "said once, not on every application event"


def test_issue_27_8_a_failed_backfill_resumes_from_its_kept_copy_after_its_job_is_deleted(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    """Failed, its job then deleted, restartNonce bumped as its message says: it resumes from
    the copy kept at submission (not Pending forever); a failed one holds no credential; and
    when its application then vanishes it fails with JobDeleted, releasing group and Secret."""
    plane, ns, op = control_plane, fresh_namespace, in_process_operator
    group = f"{ns}.rmi-outage"
    create(plane, example("rmi-streamingjob.yaml", ns))
    create(plane, example("rmi-backfill.yaml", ns, publish={"enabled": False}, **NO_RESTART))
    eventually(lambda: get(plane, APP, ns, BF_APP), "the backfill's application")
    spark_state(plane, ns, BF_APP, "RUNNING")
    eventually(lambda: get(plane, "Secret", ns, BF_SECRET), "its coordinator credential")
    spark_state(plane, ns, BF_APP, "FAILED")
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Failed"), "the backfill failed")
    assert "bump spec.restartNonce" in s["message"]
    eventually(lambda: absent(plane, "Secret", ns, BF_SECRET), "the failed backfill's Secret removed")
    assert group in op.groups(), "kept for the resumption"

    delete(plane, SJ, ns, "rmi")
    eventually(lambda: absent(plane, SJ, ns, "rmi"), "the StreamingJob deleted")
    plane.admin.ok(plane.admin.merge(path_of(BF, ns, "rmi-outage"), {"spec": {"restartNonce": 1}}), "restartNonce")

    def resubmitted() -> dict[str, Any] | None:
        app = get(plane, APP, ns, BF_APP)
        return app if app and app["metadata"]["annotations"].get(NONCE) == "1" else None

    app = eventually(resubmitted, "the application submitted again from the kept copy", 20)
    assert [r["kind"] for r in app["metadata"]["ownerReferences"]] == ["Backfill"]
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Running"), "Running, not Pending")
    assert s["restartNonce"] == 1 and s["jobDeleted"] is True
    assert get(plane, "Secret", ns, BF_SECRET) is not None, "a new credential for the new run"
    assert group in op.groups()
    eventually(lambda: said(plane, ns, "rmi-outage", "Submitted"), "Submitted", 5)
    submitted = [e for e in events(plane, ns, "rmi-outage") if e["reason"] == "Submitted"]
    # the application's own SUBMITTED state posts a Submitted event of its own, in either order
    assert any("kept at submission" in str(e["message"]) for e in submitted), submitted
    assert not said(plane, ns, "rmi-outage", "JobNotFound"), "never Pending, waiting for the deleted job"

    delete(plane, APP, ns, BF_APP)  # gone while its job is gone: nobody asked for another run
    s = eventually(lambda: in_phase(plane, BF, ns, "rmi-outage", "Failed"), "failed with JobDeleted")
    assert conditions(s)["Failed"] == "True" and "JobDeleted" in [c["reason"] for c in s["conditions"]]
    eventually(lambda: absent(plane, "Secret", ns, BF_SECRET), "its Secret removed")
    assert group not in op.groups(), "its group released"
    assert absent(plane, APP, ns, BF_APP), "not started again from the copy"
    eventually(lambda: said(plane, ns, "rmi-outage", "JobDeleted", times=2), "the deletion, then the failure", 5)


def test_defect_8_a_large_object_is_handled_once_and_deletes(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    """The largest spec the schema allows, with kubectl's copy of it in an annotation: kopf's
    records live in status, so annotations stay under the server's 256 KiB, the job is created
    once, and the finalizer comes off on delete. A spec over the schema's bounds is refused at
    the door."""
    plane, ns = control_plane, fresh_namespace
    job = example("rmi-streamingjob.yaml", ns)
    spec = job["spec"]
    spec["sparkConf"] = {f"spark.kappa.k{i:03d}": "v" * 256 for i in range(SPARK_CONF_MAX)}
    spec["pipelineArgs"] = {f"arg{i:02d}": "a" * 256 for i in range(16)}
    job["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(job)}
    create(plane, job)
    eventually(lambda: get(plane, APP, ns, "rmi"), "the application")
    spark_state(plane, ns, "rmi", "RUNNING")
    eventually(lambda: in_phase(plane, SJ, ns, "rmi", "Running"), "running")
    stored = get(plane, SJ, ns, "rmi")
    assert stored is not None
    annotations = stored["metadata"].get("annotations") or {}
    assert not [k for k in annotations if k.startswith("kopf.zalando.org/")], "kopf's records are not annotations"
    assert "lastHandled" in stored["status"]["kopf"]
    creations = [e for e in events(plane, ns, "rmi") if str(e["message"]).startswith("created SparkApplication")]
    assert sum(int(e.get("count") or 1) for e in creations) == 1, "handled once, not as a creation on every event"
    delete(plane, SJ, ns, "rmi")
    eventually(lambda: absent(plane, SJ, ns, "rmi"), "the finalizer removed")

    too_big = example("rmi-streamingjob.yaml", ns, "huge")
    too_big["spec"]["pipelineArgs"] = {f"arg{i:03d}": "a" * 4096 for i in range(40)}
    answer = plane.admin.create(path_of(SJ, ns), too_big)
    assert answer.status == 422 and "pipelineArgs" in answer.message, (answer.status, answer.message)


def test_defect_10_deleting_many_running_backfills_at_once_finishes(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str
) -> None:
    """`kubectl delete bf --all` on running backfills: every finalizer comes off, every
    application and credential goes, no object stays Terminating (how fast: the bulk delete in
    tests/cluster/test_operator_on_server.py)."""
    plane, ns = control_plane, fresh_namespace
    create(plane, example("rmi-streamingjob.yaml", ns))
    names = [f"bf-{i:02d}" for i in range(12)]
    for name in names:
        create(plane, example("rmi-backfill.yaml", ns, name, publish={"enabled": False}))
    for name in names:
        eventually(lambda n=name: get(plane, APP, ns, f"{n}-backfill"), f"{name}'s application")  # type: ignore[misc]
        spark_state(plane, ns, f"{name}-backfill", "RUNNING")
    plane.admin.ok(plane.admin.request("DELETE", path_of(BF, ns)), "delete every backfill")
    eventually(lambda: not items(plane, BF, ns), "every Backfill gone (no finalizer left behind)", 60)
    assert [a["metadata"]["name"] for a in items(plane, APP, ns)] == ["rmi"], "only the live job's application"
    secrets = [s["metadata"]["name"] for s in items(plane, "Secret", ns)]
    assert not [s for s in secrets if s.endswith("-coordinator")], secrets


def test_defect_10_a_job_delete_does_not_wait_for_a_blocked_snapshot_listing(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storage I/O that hangs (a listing of the snapshots stuck on an object store) must not
    hold the delete."""
    from kappa_operator.handlers import checkpoints

    plane, ns = control_plane, fresh_namespace
    blocked, release = threading.Event(), threading.Event()
    list_points, snapshot_due = checkpoints.list_points, checkpoints.snapshot_due

    def stuck(job: Any, now: Any) -> dict[str, Any]:
        if job.metadata.namespace != ns:
            return list_points(job, now)
        blocked.set()
        release.wait(120)
        return {}

    monkeypatch.setattr(checkpoints, "list_points", stuck)
    monkeypatch.setattr(
        checkpoints, "snapshot_due", lambda job, now: job.metadata.namespace == ns or snapshot_due(job, now)
    )
    try:
        create(plane, example("rmi-streamingjob.yaml", ns))
        eventually(lambda: blocked.wait(0.2), "the snapshot listing started", 40)
        started = time.monotonic()
        delete(plane, SJ, ns, "rmi")
        eventually(lambda: absent(plane, SJ, ns, "rmi"), "the job deleted", 30)
        waited = time.monotonic() - started
        assert waited < 20, f"the delete waited {waited:.0f}s for the listing"
    finally:
        release.set()


def test_defect_3_a_rewind_whose_snapshot_store_is_unreachable_says_so(
    control_plane: ControlPlane, in_process_operator: InProcess, fresh_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's externalLocation (s3://lake/...) on an S3 endpoint nothing listens on: the
    Rewind does not sit with an empty phase; it is Pending with the error and the attempt."""
    plane, ns = control_plane, fresh_namespace
    unreachable_storage(monkeypatch)
    create(plane, example("rmi-streamingjob.yaml", ns))
    create(plane, example("rmi-rewind.yaml", ns))
    name = "rmi-before-outage"

    def retried() -> dict[str, Any] | None:
        s = status(plane, RW, ns, name)
        return s if s.get("retries") else None

    s = eventually(retried, "a retry count on the Rewind", 90)
    assert s["phase"] == "Pending" and s["lastError"] and "attempt" in s["message"]
    assert conditions(s)["Reconciling"] == "True"
    eventually(lambda: said(plane, ns, name, "RetryingAfterError"), "an Event", 30)
    assert status(plane, SJ, ns, "rmi").get("phase") != "Rewinding", "nothing was stopped"
