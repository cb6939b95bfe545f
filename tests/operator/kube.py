"""Helpers for running the operator against the kmock Kubernetes emulator: resource
registration, a small REST client, polling, and starting/stopping kopf in the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf

from kappa_operator.runner import settings as operator_settings

ROOT = Path(__file__).resolve().parents[2]
JOBS = "/apis/kappa.dev/v1alpha1/namespaces/default/streamingjobs"
APPS = "/apis/sparkoperator.k8s.io/v1beta2/namespaces/default/sparkapplications"
CMS = "/api/v1/namespaces/default/configmaps"
BACKFILLS = "/apis/kappa.dev/v1alpha1/namespaces/default/backfills"
SECRETS = "/api/v1/namespaces/default/secrets"
VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}


class ApiServerLike(kmock.KubernetesEmulator):
    """kmock, plus what an API server assigns on create (uid, resourceVersion, generation):
    kopf patches objects the operator itself created (a Rewind's downstream Rewinds) only if
    they carry a resourceVersion. Use with ``@pytest.mark.kmock(cls=ApiServerLike)``."""

    async def _handle(self, request: kmock.Request) -> Any:
        if str(request.action).endswith("CREATE") and isinstance(request.data, dict):
            meta = request.data.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("resourceVersion", "1")
            meta.setdefault("generation", 1)
        return await super()._handle(request)


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
    settings = operator_settings()  # what `kappa operator` runs with (storage, finalizer, posting)
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


async def spark_state(api: Api, app: str, state: str, error: str | None = None) -> None:
    """Play the Spark operator: it writes an application's state through its status subresource."""
    app_state: dict[str, Any] = {"state": state, **({"errorMessage": error} if error else {})}
    await api.patch(f"{APPS}/{app}/status", {"status": {"applicationState": app_state}})


async def equals(get: Callable[[], Awaitable[Any]], value: Any) -> bool:
    return await get() == value


async def absent(api: Api, path: str) -> bool:
    return await api.get(path) is None


def manifest(name: str, uid: str, **changes: Any) -> dict[str, Any]:
    """An example manifest as the API server would hold it (kmock assigns no uid,
    resourceVersion or generation; kopf test-patches on resourceVersion)."""
    import yaml

    data = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"].update(uid=uid, resourceVersion="1", generation=1)
    for key, value in changes.items():
        data["spec"][key] = value
    return data


def reasons(emulator: kmock.KubernetesEmulator) -> list[str]:
    """Reasons of the events the operator posted, one per occurrence, in order, from the
    emulator's request log: a POST of a new Event, or a PATCH counting a repeat of one (the
    reason of the Event it patches, from the POST that created it)."""
    posted: dict[str, str] = {}
    seen = []
    for r in list(emulator):
        method, path = str(r.method).upper(), r.url.path
        data = r.data if isinstance(r.data, dict) else {}
        if method.endswith("POST") and path.endswith("/events"):
            reason = str(data.get("reason"))
            posted[str((data.get("metadata") or {}).get("name"))] = reason
            seen.append(reason)
        elif method.endswith("PATCH") and path.rpartition("/")[0].endswith("/events"):
            seen.append(posted.get(path.rpartition("/")[2], "?"))
    return seen


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


async def play_applications(api: Api, command: str, workdir: Path, ran: list[tuple[str, int]]) -> None:
    """Play the Spark operator for every ``command`` application that appears (until
    cancelled), each once; ``ran`` gets (name, exit code) as they end."""
    done: set[str] = set()
    while True:
        for app in ((await api.get(APPS)) or {}).get("items") or []:
            name = app["metadata"]["name"]
            if name not in done and (app["spec"].get("arguments") or [None])[0] == command:
                done.add(name)
                ran.append((name, await run_application(api, name, workdir)))
        await asyncio.sleep(0.2)


DATA_PLANE = (
    ("pyiceberg.table.DataScan", "to_arrow"),
    ("pyiceberg.table.DataScan", "to_arrow_batch_reader"),
    ("pyiceberg.io.pyarrow.ArrowScan", "to_table"),
    ("pyiceberg.io.pyarrow.ArrowScan", "to_record_batches"),
    ("pyarrow.parquet", "read_table"),
    ("pyarrow.parquet.ParquetFile", "read"),
    ("spark_app.sinks.iceberg.window.TimeWindow", "rows"),
    ("spark_app.sinks.iceberg.window.TimeWindow", "read"),
    ("spark_app.sinks.iceberg.validation", "compare_in_process"),
    ("spark_app.sinks.iceberg.publish", "publish"),
    ("spark_app.storage.Location", "copy_to"),
    ("spark_app.storage", "copy_many"),
)
"""What reads rows or copies files: in the operator's process, each raises (issue 16)."""


_TEST_THREAD = threading.local()


@contextlib.contextmanager
def outside_the_operator() -> Iterator[None]:
    """The test's own look at the data (on its thread): not the operator's."""
    _TEST_THREAD.allowed = True
    try:
        yield
    finally:
        _TEST_THREAD.allowed = False


def refuse_data_plane(patch: Callable[[Any, str, Any], None], refused: Callable[[str], None]) -> None:
    """Replace every function of ``DATA_PLANE`` (and its imports by name) with one that raises,
    except inside ``outside_the_operator``; ``refused`` is told the name of each call refused."""
    for where, attr in DATA_PLANE:
        try:
            owner: Any = importlib.import_module(where)
        except ImportError:
            module, _, cls = where.rpartition(".")
            owner = getattr(importlib.import_module(module), cls)
        original = getattr(owner, attr)

        def refuse(*args: Any, _name: str = f"{where}.{attr}", _original: Any = original, **kwargs: Any) -> Any:
            if getattr(_TEST_THREAD, "allowed", False):
                return _original(*args, **kwargs)
            refused(_name)
            raise AssertionError(f"{_name} called inside the operator process: it must not touch data")

        patch(owner, attr, refuse)
        for name, module in list(sys.modules.items()):  # and wherever it was imported by name
            if name.startswith(("kappa_operator", "spark_app")) and getattr(module, attr, None) is original:
                patch(module, attr, refuse)


def forbid_data_plane(monkeypatch: Any) -> list[str]:
    """Make every function of ``DATA_PLANE`` raise in this process (kopf's handler threads
    included), except inside ``outside_the_operator``; the calls it refused are listed (the test
    asserts none): the operator renders, reads reports and patches status."""
    refused: list[str] = []
    refuse_data_plane(monkeypatch.setattr, refused.append)
    return refused
