"""The API-server semantics layer (tests/operator/apiserver.py) does what kube-apiserver does
where kmock alone is silent: one test per rule, with plain HTTP requests, and one with kopf."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
import yaml

from tests.operator.apiserver import MAX_REQUEST_BYTES, ApiServer, events
from tests.operator.kube import BACKFILLS, CMS, JOBS, ROOT, SECRETS, eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.kmock(cls=ApiServer)]

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
EVENTS = "/api/v1/namespaces/default/events"


async def call(
    server: ApiServer, method: str, path: str, body: Any = None, ctype: str = "application/json", **params: str
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    async with server.request(method, path, data=data, headers={"Content-Type": ctype}, params=params) as r:
        return r.status, await r.json(content_type=None)


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / name).read_text())


def config_map(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}, "data": {"k": "v"}}


@contextlib.asynccontextmanager
async def watching(server: ApiServer, path: str) -> AsyncIterator[list[dict[str, Any]]]:
    """Watch events of ``path`` as they arrive (``type`` and ``object``)."""
    seen: list[dict[str, Any]] = []
    opened = asyncio.Event()

    async def watch() -> None:
        async with server.get(path, params={"watch": "true"}) as r:
            opened.set()
            async for line in r.content:
                if line.strip():
                    seen.append(json.loads(line))

    task = asyncio.create_task(watch())
    await asyncio.wait_for(opened.wait(), 5)
    await asyncio.sleep(0.1)
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_create_assigns_server_fields_drops_status_and_refuses_an_existing_name(kmock: ApiServer) -> None:
    body = example("rmi-backfill.yaml")
    body["metadata"].update(uid="client-uid", resourceVersion="77")
    body["status"] = {"phase": "Succeeded"}
    code, created = await call(kmock, "POST", BACKFILLS, body)
    assert code == 200, created
    meta = created["metadata"]
    assert meta["uid"] not in ("", "client-uid") and meta["creationTimestamp"].endswith("Z")
    assert (meta["generation"], meta["resourceVersion"]) == (1, str(kmock.revision))
    assert "status" not in created  # the status subresource: a create cannot set it

    code, refused = await call(kmock, "POST", BACKFILLS, example("rmi-backfill.yaml"))
    assert code == 409
    assert refused == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'backfills.kappa.dev "rmi-outage" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "rmi-outage", "group": "kappa.dev", "kind": "backfills"},
        "code": 409,
    }
    assert kmock.stored("kappa.dev/v1alpha1/backfills")[0]["metadata"]["uid"] == meta["uid"]  # not overwritten

    # generateName, for every resource: each create is a new object
    names = set()
    for _ in range(3):
        code, cm = await call(kmock, "POST", CMS, {"metadata": {"generateName": "cfg-"}, "data": {}})
        assert code == 200, cm
        names.add(cm["metadata"]["name"])
    assert len(names) == 3 and all(n.startswith("cfg-") and len(n) == 9 for n in names)
    assert "generation" not in kmock.stored("v1/configmaps")[0]["metadata"]  # no spec, no generation
    code, refused = await call(kmock, "POST", CMS, {"metadata": {}, "data": {}})
    assert code == 422 and "metadata.name: Required value" in refused["message"]


async def test_main_resource_ignores_status_and_status_writes_change_only_status(kmock: ApiServer) -> None:
    await call(kmock, "POST", JOBS, example("rmi-streamingjob.yaml"))
    job = f"{JOBS}/rmi"

    # the main resource: spec changes (generation 2), .status is ignored
    code, obj = await call(kmock, "PATCH", job, {"spec": {"suspend": True}, "status": {"phase": "Running"}}, MERGE)
    assert code == 200, obj
    assert obj["spec"]["suspend"] is True and "status" not in obj and obj["metadata"]["generation"] == 2
    rv = obj["metadata"]["resourceVersion"]

    # /status: only .status; spec and metadata (labels, finalizers, generation) stay
    status_patch = {"status": {"phase": "Running"}, "spec": {"suspend": False}, "metadata": {"labels": {"a": "b"}}}
    code, obj = await call(kmock, "PATCH", f"{job}/status", status_patch, MERGE)
    assert code == 200, obj
    assert obj["status"]["phase"] == "Running" and obj["spec"]["suspend"] is True
    assert "labels" not in obj["metadata"] and obj["metadata"]["generation"] == 2
    assert int(obj["metadata"]["resourceVersion"]) > int(rv)
    assert obj["status"]["conditions"] == []  # the status schema's default

    # a JSON patch of the main resource cannot reach .status either; metadata does not bump generation
    ops = [
        {"op": "replace", "path": "/status/phase", "value": "Failed"},
        {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
    ]
    code, obj = await call(kmock, "PATCH", job, ops, JSON_PATCH)
    assert code == 200, obj
    assert obj["status"]["phase"] == "Running" and obj["metadata"]["labels"] == {"x": "y"}
    assert obj["metadata"]["generation"] == 2

    # a no-op writes nothing: same resourceVersion
    rv = obj["metadata"]["resourceVersion"]
    code, obj = await call(kmock, "PATCH", job, {"spec": {"suspend": True}}, MERGE)
    assert code == 200 and obj["metadata"]["resourceVersion"] == rv

    # optimistic concurrency: a stale resourceVersion in a PUT or in a patch is a 409
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"suspend": False}}
    code, refused = await call(kmock, "PATCH", job, stale, MERGE)
    assert (code, refused["reason"]) == (409, "Conflict"), refused
    assert refused["message"] == (
        'Operation cannot be fulfilled on streamingjobs.kappa.dev "rmi": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    test_op = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
        {"op": "remove", "path": "/spec/suspend"},
    ]
    code, refused = await call(kmock, "PATCH", job, test_op, JSON_PATCH)
    assert code == 422, refused  # kopf's finalizer patches rely on this answer
    current = (await call(kmock, "GET", job))[1]
    replaced = {**current, "spec": {**current["spec"], "suspend": False}, "status": {"phase": "Failed"}}
    code, refused = await call(
        kmock, "PUT", job, {**replaced, "metadata": {**current["metadata"], "resourceVersion": "2"}}
    )
    assert code == 409, refused
    no_rv = {**replaced, "metadata": {k: v for k, v in current["metadata"].items() if k != "resourceVersion"}}
    code, refused = await call(kmock, "PUT", job, no_rv)
    assert (
        code == 422
        and "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update" in refused["message"]
    )
    code, obj = await call(kmock, "PUT", job, replaced)
    assert code == 200, obj
    assert (
        obj["spec"]["suspend"] is False and obj["status"]["phase"] == "Running" and obj["metadata"]["generation"] == 3
    )

    # strategic merge patch: for built-ins only
    code, refused = await call(kmock, "PATCH", job, {"spec": {"suspend": True}}, STRATEGIC)
    assert (code, refused["reason"]) == (415, "UnsupportedMediaType")
    await call(kmock, "POST", CMS, config_map("cm"))
    code, cm = await call(kmock, "PATCH", f"{CMS}/cm", {"data": {"k2": "v2"}}, STRATEGIC)
    assert code == 200 and cm["data"] == {"k": "v", "k2": "v2"}


async def test_schema_and_cel_on_create_update_and_status(kmock: ApiServer) -> None:
    bad = example("rmi-backfill.yaml")
    bad["spec"]["window"]["end"] = bad["spec"]["window"]["start"]
    bad["spec"]["alignment"]["mode"] = "fast"
    code, refused = await call(kmock, "POST", BACKFILLS, bad)
    assert (code, refused["reason"]) == (422, "Invalid"), refused
    message = refused["message"]
    prefix = 'Backfill.kappa.dev "rmi-outage" is invalid: [spec.alignment.mode: Unsupported value: "fast": '
    assert message.startswith(prefix + "supported values: "), message
    assert message.endswith(', spec.window: Invalid value: "object": window.end must be after start]'), message
    assert {c["field"]: c["reason"] for c in refused["details"]["causes"]} == {
        "spec.alignment.mode": "FieldValueNotSupported",
        "spec.window": "FieldValueInvalid",
    }
    assert kmock.stored("kappa.dev/v1alpha1/backfills") == []

    # accepted: unknown fields pruned (a warning; fieldValidation=Strict refuses them), defaults stored
    ok = example("rmi-backfill.yaml")
    ok["spec"]["bogus"] = 1
    del ok["spec"]["alignment"]
    code, refused = await call(kmock, "POST", BACKFILLS, ok, fieldValidation="Strict")
    assert code == 400 and 'strict decoding error: unknown field "spec.bogus"' in refused["message"]
    code, created = await call(kmock, "POST", BACKFILLS, ok)
    assert code == 200, created
    assert "bogus" not in created["spec"] and created["spec"]["alignment"]["mode"] == "aligned"
    assert kmock.warnings == ['Backfill rmi-outage: unknown field "spec.bogus"']

    # an update is validated as a whole, transition rules (oldSelf) too: refused, nothing stored
    path = f"{BACKFILLS}/rmi-outage"
    window = {"spec": {"window": {"end": "2026-11-01T13:00:00Z"}}}
    code, refused = await call(kmock, "PATCH", path, window, MERGE)
    assert code == 422, refused
    assert 'spec.window: Invalid value: "object": window.end must be after start' in refused["message"]
    assert "spec.window is immutable: create a new Backfill for another window" in refused["message"]
    code, refused = await call(kmock, "PATCH", path, {"spec": {"jobRef": {"name": "other"}}}, MERGE)
    assert (code, [c["message"] for c in refused["details"]["causes"]]) == (
        422,
        ['Invalid value: "object": spec.jobRef is immutable: create a new Backfill for another job'],
    ), refused
    assert (await call(kmock, "GET", path))[1]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    # /status is validated against the status schema
    condition = {"type": "Ready", "status": "Maybe"}
    code, refused = await call(kmock, "PATCH", f"{path}/status", {"status": {"conditions": [condition]}}, MERGE)
    assert code == 422, refused
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in refused["message"]
    condition["status"] = "True"
    code, obj = await call(kmock, "PATCH", f"{path}/status", {"status": {"conditions": [condition]}}, MERGE)
    assert code == 200 and obj["status"]["conditions"] == [{**condition, "reason": "", "message": ""}]  # defaulted


async def test_finalizers_hold_a_deletion_until_they_are_removed(kmock: ApiServer) -> None:
    async with watching(kmock, CMS) as seen:
        await call(kmock, "POST", CMS, config_map("held", finalizers=["test/hold"]))
        code, obj = await call(kmock, "DELETE", f"{CMS}/held")
        assert (
            code == 200 and obj["metadata"]["deletionTimestamp"] and obj["metadata"]["deletionGracePeriodSeconds"] == 0
        )
        code, obj = await call(kmock, "GET", f"{CMS}/held")
        assert code == 200 and obj["metadata"]["finalizers"] == ["test/hold"]

        code, refused = await call(
            kmock, "PATCH", f"{CMS}/held", {"metadata": {"finalizers": ["test/hold", "x/y"]}}, MERGE
        )
        assert code == 422, refused
        assert refused["message"] == (
            'ConfigMap "held" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added '
            'if the object is being deleted, found new finalizers []string{"x/y"}'
        )
        rv = obj["metadata"]["resourceVersion"]
        code, again = await call(kmock, "DELETE", f"{CMS}/held")  # a second delete changes nothing
        assert code == 200 and again["metadata"]["resourceVersion"] == rv

        code, last = await call(kmock, "PATCH", f"{CMS}/held", {"metadata": {"finalizers": None}}, MERGE)
        assert code == 200 and "finalizers" not in last["metadata"]
        assert (await call(kmock, "GET", f"{CMS}/held"))[0] == 404

        await call(kmock, "POST", CMS, config_map("free"))
        code, _ = await call(kmock, "DELETE", f"{CMS}/free")
        assert code == 200 and (await call(kmock, "GET", f"{CMS}/free"))[0] == 404
        code, missing = await call(kmock, "DELETE", f"{CMS}/free")
        assert (code, missing["reason"], missing["message"]) == (404, "NotFound", 'configmaps "free" not found')

        await eventually(lambda: _count(seen, 5), "the watch events", 5)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [
        ("ADDED", "held"),
        ("MODIFIED", "held"),  # deletionTimestamp set
        ("DELETED", "held"),  # the write that emptied the finalizers: no MODIFIED before it
        ("ADDED", "free"),
        ("DELETED", "free"),
    ]
    assert "deletionTimestamp" in seen[1]["object"]["metadata"]


async def _count(seen: list[Any], n: int) -> bool:
    return len(seen) >= n


async def test_request_and_object_size_limits(kmock: ApiServer) -> None:
    huge = config_map("huge")
    huge["data"] = {"blob": "x" * (MAX_REQUEST_BYTES + 1)}
    code, refused = await call(kmock, "POST", CMS, huge)
    assert (code, refused["reason"], refused["message"]) == (
        413,
        "RequestEntityTooLarge",
        "Request entity too large: limit is 3145728",
    )

    # under the request limit but over etcd's: what kube-apiserver passes on from etcd
    big = config_map("big")
    big["data"] = {"blob": "x" * (2 * 1024 * 1024)}
    code, refused = await call(kmock, "POST", CMS, big)
    assert (code, refused["message"]) == (500, "etcdserver: request is too large")

    # small writes that grow a stored object past the limit: the one that crosses it fails
    await call(kmock, "POST", JOBS, example("rmi-streamingjob.yaml"))
    chunk = "y" * (700 * 1024)
    assert (await call(kmock, "PATCH", f"{JOBS}/rmi/status", {"status": {"a": chunk}}, MERGE))[0] == 200
    assert (await call(kmock, "PATCH", f"{JOBS}/rmi/status", {"status": {"b": chunk}}, MERGE))[0] == 200
    code, refused = await call(kmock, "PATCH", f"{JOBS}/rmi/status", {"status": {"c": chunk}}, MERGE)
    assert code == 500 and refused["message"] == "etcdserver: request is too large"

    annotated = config_map("annotated", annotations={"a": "z" * (256 * 1024)})
    code, refused = await call(kmock, "POST", CMS, annotated)
    assert (code, refused["message"]) == (
        422,
        'ConfigMap "annotated" is invalid: metadata.annotations: Too long: must have at most 262144 bytes',
    )


async def test_garbage_collection_of_owned_objects(kmock: ApiServer) -> None:
    _, owner = await call(kmock, "POST", CMS, config_map("owner", finalizers=["test/hold"]))
    _, other = await call(kmock, "POST", CMS, config_map("other-owner"))

    def ref(o: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"], "uid": o["metadata"]["uid"]}

    await call(kmock, "POST", CMS, config_map("child", ownerReferences=[ref(owner)]))
    await call(kmock, "POST", CMS, config_map("shared", ownerReferences=[ref(owner), ref(other)]))
    _, child = await call(kmock, "GET", f"{CMS}/child")
    await call(kmock, "POST", CMS, config_map("grandchild", ownerReferences=[ref(child)]))

    await call(kmock, "DELETE", f"{CMS}/owner")  # terminating, not gone: its dependents stay
    assert (await call(kmock, "GET", f"{CMS}/child"))[0] == 200
    await call(kmock, "PATCH", f"{CMS}/owner", {"metadata": {"finalizers": []}}, MERGE)

    names = {o["metadata"]["name"] for o in kmock.stored("v1/configmaps")}
    assert names == {"other-owner", "shared"}  # child and, through it, grandchild are collected
    shared = (await call(kmock, "GET", f"{CMS}/shared"))[1]
    assert shared["metadata"]["ownerReferences"] == [ref(other)]  # only the dangling reference went


async def test_every_event_is_stored(kmock: ApiServer) -> None:
    for reason, name in (("Created", "a"), ("Updated", "a"), ("Created", "b")):
        event = {
            "metadata": {"namespace": "default", "generateName": "kopf-event-"},
            "type": "Normal",
            "reason": reason,
            "message": f"{reason} {name}",
            "involvedObject": {"kind": "StreamingJob", "name": name, "namespace": "default"},
        }
        assert (await call(kmock, "POST", EVENTS, event))[0] == 200
    assert [(e["reason"], e["message"]) for e in events(kmock, "a")] == [
        ("Created", "Created a"),
        ("Updated", "Updated a"),
    ]
    assert len(events(kmock)) == 3 and events(kmock)[2]["involvedObject"]["name"] == "b"


async def test_secret_string_data_is_write_only(kmock: ApiServer) -> None:
    body = {"metadata": {"name": "tok"}, "stringData": {"token": "abc"}, "data": {"other": "eA=="}}
    code, secret = await call(kmock, "POST", SECRETS, body)
    assert code == 200 and "stringData" not in secret and secret["data"] == {"other": "eA==", "token": "YWJj"}
    code, secret = await call(kmock, "PATCH", f"{SECRETS}/tok", {"stringData": {"token": "xyz"}}, STRATEGIC)
    assert code == 200 and secret["data"] == {"other": "eA==", "token": "eHl6"} and "stringData" not in secret


async def test_kopf_status_lands_via_the_subresource_and_its_finalizer_lets_a_delete_finish(kmock: ApiServer) -> None:
    base = str(kmock.url).rstrip("/")
    registry = kopf.OperatorRegistry()
    deleted: list[str] = []

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=base, insecure=True)

    @kopf.on.create("kappa.dev", "v1alpha1", "streamingjobs", registry=registry)
    def created(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        kopf.info(body, reason="Accepted", message="first")
        kopf.info(body, reason="Submitted", message="second")
        patch.status["phase"] = "Submitted"
        patch.status["observedGeneration"] = 1

    @kopf.on.delete("kappa.dev", "v1alpha1", "streamingjobs", registry=registry)
    def gone(name: str, **_: Any) -> None:
        deleted.append(name)

    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.persistence.finalizer = "kappa.dev/finalizer"
    settings.watching.server_timeout = 10
    stop = asyncio.Event()
    task = asyncio.create_task(
        kopf.operator(registry=registry, settings=settings, namespaces=["default"], stop_flag=stop)
    )
    try:
        await asyncio.sleep(1.0)  # the watch must be open
        assert (await call(kmock, "POST", JOBS, example("rmi-streamingjob.yaml")))[0] == 200

        async def phase() -> str | None:
            return ((await call(kmock, "GET", f"{JOBS}/rmi"))[1].get("status") or {}).get("phase")

        await eventually(lambda: _equals(phase, "Submitted"), "kopf's status patch", 20)
        job = (await call(kmock, "GET", f"{JOBS}/rmi"))[1]
        assert job["metadata"]["finalizers"] == ["kappa.dev/finalizer"]
        assert job["status"]["observedGeneration"] == 1
        status_writes = [
            r for r in list(kmock) if str(r.method.value) == "PATCH" and r.url.path.endswith("/rmi/status")
        ]
        assert status_writes, "kopf wrote the status through /status"
        main_writes = [r for r in list(kmock) if str(r.method.value) == "PATCH" and r.url.path.endswith("/rmi")]
        assert all("status" not in (r.data if isinstance(r.data, dict) else {}) for r in main_writes)

        async def kopf_events() -> bool:  # kopf posts them in the background, each one is stored
            return len(events(kmock, "rmi")) >= 2

        await eventually(kopf_events, "kopf's events", 20)
        assert [(e["reason"], e["type"]) for e in events(kmock, "rmi")] == [
            ("Accepted", "Normal"),
            ("Submitted", "Normal"),
        ]

        assert (await call(kmock, "DELETE", f"{JOBS}/rmi"))[0] == 200
        await eventually(lambda: _gone(kmock, f"{JOBS}/rmi"), "the deletion to finish", 20)
        assert deleted == ["rmi"]
    finally:
        stop.set()
        done, _ = await asyncio.wait({task}, timeout=10)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=10)


async def _equals(get: Any, value: Any) -> bool:
    return await get() == value


async def _gone(server: ApiServer, path: str) -> bool:
    return (await call(server, "GET", path))[0] == 404
