"""The real kube-apiserver is the oracle for what our CRDs accept (issue 27, Fix 1, 2, 3, 5, 6).

Every manifest of tests/unit/kappa_operator/models/test_schema_agreement.py and
tests/unit/kappa_operator/models/test_crds.py goes to the server too (a dry-run create): the
server and the models must give the same verdict and name the same field. Then what the offline
validator could never show: that the CRDs install at all, that a value at every numeric bound is
stored and one past it refused, that a JSON null in an optional field is stored as absent (so
immutability and the other rules hold for null and absent alike), and that an object whose rules
ran is still deletable."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from kappa_operator.local_cluster.control_plane import ControlPlane
from kappa_operator.local_cluster.rest import Response, path_of
from kappa_operator.models.common import INT32_MAX, INT64_BOUND
from tests.unit.crd_documents import edited, example
from tests.unit.kappa_operator.models.test_crds import REJECTED
from tests.unit.kappa_operator.models.test_schema_agreement import (
    BF,
    CASES,
    RW,
    SJ,
    avro_named,
    kafka_security_named,
    kafka_when_bootstrapped,
    maximal,
    model_errors,
    pod_scalars,
    spec_rest,
    spec_schema,
)

NUMBER = ("integer", "number")


@pytest.fixture(scope="module", params=["current", "oldest"])
def server(request: pytest.FixtureRequest) -> ControlPlane:
    """Each check on the kube-apiserver the suite runs on and on the oldest the chart supports."""
    return request.getfixturevalue("control_plane" if request.param == "current" else "oldest_control_plane")


@pytest.fixture(scope="module")
def namespace(server: ControlPlane) -> Iterator[str]:
    name = server.namespace("crds")
    yield name
    # gone before the operator tests start watching (the current server's); the oldest runs no
    # namespace controller, so its namespace stays Terminating until that server stops
    server.delete_namespace(name, wait=60 if server.controllers else 0)


def dry_run(plane: ControlPlane, namespace: str, manifest: dict[str, Any]) -> Response:
    """A create as kubectl sends it (unknown fields refused), stored nowhere."""
    body = copy.deepcopy(manifest)
    body["metadata"] = {**body.get("metadata", {}), "namespace": namespace}
    params = {"dryRun": "All", "fieldValidation": "Strict"}
    return plane.admin.request("POST", path_of(body["kind"], namespace), body, params=params)


def causes(response: Response) -> list[str]:
    details = response.body.get("details") or {} if isinstance(response.body, dict) else {}
    return [f"{c.get('field')}: {c.get('message')}" for c in details.get("causes") or []] or [response.message]


# --- the CRDs install ------------------------------------------------------------------------


def test_every_crd_is_established_and_the_charts_copies_apply(server: ControlPlane) -> None:
    """The fixture applied crds/*.yaml (it fails when the server refuses one); the chart's
    copies are what `helm install` sends: applied again, they change nothing."""
    import yaml

    from harness.chart import CHART, crd_documents

    names = {doc["metadata"]["name"] for doc in crd_documents()}
    assert {"streamingjobs.kappa.dev", "backfills.kappa.dev", "rewinds.kappa.dev"} <= names
    server.apply_manifests([yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))])
    for name in names:
        server.wait_established(name)


def test_no_crd_bound_is_lost_to_float64() -> None:
    """kube-apiserver reads ``maximum``/``minimum`` as float64: every bound must be a number
    float64 holds exactly, or the server compares against another one (issue 27)."""
    from harness.chart import crd_documents

    def bounds(node: Any, path: str = "") -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        if isinstance(node, dict):
            out += [(f"{path}.{k}", node[k]) for k in ("maximum", "minimum") if k in node]
            for key, value in node.items():
                out += bounds(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                out += bounds(value, f"{path}[{i}]")
        return out

    for doc in crd_documents()[:3]:
        for where, bound in bounds(doc):
            assert float(bound) == bound and int(float(bound)) == int(bound), f"{where}: {bound} is not a float64"


# --- the server and the models agree ---------------------------------------------------------


@pytest.mark.parametrize(("kind", "edits", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_server_and_models_agree(
    server: ControlPlane, namespace: str, kind: str, edits: dict[str, Any], field: str | None
) -> None:
    manifest = edited(kind, edits)
    answer = dry_run(server, namespace, manifest)
    model = model_errors(kind, manifest)
    if field is None:
        assert answer.status == 201, f"the server refuses it: {causes(answer)}"
        assert model is None, f"the model refuses it: {model}"
        assert model_errors(kind, answer.body) is None, "the model refuses the object the server stores"
        return
    assert answer.status == 422, f"the server answers {answer.status}; the model says {model}"
    assert any(field in c for c in causes(answer)), f"the server's errors do not name {field}: {causes(answer)}"
    assert model is not None, f"the server refuses it ({causes(answer)}), the model accepts it"
    assert any(loc.startswith(field) for loc, _ in model), f"the model's errors do not name {field}: {model}"


@pytest.mark.parametrize(("kind", "edits", "expected"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_server_refuses_what_the_offline_validator_refuses(
    server: ControlPlane, namespace: str, kind: str, edits: dict[str, Any], expected: str
) -> None:
    answer = dry_run(server, namespace, edited(kind, edits))
    assert answer.status in (400, 422), f"the server answers {answer.status} (expected a refusal: {expected})"


def numeric_leaves(value: Any, node: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """(path, schema) of every integer or number field of a maximal spec."""
    if node.get("type") in NUMBER:
        return [(path, node)]
    out = []
    if isinstance(value, dict):
        for key, sub in value.items():
            child = (node.get("properties") or {}).get(key) or node.get("additionalProperties")
            if isinstance(child, dict):
                out += numeric_leaves(sub, child, (*path, key))
    elif isinstance(value, list) and value:
        out += numeric_leaves(value[0], node["items"], (*path, "0"))
    return out


def maximal_manifest(kind: str) -> dict[str, Any]:
    """Pod settings hold their scalars only: their lists and maps pass Kubernetes objects
    through, bounded by the models' budget, not the schema."""
    spec = {**maximal(spec_rest(kind)), **pod_scalars(kind)}
    if kind == RW:
        del spec["target"]["batchId"]
    for env in spec.get("envFrom", []):
        del env["configMapRef"]
    if "initialSnapshot" in spec:
        del spec["initialSnapshot"]["time"]  # exactly one of the two: the number has bounds to test
    kafka_when_bootstrapped(spec)
    kafka_security_named(spec)
    avro_named(spec)
    return {**example(kind), "spec": spec}


def at(manifest: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(manifest)
    node: Any = out["spec"]
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[path[-1]] = value
    return out


def bound_cases() -> list[Any]:
    cases = []
    for kind in (BF, SJ, RW):
        manifest = maximal_manifest(kind)
        if kind == RW:
            manifest["spec"]["target"] = {"batchId": 0}
        for path, node in numeric_leaves(manifest["spec"], spec_schema(kind)):
            step = 1 if node["type"] == "integer" else 0.0005
            for key, sign in (("maximum", 1), ("minimum", -1)):
                if key in node:
                    name = f"{kind}-{'.'.join(path)}-{key}"
                    cases.append(pytest.param(kind, path, node[key], True, id=f"{name}-at"))
                    cases.append(pytest.param(kind, path, node[key] + sign * step, False, id=f"{name}-past"))
    return cases


@pytest.mark.parametrize(("kind", "path", "value", "valid"), bound_cases())
def test_every_numeric_bound_holds_on_the_server(
    server: ControlPlane, namespace: str, kind: str, path: tuple[str, ...], value: Any, valid: bool
) -> None:
    """A value at each bound is stored as sent, one past it is refused naming the field, and
    the model says the same (issue 27, Fix 1, 5, 6)."""
    base = maximal_manifest(kind)
    if path == ("target", "batchId"):
        base["spec"]["target"] = {"batchId": 0}
    if path[-1] == "end":  # an offset range's end is at least its start (a rule of its own)
        base = at(base, (*path[:-1], "start"), 0)
    manifest = at(base, path, value)
    answer = dry_run(server, namespace, manifest)
    model = model_errors(kind, manifest)
    if valid:
        assert answer.status == 201, f"{value} refused: {causes(answer)}"
        stored: Any = answer.body["spec"]
        for key in path:
            stored = stored[int(key)] if isinstance(stored, list) else stored[key]
        assert stored == value, f"stored {stored}, sent {value}"
        assert model is None, f"the model refuses {value}: {model}"
    else:
        assert answer.status == 422, f"{value} accepted past the bound"
        assert any(path[-1] in c for c in causes(answer)), causes(answer)
        assert model is not None, f"the model accepts {value}, the server does not"


def test_bounds_are_the_ones_the_issue_names() -> None:
    """Counts are int32 (the SparkApplication's fields), int64 values stop where float64 does."""
    sj, bf = spec_schema(SJ), spec_schema(BF)
    assert sj["properties"]["executor"]["properties"]["instances"]["maximum"] == INT32_MAX
    assert sj["properties"]["driver"]["properties"]["cores"]["maximum"] == INT32_MAX
    assert bf["properties"]["restartNonce"]["maximum"] == INT64_BOUND


# --- nulls are absent, updates keep working ----------------------------------------------------


def created(plane: ControlPlane, namespace: str, manifest: dict[str, Any], name: str) -> dict[str, Any]:
    body = copy.deepcopy(manifest)
    body["metadata"] = {"name": name, "namespace": namespace}
    return plane.admin.ok(plane.admin.create(path_of(body["kind"], namespace), body), f"create {name}")


def every_update_works(plane: ControlPlane, path: str) -> None:
    admin = plane.admin
    admin.ok(admin.merge(path, {"metadata": {"labels": {"touched": "yes"}}}), "label")
    admin.ok(admin.merge(path, {"metadata": {"finalizers": ["kappa.dev/finalizer"]}}), "finalizer")
    admin.ok(admin.merge(path + "/status", {"status": {"phase": "Pending", "message": "x"}}), "status")
    admin.ok(admin.delete(path), "delete")
    admin.ok(admin.merge(path + "/status", {"status": {"phase": "Deleting"}}), "status while deleting")
    admin.ok(admin.merge(path, {"metadata": {"finalizers": None}}), "finalizer removal")
    assert admin.get(path).status == 404, "the object is gone once its finalizer is"


def test_a_null_in_an_optional_field_is_stored_as_absent(server: ControlPlane, namespace: str) -> None:
    """`kubectl create -f` of a Backfill with `window.drain: null`: the create used to be
    accepted with the null stored, and then every update of the object was refused as "spec.window
    is immutable", labels, status and finalizers included (issue 27, Fix 2). Optional fields are
    not nullable now: the server prunes the null, and the object is as if it was never written."""
    manifest = edited(BF, {"spec.window.drain": None, "spec.image": None})
    obj = created(server, namespace, manifest, "null-drain")
    assert "drain" not in obj["spec"]["window"] and "image" not in obj["spec"], obj["spec"]
    every_update_works(server, path_of(BF, namespace, "null-drain"))


def test_a_null_in_a_server_side_apply_is_refused_naming_the_field(server: ControlPlane, namespace: str) -> None:
    """`kubectl apply --server-side` does not prune nulls: the apply is refused at the door,
    naming the field, and nothing is stored that could block a later update."""
    manifest = edited(BF, {"spec.window.drain": None})
    body = {**manifest, "metadata": {"name": "null-drain-ssa", "namespace": namespace}}
    answer = server.admin.apply(path_of(BF, namespace, "null-drain-ssa"), body)
    assert answer.status == 422 and "spec.window.drain" in answer.message, answer.message
    assert server.admin.get(path_of(BF, namespace, "null-drain-ssa")).status == 404
    body["spec"]["window"].pop("drain")
    server.admin.ok(server.admin.apply(path_of(BF, namespace, "null-drain-ssa"), body), "apply")
    every_update_works(server, path_of(BF, namespace, "null-drain-ssa"))


def test_a_rewind_with_a_null_target_time_takes_status_patches(server: ControlPlane, namespace: str) -> None:
    manifest = edited(RW, {"spec.target": {"time": None, "batchId": 7}})
    obj = created(server, namespace, manifest, "null-time")
    assert obj["spec"]["target"] == {"batchId": 7}
    every_update_works(server, path_of(RW, namespace, "null-time"))


def test_immutability_holds_for_null_and_absent_alike(server: ControlPlane, namespace: str) -> None:
    created(server, namespace, edited(BF, {"spec.image": "spark:one"}), "immutable-image")
    path = path_of(BF, namespace, "immutable-image")
    for change in ({"spec": {"image": None}}, {"spec": {"image": "spark:two"}}):
        answer = server.admin.merge(path, change)
        assert answer.status == 422 and "spec.image is immutable" in answer.message, (change, answer.message)
    created(server, namespace, example(BF), "immutable-no-image")
    path = path_of(BF, namespace, "immutable-no-image")
    answer = server.admin.merge(path, {"spec": {"image": "spark:two"}})
    assert answer.status == 422 and "spec.image is immutable" in answer.message, answer.message
    assert server.admin.merge(path, {"spec": {"image": None, "restartNonce": 1}}).status == 200


@pytest.mark.parametrize("kind", [BF, SJ, RW])
def test_a_deleted_object_takes_status_and_finalizer_patches(server: ControlPlane, namespace: str, kind: str) -> None:
    """Every rule ran on a status patch of a deleted object without an evaluation error, and
    the finalizer can always be removed (issue 27, Fix 3)."""
    created(server, namespace, example(kind), f"deleted-{kind.lower()}")
    every_update_works(server, path_of(kind, namespace, f"deleted-{kind.lower()}"))


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"spec": {"window": {"end": "2026-11-01T20:00:00Z"}}}, "spec.window is immutable"),
        ({"spec": {"jobRef": {"name": "other"}}}, "spec.jobRef is immutable"),
        ({"spec": {"alignment": {"maxDrift": "5m"}}}, "spec.alignment is immutable"),
        ({"spec": {"output": {"branch": "other"}}}, "spec.output is immutable"),
        ({"spec": {"readLimit": {"maxFilesPerSecond": 2}}}, "spec.readLimit is immutable"),
    ],
)
def test_backfill_spec_is_immutable_on_the_server(
    server: ControlPlane, namespace: str, edits: dict[str, Any], message: str
) -> None:
    name = "imm-" + next(iter(edits["spec"])).lower()
    created(server, namespace, example(BF), name)
    path = path_of(BF, namespace, name)
    answer = server.admin.merge(path, edits)
    assert answer.status == 422 and message in answer.message, answer.message
    for allowed in (
        {"spec": {"restartNonce": 3}},
        {"spec": {"publish": {"enabled": False}}},
        {"spec": {"priority": 5}},
    ):
        assert server.admin.merge(path, allowed).status == 200, allowed


def test_the_servers_are_the_current_one_and_the_charts_oldest(
    control_plane: ControlPlane, oldest_control_plane: ControlPlane
) -> None:
    """The chart claims the versions the suite checks: its kubeVersion's minimum is the oldest
    server here, and the current one is at least 1.33 (issue 27)."""
    import re

    import yaml

    from harness.chart import CHART

    minimum = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)\.0-0", minimum)
    assert found, f"kubeVersion {minimum!r}: a minimum, >=1.N.0-0"
    assert oldest_control_plane.version.startswith(f"v{found[1]}.{found[2]}."), oldest_control_plane.version
    major, minor = (int(x) for x in control_plane.version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (1, 33), control_plane.version


@pytest.mark.parametrize("size", ["example", "largest"])
def test_rendered_spark_applications_are_accepted_by_the_spark_operator_crd(
    server: ControlPlane, namespace: str, size: str
) -> None:
    """What the operator renders from a StreamingJob and its Backfill, at the example's sizes and
    at the largest the CRD allows (int32 cores and instances), is a SparkApplication the
    server stores as sent: the SparkApplication CRD's 32-bit fields hold every size our CRD
    accepts (issue 27, Fix 5)."""
    from kappa_operator.models.backfill import Backfill
    from kappa_operator.models.streaming_job import StreamingJob
    from kappa_operator.render.jobconfig import backfill_config, streaming_job_config
    from kappa_operator.render.spark_application import (
        BACKFILL_RESTART,
        LIVE_RESTART,
        Launch,
        Owner,
        spark_application,
    )

    edits = {}
    if size == "largest":
        edits = {f"spec.{role}.{key}": INT32_MAX for role in ("driver", "executor") for key in ("cores",)}
        edits["spec.executor.instances"] = INT32_MAX
    job = StreamingJob.model_validate({**edited(SJ, edits), "metadata": {"name": "rmi", "uid": "u-1"}})
    bf_doc = example(BF)
    backfill = Backfill.model_validate({**bf_doc, "metadata": {**bf_doc["metadata"], "uid": "abcdef0123"}})
    spec = job.spec
    apps = [
        spark_application(
            Owner("StreamingJob", "rmi", namespace, "u-1"),
            streaming_job_config(job),
            Launch(spec.image, spec.driver, spec.executor, "spark", LIVE_RESTART),
            "h",
        ),
        spark_application(
            Owner("Backfill", "rmi-outage", namespace, "abcdef0123"),
            backfill_config(backfill, job, "http://c:8471"),
            Launch(spec.image, spec.driver, spec.executor, "spark", BACKFILL_RESTART, "kappa-coordinator"),
            "h",
        ),
    ]
    for app in apps:
        app["metadata"]["namespace"] = namespace
        answer = dry_run(server, namespace, app)
        assert answer.status == 201, causes(answer)
        assert answer.body["spec"]["executor"]["instances"] == spec.executor.instances
        assert answer.body["spec"]["driver"]["cores"] == spec.driver.cores
