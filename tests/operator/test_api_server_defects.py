"""Issue 14's defects, each through the operator process (kopf) against the API-server
semantics layer (``tests.operator.apiserver.ApiServer``: status only through /status, 409 on
create, schema + CEL, finalizers, size limits, garbage collection, every event stored).

Each test names the defect it would have caught; the pure decisions behind them are in
``tests/unit/test_api_server_semantics.py``."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

import kappa_operator.handlers as handlers
from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.handlers.backfill import PROGRESS_INTERVAL
from kappa_operator.metrics import OperatorMetrics
from kappa_operator.reconcile.backfill import NONCE
from tests.operator.apiserver import ApiServer, events
from tests.operator.kube import APPS, BACKFILLS, CMS, JOBS, SECRETS, Api, absent, eventually, manifest, register
from tests.operator.kube import start_operator as start_kopf
from tests.operator.kube import stop_operator as stop_kopf

TOKEN = "admin-token"
REWINDS = "/apis/kappa.dev/v1alpha1/namespaces/default/rewinds"


@dataclass
class Running:
    api: Api
    server: ApiServer
    coordinator: EmbeddedCoordinator

    async def status(self, path: str) -> dict[str, Any]:
        return ((await self.api.get(path)) or {}).get("status") or {}

    async def phase(self, path: str, phase: str) -> dict[str, Any] | None:
        s = await self.status(path)
        return s if s.get("phase") == phase else None

    async def spark(self, app: str, state: str) -> None:
        """Play the Spark operator: it writes the application's state through /status."""
        await self.api.patch(f"{APPS}/{app}/status", {"status": {"applicationState": {"state": state}}})

    def reasons(self, name: str) -> list[str]:
        return [str(e["reason"]) for e in events(self.server, name)]


