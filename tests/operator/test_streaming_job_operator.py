"""The operator process (kopf) against the kmock Kubernetes emulator: a StreamingJob becomes a
ConfigMap and a SparkApplication; the test plays the Spark operator and watches our status
follow; spec change (restart from the checkpoint), suspend and resume, deletion.

Against ``tests.operator.apiserver.ApiServer``: kmock with the API server's semantics (status
only through /status, schema + CEL, finalizers, uids assigned by the server)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import kmock
import pytest
import yaml

import kappa_operator.handlers as handlers
from spark_app.config import parse_config
from tests.operator.apiserver import ApiServer
from tests.operator.kube import (
    APPS,
    CMS,
    JOBS,
    ROOT,
    Api,
    absent,
    equals,
    eventually,
    register,
    spark_state,
    start_operator,
    stop_operator,
)


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
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
            stored = await api.get(f"{JOBS}/rmi")
            assert stored is not None and app["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
            first_hash = app["metadata"]["annotations"]["kappa.dev/config-hash"]

            async def phase() -> str | None:
                job = await api.get(f"{JOBS}/rmi")
                return ((job or {}).get("status") or {}).get("phase")

            await eventually(lambda: equals(phase, "Submitted"), "phase Submitted")

            # play the Spark operator
            await spark_state(api, "rmi", "RUNNING")
            await eventually(lambda: equals(phase, "Running"), "phase Running")
            job = await api.get(f"{JOBS}/rmi")
            ready = next(c for c in job["status"]["conditions"] if c["type"] == "Ready")  # type: ignore[index]
            assert ready["status"] == "True" and ready["lastTransitionTime"]

            await api.patch(
                f"{APPS}/rmi/status",
                {"status": {"applicationState": {"state": "FAILED", "errorMessage": "driver OOM"}}},
            )
            await eventually(lambda: equals(phase, "Failed"), "phase Failed")
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
            await eventually(lambda: absent(api, f"{APPS}/rmi"), "the application gone while suspended")
            await eventually(lambda: equals(phase, "Suspended"), "phase Suspended")
            await api.patch(f"{JOBS}/rmi", {"spec": {"suspend": False}})
            resumed = await eventually(lambda: api.get(f"{APPS}/rmi"), "the application back after resume")
            assert resumed["metadata"]["annotations"]["kappa.dev/config-hash"] != first_hash

            # deletion, behind kopf's finalizer: the application and the ConfigMap go too
            await api.delete(f"{JOBS}/rmi")
            await eventually(lambda: absent(api, f"{APPS}/rmi"), "the application deleted with the job")
            await eventually(lambda: absent(api, f"{CMS}/rmi-jobconfig"), "the ConfigMap deleted with the job")
        finally:
            await stop_operator(stop, task)
