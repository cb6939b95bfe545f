"""The operator process (kopf) against the kmock Kubernetes emulator: a StreamingJob becomes a
ConfigMap and a SparkApplication; the test plays the Spark operator and watches our status
follow; spec change (restart from the checkpoint), suspend and resume, deletion.

kmock does not check schemas, CEL or the status subresource (tests/unit/test_crds.py does)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import pytest
import yaml

import kappa_operator.handlers as handlers
from spark_app.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
JOBS = "/apis/kappa.dev/v1alpha1/namespaces/default/streamingjobs"
APPS = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"
CMS = "/api/v1/namespaces/default/configmaps"
VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}


def register(emulator: kmock.KubernetesEmulator) -> None:
    emulator.resources.load_bundled()
    emulator.resources["kappa.dev/v1alpha1/streamingjobs"] = kmock.ResourceInfo(
        kind="StreamingJob", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"sj"}
    )
    emulator.resources["sparkoperator.k8s.io/v1beta2/sparkapplications"] = kmock.ResourceInfo(
        kind="SparkApplication", namespaced=True, verbs=VERBS, subresources={"status"}
    )


class Api:
    def __init__(self, base: str, http: aiohttp.ClientSession) -> None:
        self.base, self.http = base, http

    async def get(self, path: str) -> dict[str, Any] | None:
        async with self.http.get(self.base + path) as r:
            return None if r.status == 404 else await r.json()

    async def post(self, path: str, body: dict[str, Any]) -> None:
        async with self.http.post(self.base + path, json=body) as r:
            assert r.status < 300, await r.text()

    async def patch(self, path: str, body: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        async with self.http.patch(self.base + path, data=json.dumps(body), headers=headers) as r:
            assert r.status < 300, await r.text()

    async def delete(self, path: str) -> None:
        async with self.http.delete(self.base + path) as r:
            assert r.status < 300 or r.status == 404, await r.text()


async def eventually(check: Callable[[], Awaitable[Any]], what: str, timeout: float = 45.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def start_operator() -> tuple[asyncio.Event, asyncio.Task[None]]:
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.watching.server_timeout = 10
    settings.watching.client_timeout = 15
    stop = asyncio.Event()
    task = asyncio.create_task(kopf.operator(namespaces=["default"], settings=settings, stop_flag=stop))
    return stop, task


async def stop_operator(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    """Ask kopf to stop; its watch streams on the emulator may linger, so cancel after a grace."""
    stop.set()
    done, _ = await asyncio.wait({task}, timeout=5)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=10)
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]


@pytest.mark.asyncio
async def test_streaming_job_lifecycle(kmock: kmock.KubernetesEmulator) -> None:
    register(kmock)
    base = str(kmock.url).rstrip("/")
    handlers.configure(base)
    manifest = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    # kmock assigns no uid, resourceVersion or generation; kopf test-patches on resourceVersion
    manifest["metadata"].update(uid="uid-rmi", resourceVersion="1", generation=1)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        stop, task = start_operator()
        try:
            await asyncio.sleep(1.0)  # the watch must be open before objects appear
            await api.post(JOBS, manifest)

            app = await eventually(lambda: api.get(f"{APPS}/rmi"), "the SparkApplication")
            cm = await api.get(f"{CMS}/rmi-jobconfig")
            assert cm is not None
            cfg = parse_config(json.loads(cm["data"]["job.json"]))
            assert (cfg.name, cfg.mode, cfg.checkpoint.location) == ("rmi", "live", "s3a://lake/checkpoints/rmi/live")
            spec = app["spec"]
            assert (spec["type"], spec["restartPolicy"]["type"], spec["image"]) == (
                "Python",
                "Always",
                "ghcr.io/kappa-dev/kappa-spark:0.1.0",
            )
            assert spec["volumes"][0]["configMap"]["name"] == "rmi-jobconfig"
            assert app["metadata"]["ownerReferences"][0]["uid"] == "uid-rmi"
            first_hash = app["metadata"]["annotations"]["kappa.dev/config-hash"]

            async def phase() -> str | None:
                job = await api.get(f"{JOBS}/rmi")
                return ((job or {}).get("status") or {}).get("phase")

            await eventually(lambda: _eq(phase, "Submitted"), "phase Submitted")

            # play the Spark operator
            await api.patch(f"{APPS}/rmi", {"status": {"applicationState": {"state": "RUNNING"}}})
            await eventually(lambda: _eq(phase, "Running"), "phase Running")
            job = await api.get(f"{JOBS}/rmi")
            ready = next(c for c in job["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
            assert ready["status"] == "True" and ready["lastTransitionTime"]

            await api.patch(
                f"{APPS}/rmi", {"status": {"applicationState": {"state": "FAILED", "errorMessage": "driver OOM"}}}
            )
            await eventually(lambda: _eq(phase, "Failed"), "phase Failed")
            job = await api.get(f"{JOBS}/rmi")
            assert job["status"]["message"] == "driver OOM"  # type: ignore[index]

            # a spec change restarts the application from the same checkpoint
            await api.patch(f"{JOBS}/rmi", {"spec": {"pipelineArgs": {"lateness": "45 minutes"}}})

            async def new_hash() -> bool:
                a = await api.get(f"{APPS}/rmi")
                return a is not None and a["metadata"]["annotations"]["kappa.dev/config-hash"] != first_hash

            await eventually(new_hash, "the application restarted with the new config")
            cm = await api.get(f"{CMS}/rmi-jobconfig")
            assert json.loads(cm["data"]["job.json"])["pipelineArgs"] == {"lateness": "45 minutes"}  # type: ignore[index]
            assert json.loads(cm["data"]["job.json"])["checkpoint"]["location"].endswith("/rmi/live")  # type: ignore[index]

            # suspend and resume
            await api.patch(f"{JOBS}/rmi", {"spec": {"suspend": True}})
            await eventually(lambda: _absent(api, f"{APPS}/rmi"), "the application gone while suspended")
            await eventually(lambda: _eq(phase, "Suspended"), "phase Suspended")
            await api.patch(f"{JOBS}/rmi", {"spec": {"suspend": False}})
            resumed = await eventually(lambda: api.get(f"{APPS}/rmi"), "the application back after resume")
            assert resumed["metadata"]["annotations"]["kappa.dev/config-hash"] != first_hash

            # deletion, behind kopf's finalizer: the application and the ConfigMap go too
            await api.delete(f"{JOBS}/rmi")
            await eventually(lambda: _absent(api, f"{APPS}/rmi"), "the application deleted with the job")
            await eventually(lambda: _absent(api, f"{CMS}/rmi-jobconfig"), "the ConfigMap deleted with the job")
        finally:
            await stop_operator(stop, task)


async def _eq(get: Callable[[], Awaitable[Any]], value: Any) -> bool:
    return await get() == value


async def _absent(api: Api, path: str) -> bool:
    return await api.get(path) is None