@asynccontextmanager
async def operator(server: ApiServer) -> AsyncIterator[Running]:
    register(server)  # the SparkApplication resource (generic semantics, with /status)
    base = str(server.url).rstrip("/")
    coordinator = EmbeddedCoordinator(Service(TOKEN)).start()
    handlers.configure(
        base,
        groups=EmbeddedGroups(coordinator.service),
        coordinator_url=coordinator.url,
        token=TOKEN,
        metrics=OperatorMetrics(),
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        stop, task = start_kopf()
        try:
            await asyncio.sleep(1.0)  # the watch must be open before objects appear
            yield Running(Api(base, http), server, coordinator)
        finally:
            await stop_kopf(stop, task)
            coordinator.stop()


def created(name: str, **spec: Any) -> dict[str, Any]:
    """An example as a client sends it: the server assigns uid, resourceVersion, generation."""
    data = manifest(name, "ignored", **spec)
    for key in ("uid", "resourceVersion", "generation"):
        data["metadata"].pop(key)
    return data


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or []}


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_1_and_2_a_backfill_named_like_its_job(kmock: ApiServer) -> None:
    """Defect 1: the Backfill renders its own children and never touches the live job's;
    deleting it leaves the live application running. Defect 2: only submitted is not Ready;
    a failed one is Failed, not Ready."""
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        live = await eventually(lambda: op.api.get(f"{APPS}/rmi"), "the live application")
        await op.spark("rmi", "RUNNING")
        namesake = created("rmi-backfill.yaml", jobRef={"name": "rmi"})
        namesake["metadata"]["name"] = "rmi"
        await op.api.post(BACKFILLS, namesake)
        await eventually(lambda: op.api.get(f"{APPS}/rmi-backfill"), "the backfill's own application")
        assert await op.api.get(f"{CMS}/rmi-backfill-jobconfig") is not None
        app = await op.api.get(f"{APPS}/rmi")
        assert app is not None and app["metadata"]["uid"] == live["metadata"]["uid"], "the live app is untouched"
        assert [r["kind"] for r in app["metadata"]["ownerReferences"]] == ["StreamingJob"]
        s = await eventually(lambda: op.phase(f"{BACKFILLS}/rmi", "Running"), "the backfill running")
        assert conditions(s)["Ready"] == "False", "submitted is not Ready"
        assert {c["observedGeneration"] for c in s["conditions"]} == {1}

        await op.spark("rmi-backfill", "FAILED")
        s = await eventually(lambda: op.phase(f"{BACKFILLS}/rmi", "Failed"), "the backfill failed")
        assert conditions(s) == {"Ready": "False", "Progressing": "False", "Succeeded": "False", "Failed": "True"}

        await op.api.delete(f"{BACKFILLS}/rmi")
        await eventually(lambda: absent(op.api, f"{BACKFILLS}/rmi"), "the backfill deleted")
        await eventually(lambda: absent(op.api, f"{APPS}/rmi-backfill"), "its own application removed")
        app = await op.api.get(f"{APPS}/rmi")
        assert app is not None and app["metadata"]["uid"] == live["metadata"]["uid"], "the live app survives"
        job = await op.status(f"{JOBS}/rmi")
        assert job["phase"] == "Running" and conditions(job)["Ready"] == "True"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_1_a_409_on_someone_elses_object_is_an_error_never_adoption(kmock: ApiServer) -> None:
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await eventually(lambda: op.api.get(f"{APPS}/rmi"), "the live application")
        # a SparkApplication already holds the Backfill's name: another owner's
        foreign = {
            "apiVersion": "sparkoperator.k8s.io/v1beta2",
            "kind": "SparkApplication",
            "metadata": {
                "name": "rmi-outage-backfill",
                "namespace": "default",
                "ownerReferences": [
                    {"apiVersion": "kappa.dev/v1alpha1", "kind": "StreamingJob", "name": "x", "uid": "uid-x"}
                ],
            },
            "spec": {"type": "Python", "image": "theirs"},
        }
        await op.api.post(APPS, foreign)
        await op.spark("rmi-outage-backfill", "RUNNING")
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml"))

        async def conflict() -> dict[str, Any] | None:
            s = await op.status(f"{BACKFILLS}/rmi-outage")
            return s if any(c.get("reason") == "NameConflict" for c in s.get("conditions") or []) else None

        s = await eventually(conflict, "NameConflict in the Backfill's status")
        assert "belongs to StreamingJob x" in s["message"] and "rename this Backfill" in s["message"]
        assert s["retries"] >= 1 and conditions(s)["Reconciling"] == "True"
        await eventually(lambda: asyncio.sleep(0, "NameConflict" in op.reasons("rmi-outage")), "an Event")
        app = await op.api.get(f"{APPS}/rmi-outage-backfill")
        assert app is not None and app["spec"]["image"] == "theirs", "never adopted, never rewritten"
        assert (s.get("progress") or "0%") == "0%", "another's RUNNING application is not our progress"

        await op.api.delete(f"{BACKFILLS}/rmi-outage")
        await eventually(lambda: absent(op.api, f"{BACKFILLS}/rmi-outage"), "the backfill deleted")
        assert await op.api.get(f"{APPS}/rmi-outage-backfill") is not None, "deletes check ownership"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_3_a_job_the_pipeline_refuses_says_so_on_the_object(kmock: ApiServer) -> None:
    async with operator(kmock) as op:
        job = created("rmi-streamingjob.yaml")
        job["spec"]["sinks"]["attributed_plays"]["partitionBy"] = ["hour("]
        await op.api.post(JOBS, job)
        s = await eventually(lambda: op.phase(f"{JOBS}/rmi", "Failed"), "Failed with the reason")
        assert "hour(" in s["message"] and conditions(s)["Ready"] == "False"
        assert [c["reason"] for c in s["conditions"] if c["type"] == "Ready"] == ["InvalidSpec"]
        await eventually(lambda: asyncio.sleep(0, "InvalidSpec" in op.reasons("rmi")), "an Event")
        assert await op.api.get(f"{APPS}/rmi") is None
        # fixed by an edit: handled afresh
        await op.api.patch(
            f"{JOBS}/rmi", {"spec": {"sinks": {"attributed_plays": {"partitionBy": ["hour(playback_ts)"]}}}}
        )
        await eventually(lambda: op.api.get(f"{APPS}/rmi"), "the application once the spec is fixed")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_3_a_publish_report_on_unreachable_storage_shows_its_retries(
    kmock: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The publish application ended, but its report (next to the checkpoint, s3a://lake/...)
    sits on an S3 endpoint nothing listens on: the Backfill stays Publishing and says why,
    with the attempt, instead of guessing an outcome."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml", publish={"enabled": True}))
        await eventually(lambda: op.api.get(f"{APPS}/rmi-outage-backfill"), "the backfill's application")
        await op.spark("rmi-outage-backfill", "COMPLETED")
        await eventually(lambda: op.api.get(f"{APPS}/rmi-outage-backfill-publish"), "the publish application")
        await op.spark("rmi-outage-backfill-publish", "COMPLETED")

        async def retried() -> dict[str, Any] | None:
            s = await op.status(f"{BACKFILLS}/rmi-outage")
            return s if s.get("retries") else None

        s = await eventually(retried, "a retry count in status", 60)
        assert s["phase"] == "Publishing" and s["lastError"] and "attempt" in s["message"]
        assert conditions(s)["Reconciling"] == "True" and conditions(s)["Succeeded"] == "False"
        await eventually(lambda: asyncio.sleep(0, "RetryingAfterError" in op.reasons("rmi-outage")), "an Event")

        # and kopf's own line about the failed handler is an Event too, not only a log line
        def kopf_failure_posted() -> bool:
            logged = [e for e in events(op.server, "rmi-outage") if e["reason"] == "Logging"]
            return any("failed" in str(e["message"]) for e in logged)

        await eventually(lambda: asyncio.sleep(0, kopf_failure_posted()), "kopf's failure as an Event")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_7_a_backfill_finishes_after_its_job_is_deleted(kmock: ApiServer) -> None:
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml", publish={"enabled": False}))
        await eventually(lambda: op.api.get(f"{APPS}/rmi-outage-backfill"), "the backfill's application")
        await op.spark("rmi-outage-backfill", "RUNNING")
        assert "default.rmi-outage" in op.coordinator.service.core.groups()
        await op.api.delete(f"{JOBS}/rmi")
        await eventually(lambda: absent(op.api, f"{JOBS}/rmi"), "the StreamingJob deleted")
        assert await op.api.get(f"{APPS}/rmi-outage-backfill") is not None, "the backfill keeps running"
        await op.spark("rmi-outage-backfill", "COMPLETED")
        s = await eventually(lambda: op.phase(f"{BACKFILLS}/rmi-outage", "Succeeded"), "Succeeded without its job")
        assert s["progress"] == "100%" and conditions(s)["Ready"] == "True"
        assert "default.rmi-outage" not in op.coordinator.service.core.groups(), "the group is released"
        await eventually(lambda: asyncio.sleep(0, "JobDeleted" in op.reasons("rmi-outage")), "an Event")
        assert op.reasons("rmi-outage").count("JobDeleted") == 1, "said once, not on every application event"
        assert s["jobDeleted"] is True


