"""The kmock Kubernetes emulator's helpers, kept for the benchmarks only: bench/operator.py (its
default, kmock mode) and bench/operator_memory.py register our resources with a plain
``kmock.KubernetesEmulator``, create the examples and play the Spark operator with these.

No test runs on kmock any more: the operator tests run on a real kube-apiserver
(tests/cluster; its helpers are tests/cluster/spark_operator.py and
tests/cluster/operator_runs.py). The API-server emulation layer that grew on kmock
(tests/operator/apiserver.py) is gone: the real server covers all it imitated (409s, schema and
CEL, status through /status, finalizers, garbage collection, size limits, Events), and no
operator test needs a fault only an emulator can produce (a 500 on one chosen call, a watch
dropped at a chosen moment, a slow answer); one that does would be written on kmock with
``kmock[...] << ...`` reactions and listed here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import kmock

ROOT = Path(__file__).resolve().parents[1]
JOBS = "/apis/kappa.dev/v1alpha1/namespaces/default/streamingjobs"
APPS = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"
BACKFILLS = "/apis/kappa.dev/v1alpha1/namespaces/default/backfills"
VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}


def register(emulator: kmock.KubernetesEmulator) -> None:
    emulator.resources.load_bundled()
    emulator.resources["kappa.dev/v1alpha1/streamingjobs"] = kmock.ResourceInfo(
        kind="StreamingJob", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"sj"}
    )
    emulator.resources["kappa.dev/v1alpha1/backfills"] = kmock.ResourceInfo(
        kind="Backfill", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"bf"}
    )
    emulator.resources["kappa.dev/v1alpha1/rewinds"] = kmock.ResourceInfo(
        kind="Rewind", namespaced=True, verbs=VERBS, subresources={"status"}, shortnames={"rw"}
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


async def spark_state(api: Api, app: str, state: str, error: str | None = None) -> None:
    """Play the Spark operator: it writes an application's state through its status subresource."""
    app_state: dict[str, Any] = {"state": state, **({"errorMessage": error} if error else {})}
    await api.patch(f"{APPS}/{app}/status", {"status": {"applicationState": app_state}})


def manifest(name: str, uid: str, **changes: Any) -> dict[str, Any]:
    """An example manifest as the API server would hold it (kmock assigns no uid,
    resourceVersion or generation; kopf test-patches on resourceVersion)."""
    import yaml

    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"].update(uid=uid, resourceVersion="1", generation=1)
    for key, value in changes.items():
        data["spec"][key] = value
    return data


async def run_application(api: Api, name: str, workdir: Path) -> int:
    """Play the Spark operator for an application that runs once (publish, restore): run what
    it would run in its pod (``python -m spark_app publish|restore --config`` on its
    ConfigMap's JobConfig) as a separate process, then write the state the Spark operator
    would. Returns the driver's exit code."""
    app = await api.get(f"{APPS}/{name}")
    assert app is not None, f"no SparkApplication {name}"
    args = app["spec"]["arguments"]
    cm_name = app["spec"]["volumes"][0]["configMap"]["name"]
    cm = await api.get(f"/api/v1/namespaces/{app['metadata']['namespace']}/configmaps/{cm_name}")
    assert cm is not None
    config = workdir / f"{name}.json"
    config.write_text(cm["data"]["job.json"])
    await spark_state(api, name, "RUNNING")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with (workdir / f"{name}.log").open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "spark_app", *args[:-1], str(config), env=env, stdout=log, stderr=log
        )
        code = await proc.wait()
    await spark_state(api, name, "COMPLETED" if code == 0 else "FAILED", None if code == 0 else f"exit code {code}")
    return code