BF = f"{BACKFILLS}/rmi-outage"
BF_APP = f"{APPS}/rmi-outage-backfill"
BF_SECRET = f"{SECRETS}/rmi-outage-backfill-coordinator"
BF_GROUP = "default.rmi-outage"


async def job_deleted(op: Running) -> None:
    await op.api.delete(f"{JOBS}/rmi")
    await eventually(lambda: absent(op.api, f"{JOBS}/rmi"), "the StreamingJob deleted")


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_issue_27_8_a_running_backfill_says_at_once_that_its_job_was_deleted(kmock: ApiServer) -> None:
    """No change of its application follows the deletion: the Backfill still shows jobDeleted
    and a JobDeleted Warning within a tick of its timer, and keeps running on its copy."""
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml", publish={"enabled": False}))
        await eventually(lambda: op.api.get(BF_APP), "the backfill's application")
        await op.spark("rmi-outage-backfill", "RUNNING")
        await eventually(lambda: op.phase(BF, "Running"), "the backfill running")
        app = await op.api.get(BF_APP)
        assert app is not None
        await job_deleted(op)

        async def said() -> dict[str, Any] | None:
            s = await op.status(BF)
            return s if s.get("jobDeleted") else None

        s = await eventually(said, "status.jobDeleted without an application event", 2 * PROGRESS_INTERVAL + 2)
        assert s["phase"] == "Running", "it goes on with the configuration kept at submission"
        await eventually(lambda: asyncio.sleep(0, "JobDeleted" in op.reasons("rmi-outage")), "the Event", 5)
        (warning,) = [e for e in events(op.server, "rmi-outage") if e["reason"] == "JobDeleted"]
        assert warning["type"] == "Warning" and "kept at submission" in str(warning["message"])
        still = await op.api.get(BF_APP)
        assert still is not None and still["metadata"]["resourceVersion"] == app["metadata"]["resourceVersion"]
        assert BF_GROUP in op.coordinator.service.core.groups() and await op.api.get(BF_SECRET) is not None
        await asyncio.sleep(PROGRESS_INTERVAL + 1)
        assert op.reasons("rmi-outage").count("JobDeleted") == 1, "said once, not on every tick"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_issue_27_8_a_failed_backfill_resumes_from_its_kept_copy_after_its_job_is_deleted(
    kmock: ApiServer,
) -> None:
    """Failed, its job then deleted, restartNonce bumped as its message says: it resumes from
    the copy kept at submission (not Pending forever); a failed one holds no credential; and
    when its application then vanishes it fails with JobDeleted, releasing group and Secret."""
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml", publish={"enabled": False}))
        await eventually(lambda: op.api.get(BF_APP), "the backfill's application")
        await op.spark("rmi-outage-backfill", "RUNNING")
        await eventually(lambda: op.api.get(BF_SECRET), "its coordinator credential")
        await op.spark("rmi-outage-backfill", "FAILED")
        s = await eventually(lambda: op.phase(BF, "Failed"), "the backfill failed")
        assert "bump spec.restartNonce" in s["message"]
        await eventually(lambda: absent(op.api, BF_SECRET), "the failed backfill's Secret removed")
        assert BF_GROUP in op.coordinator.service.core.groups(), "kept for the resumption"

        await job_deleted(op)
        await op.api.patch(BF, {"spec": {"restartNonce": 1}})

        async def resubmitted() -> dict[str, Any] | None:
            app = await op.api.get(BF_APP)
            return app if app and app["metadata"]["annotations"].get(NONCE) == "1" else None

        app = await eventually(resubmitted, "the application submitted again from the kept copy", 20)
        assert [r["kind"] for r in app["metadata"]["ownerReferences"]] == ["Backfill"]
        s = await eventually(lambda: op.phase(BF, "Running"), "Running, not Pending")
        assert s["restartNonce"] == 1 and s["jobDeleted"] is True
        assert await op.api.get(BF_SECRET) is not None, "a new credential for the new run"
        assert BF_GROUP in op.coordinator.service.core.groups()
        submitted = [e for e in events(op.server, "rmi-outage") if e["reason"] == "Submitted"]
        assert "kept at submission" in str(submitted[-1]["message"])
        assert "JobNotFound" not in op.reasons("rmi-outage"), "never Pending, waiting for the deleted job"

        await op.api.delete(BF_APP)  # gone while its job is gone: nobody asked for another run
        s = await eventually(lambda: op.phase(BF, "Failed"), "failed with JobDeleted")
        assert conditions(s)["Failed"] == "True" and "JobDeleted" in [c["reason"] for c in s["conditions"]]
        await eventually(lambda: absent(op.api, BF_SECRET), "its Secret removed")
        assert BF_GROUP not in op.coordinator.service.core.groups(), "its group released"
        assert await absent(op.api, BF_APP), "not started again from the copy"
        assert op.reasons("rmi-outage").count("JobDeleted") == 2, "the deletion, then the failure"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_8_a_large_object_is_handled_once_and_deletes(kmock: ApiServer) -> None:
    """The largest spec the schema allows, with kubectl's copy of it in an annotation: kopf's
    records live in status, so annotations stay small, the job is created once, and the
    finalizer comes off on delete. A spec over the schema's bounds is refused at the door."""
    async with operator(kmock) as op:
        job = created("rmi-streamingjob.yaml")
        spec = job["spec"]
        spec["sparkConf"] = {f"spark.kappa.k{i:03d}": "v" * 256 for i in range(32)}
        spec["pipelineArgs"] = {f"arg{i:02d}": "a" * 256 for i in range(16)}
        last_applied = json.dumps(job)
        job["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": last_applied}
        await op.api.post(JOBS, job)
        await eventually(lambda: op.api.get(f"{APPS}/rmi"), "the application")
        await op.spark("rmi", "RUNNING")
        await eventually(lambda: op.phase(f"{JOBS}/rmi", "Running"), "running")
        stored = await op.api.get(f"{JOBS}/rmi")
        assert stored is not None
        annotations = stored["metadata"].get("annotations") or {}
        assert not [k for k in annotations if k.startswith("kopf.zalando.org/")], "kopf's records are not annotations"
        assert "lastHandled" in stored["status"]["kopf"]
        creations = [e for e in events(op.server, "rmi") if str(e["message"]).startswith("created SparkApplication")]
        assert len(creations) == 1, "handled once, not as a creation on every event"
        await op.api.delete(f"{JOBS}/rmi")
        await eventually(lambda: absent(op.api, f"{JOBS}/rmi"), "the finalizer removed")

        too_big = created("rmi-streamingjob.yaml")
        too_big["metadata"]["name"] = "huge"
        too_big["spec"]["pipelineArgs"] = {f"arg{i:03d}": "a" * 4096 for i in range(40)}
        async with op.api.http.post(op.api.base + JOBS, json=too_big) as r:
            assert r.status == 422, await r.text()
            assert "pipelineArgs" in await r.text()


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_10_deleting_many_running_backfills_at_once_finishes(kmock: ApiServer) -> None:
    """`kubectl delete bf --all` on running backfills: every finalizer comes off, every
    application and credential goes, no object stays Terminating."""
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        names = [f"bf-{i:02d}" for i in range(12)]
        for name in names:
            bf = created("rmi-backfill.yaml", publish={"enabled": False})
            bf["metadata"]["name"] = name
            await op.api.post(BACKFILLS, bf)
        for name in names:
            await eventually(lambda n=name: op.api.get(f"{APPS}/{n}-backfill"), f"{name}'s application")  # type: ignore[misc]
            await op.spark(f"{name}-backfill", "RUNNING")
        await asyncio.gather(*(op.api.delete(f"{BACKFILLS}/{n}") for n in names))

        async def all_gone() -> bool:
            return not op.server.stored("kappa.dev/v1alpha1/backfills")

        await eventually(all_gone, "every Backfill gone (no finalizer left behind)", 60)
        assert not op.server.stored("sparkoperator.k8s.io/v1beta2/sparkapplications", "default")[1:], (
            "only the live job's application remains"
        )
        assert not [s for s in op.server.stored("v1/secrets") if s["metadata"]["name"].endswith("-coordinator")]


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_10_a_job_delete_does_not_wait_for_a_blocked_snapshot_listing(
    kmock: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storage I/O that hangs (a listing of the snapshots stuck on an object store) must not
    hold the delete."""
    from kappa_operator.handlers import checkpoints

    blocked, release = threading.Event(), threading.Event()

    def stuck(job: Any, now: Any) -> dict[str, Any]:
        blocked.set()
        release.wait(120)
        return {}

    monkeypatch.setattr(checkpoints, "list_points", stuck)
    monkeypatch.setattr(checkpoints, "snapshot_due", lambda job, now: True)
    try:
        async with operator(kmock) as op:
            await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
            await eventually(lambda: asyncio.to_thread(blocked.wait, 0.2), "the snapshot listing started", 40)
            started = asyncio.get_running_loop().time()
            await op.api.delete(f"{JOBS}/rmi")
            await eventually(lambda: absent(op.api, f"{JOBS}/rmi"), "the job deleted", 30)
            waited = asyncio.get_running_loop().time() - started
            assert waited < 20, f"the delete waited {waited:.0f}s for the listing"
    finally:
        release.set()


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_3_a_rewind_whose_snapshot_store_is_unreachable_says_so(
    kmock: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job's externalLocation (s3://lake/...) on an S3 endpoint nothing listens on: the
    Rewind does not sit with an empty phase; it is Pending with the error and the attempt."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(REWINDS, created("rmi-rewind.yaml"))
        name = (await op.api.get(REWINDS))["items"][0]["metadata"]["name"]  # type: ignore[index]

        async def retried() -> dict[str, Any] | None:
            s = await op.status(f"{REWINDS}/{name}")
            return s if s.get("retries") else None

        s = await eventually(retried, "a retry count on the Rewind", 90)
        assert s["phase"] == "Pending" and s["lastError"] and "attempt" in s["message"]
        assert conditions(s)["Reconciling"] == "True"
        await eventually(lambda: asyncio.sleep(0, "RetryingAfterError" in op.reasons(name)), "an Event")
        assert (await op.status(f"{JOBS}/rmi")).get("phase") != "Rewinding", "nothing was stopped"


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_defect_6_a_running_backfills_window_cannot_be_edited(kmock: ApiServer) -> None:
    """The server refuses the edit (with what to do instead) rather than the app keeping the old
    window while progress is computed against the new one; restartNonce stays editable."""
    async with operator(kmock) as op:
        await op.api.post(JOBS, created("rmi-streamingjob.yaml"))
        await op.api.post(BACKFILLS, created("rmi-backfill.yaml"))
        await eventually(lambda: op.phase(f"{BACKFILLS}/rmi-outage", "Running"), "running")
        headers = {"Content-Type": "application/merge-patch+json"}
        edit = json.dumps({"spec": {"window": {"end": "2026-11-01T20:00:00Z"}}})
        async with op.api.http.patch(op.api.base + f"{BACKFILLS}/rmi-outage", data=edit, headers=headers) as r:
            assert r.status == 422, await r.text()
            assert "create a new Backfill" in await r.text()
        stored = await op.api.get(f"{BACKFILLS}/rmi-outage")
        assert stored is not None and stored["spec"]["window"]["end"] == "2026-11-01T18:00:00Z"
        assert stored["metadata"]["generation"] == 1
        await op.api.patch(f"{BACKFILLS}/rmi-outage", {"spec": {"restartNonce": 1}})
        stored = await op.api.get(f"{BACKFILLS}/rmi-outage")
        assert stored is not None and stored["metadata"]["generation"] == 2
