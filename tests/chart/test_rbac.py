"""The chart's RBAC against what the operator really does, derived from the code rather than
listed by hand (issue 14, defect 9).

test_chart.py pins the rules exactly (nothing more than needed); these tests fail when the
operator needs something the rules do not grant:

- every call `Cluster` (operator/cluster.py) makes through the Kubernetes client, read with
  `ast` and mapped to (apiGroup, resource, verb) through the client's own endpoint paths;
- what kopf does for the handlers registered: list and watch every handled resource, patch the
  ones with changing handlers (finalizer, progress annotations, status), post events, and peer
  or scan CRDs if those are ever switched on;
- every ownerReference the operator sets, built by the operator's own render and reconcile
  functions: with `blockOwnerDeletion: true`, the OwnerReferencesPermissionEnforcement admission
  plugin (on by default in OpenShift) refuses the create unless the creator may `update` the
  owner's `finalizers` subresource.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kopf
import kubernetes
import pytest
import yaml

from kappa_operator import cluster as cluster_module
from kappa_operator import runner
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.crd import KINDS
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill import plan_backfill
from kappa_operator.reconcile.rewind import downstream_rewind
from kappa_operator.reconcile.streaming_job import plan_streaming_job
from kappa_operator.render.spark_application import Owner, token_secret
from tests.chart.test_chart import CHART, ROOT, permissions, render

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb), any object name
NOW = "2026-11-21T10:00:00Z"
OPERATOR = ROOT / "operator"
CLUSTER = OPERATOR / "cluster.py"

#: `Cluster` methods that take the plural of our resource from their caller, and the plurals
#: they are called with. test_plural_table_matches_the_callers keeps it honest.
PLURAL_ARGUMENT: dict[str, set[str]] = {
    "get_resource": {"streamingjobs", "backfills", "rewinds"},
    "patch_status": {"streamingjobs", "backfills", "rewinds"},
    "list_resources": {"streamingjobs", "backfills"},
    "list_watched": {"backfills"},
    "create_resource": {"rewinds"},
    "annotate": {"streamingjobs"},
}

HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


# --- the rules, as the chart renders them ---------------------------------------------------


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rule_sets(chart: helm_python.Chart) -> dict[str, set[tuple[str, str, str, str]]]:
    """The operator's rules: the ClusterRole (all namespaces), and each Role (watchNamespaces)."""
    sets = {"ClusterRole": permissions(one_of(render(chart), "ClusterRole")["rules"])}
    for role in [o for o in render(chart, {"watchNamespaces": ["a", "b"]}) if o["kind"] == "Role"]:
        sets[f"Role {role['metadata']['namespace']}"] = permissions(role["rules"])
    assert len(sets) == 3
    return sets


def one_of(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


def missing(needed: set[Permission], granted: set[tuple[str, str, str, str]]) -> list[Permission]:
    """What is needed but not granted for any object name (no resourceNames restriction)."""
    return sorted(p for p in needed if (*p, "*") not in granted)


# --- the Kubernetes client calls of operator/cluster.py --------------------------------------


def endpoint(api: type, method: str) -> tuple[str, str]:
    """(path template, HTTP method) of a generated kubernetes client method, from its source."""
    source = inspect.getsource(getattr(api, f"{method}_with_http_info"))
    found = re.search(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'", source)
    assert found, f"{api.__name__}.{method}: no call_api(path, method) in the client's source"
    return found.group(1), found.group(2)


def permission_templates(path: str, http: str, watch: bool) -> list[tuple[str, str, str]]:
    """(group, resource, verb) with the path's placeholders ({group}, {plural}) left in."""
    segments = path.strip("/").split("/")
    group, rest = ("", segments[2:]) if segments[0] == "api" else (segments[1], segments[3:])
    if rest[:2] == ["namespaces", "{namespace}"] and len(rest) > 2:
        rest = rest[2:]
    named = len(rest) > 1
    resource = "/".join([rest[0], *rest[2:3]])  # resource, or resource/subresource
    if http == "GET":
        verbs = ["get"] if named else ["list", *(["watch"] if watch else [])]
    elif http == "DELETE":
        verbs = ["delete" if named else "deletecollection"]
    else:
        verbs = [HTTP_VERBS[http]]
    return [(group, resource, verb) for verb in verbs]


def api_classes(cls: ast.ClassDef) -> dict[str, type]:
    """``self.<attr> = kubernetes.client.<Api>(...)`` in ``__init__``: attr → the Api class."""
    found: dict[str, type] = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            (target,) = node.targets
            func = node.value.func
            if isinstance(target, ast.Attribute) and isinstance(func, ast.Attribute) and func.attr.endswith("Api"):
                found[target.attr] = getattr(kubernetes.client, func.attr)
    return found


def resolve(node: ast.expr, method: ast.FunctionDef) -> set[str]:
    """The values an argument can take: a literal, a module constant, or (for a parameter of
    the `Cluster` method) what PLURAL_ARGUMENT says its callers pass."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Name):
        if node.id in {a.arg for a in method.args.args}:
            assert method.name in PLURAL_ARGUMENT, (
                f"Cluster.{method.name} takes `{node.id}` from its caller: "
                "add the values it is called with to PLURAL_ARGUMENT"
            )
            return PLURAL_ARGUMENT[method.name]
        value = getattr(cluster_module, node.id, None)
        if isinstance(value, str):
            return {value}
    raise AssertionError(f"Cluster.{method.name}: cannot resolve {ast.unparse(node)}: extend resolve()")


def cluster_calls() -> dict[str, set[Permission]]:
    """``Cluster.<method>`` → the permissions its Kubernetes client calls need."""
    tree = ast.parse(CLUSTER.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Cluster"]
    apis = api_classes(cls)
    assert apis, "no kubernetes.client APIs assigned in Cluster.__init__"
    needs: dict[str, set[Permission]] = {}
    for method in [n for n in cls.body if isinstance(n, ast.FunctionDef)]:
        for call in [n for n in ast.walk(method) if isinstance(n, ast.Call)]:
            func = call.func
            if not (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Attribute)
                and isinstance(func.value.value, ast.Name)
                and func.value.value.id == "self"
                and func.value.attr in apis
            ):
                continue
            api = apis[func.value.attr]
            assert hasattr(api, func.attr), f"Cluster.{method.name}: {api.__name__} has no {func.attr}"
            path, http = endpoint(api, func.attr)
            params = list(inspect.signature(getattr(api, func.attr)).parameters)[1:]  # without self
            args = dict(zip(params, call.args, strict=False)) | {k.arg: k.value for k in call.keywords if k.arg}
            watch = "watch" in args
            for group, resource, verb in permission_templates(path, http, watch):
                groups = resolve(args["group"], method) if group == "{group}" else {group}
                head, _, sub = resource.partition("/")
                heads = resolve(args["plural"], method) if head == "{plural}" else {head}
                needs.setdefault(method.name, set()).update(
                    (g, f"{h}/{sub}" if sub else h, verb) for g in groups for h in heads
                )
    return needs


def test_the_client_paths_map_to_rbac_terms() -> None:
    """The mapping itself, on calls whose RBAC terms are well known."""
    core, custom = kubernetes.client.CoreV1Api, kubernetes.client.CustomObjectsApi
    cases = {
        (core, "create_namespaced_config_map", False): [("", "configmaps", "create")],
        (core, "read_namespaced_secret", False): [("", "secrets", "get")],
        (core, "replace_namespaced_secret", False): [("", "secrets", "update")],
        (core, "list_namespaced_pod", True): [("", "pods", "list"), ("", "pods", "watch")],
        (core, "delete_collection_namespaced_pod", False): [("", "pods", "deletecollection")],
        (core, "patch_namespaced_pod_status", False): [("", "pods/status", "patch")],
        (custom, "patch_namespaced_custom_object_status", False): [("{group}", "{plural}/status", "patch")],
        (custom, "delete_namespaced_custom_object", False): [("{group}", "{plural}", "delete")],
    }
    for (api, method, watch), expected in cases.items():
        assert permission_templates(*endpoint(api, method), watch) == expected, method


def test_cluster_calls_are_found() -> None:
    calls = cluster_calls()
    # A sample of what operator/cluster.py does today, so a broken parser cannot pass vacuously.
    assert ("sparkoperator.k8s.io", "sparkapplications", "create") in calls["create_app"]
    assert ("", "configmaps", "patch") in calls["apply_config_map"]
    assert ("kappa.dev", "backfills/status", "patch") in calls["patch_status"]
    assert ("kappa.dev", "rewinds", "create") in calls["create_resource"]


def test_every_cluster_call_is_granted(rule_sets: dict[str, set[tuple[str, str, str, str]]]) -> None:
    calls = cluster_calls()
    for role, granted in rule_sets.items():
        refused = {m: missing(needed, granted) for m, needed in calls.items() if missing(needed, granted)}
        assert not refused, f"{role} does not grant what Cluster methods call: {refused}"


def module_of(path: Path) -> Any:
    relative = path.relative_to(OPERATOR).with_suffix("")
    parts = [p for p in relative.parts if p != "__init__"]
    return importlib.import_module(".".join(["kappa_operator", *parts]))


def test_plural_table_matches_the_callers() -> None:
    """Every plural a caller passes to a PLURAL_ARGUMENT method (a literal or a module
    constant) is in the table, so a new call site cannot need RBAC the test does not check."""
    seen: dict[str, set[str]] = {}
    for path in sorted(OPERATOR.rglob("*.py")):
        if path == CLUSTER or "local" in path.relative_to(OPERATOR).parts:  # local/: `kappa run`'s objects
            continue
        calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)]
        for call in calls:
            if not (isinstance(call.func, ast.Attribute) and call.func.attr in PLURAL_ARGUMENT and call.args):
                continue
            first = call.args[0]
            value = (
                first.value
                if isinstance(first, ast.Constant)
                else getattr(module_of(path), first.id, None)
                if isinstance(first, ast.Name)
                else None
            )
            if isinstance(value, str):
                assert value in PLURAL_ARGUMENT[call.func.attr], (
                    f"{path.relative_to(ROOT)}:{call.lineno}: {call.func.attr}({value!r}): add it to PLURAL_ARGUMENT"
                )
                seen.setdefault(call.func.attr, set()).add(value)
    assert seen["create_resource"] == {"rewinds"} and "streamingjobs" in seen["annotate"]


# --- what kopf does -------------------------------------------------------------------------


def kopf_needs() -> set[Permission]:
    import kappa_operator.handlers  # noqa: F401  (registers the handlers, as `kappa operator` does)

    registry = kopf.get_default_registry()
    assert not registry._webhooks.get_all_handlers(), "webhooks need their own RBAC: add it and a check here"
    needs: set[Permission] = set()
    for kind, handlers in (
        ("watching", registry._watching),
        ("indexing", registry._indexing),
        ("spawning", registry._spawning),
        ("changing", registry._changing),
    ):
        for selector in handlers.get_all_selectors():
            group, plural = selector.group or "", selector.plural or selector.any_name
            assert plural, f"a {kind} handler on {selector}: only plurals are mapped here"
            needs |= {(group, plural, "list"), (group, plural, "watch")}
            if kind in ("spawning", "changing"):  # finalizer, progress annotations, handler status
                needs |= {(group, plural, "patch"), (group, f"{plural}/status", "patch")}
    settings = runner.settings()
    if settings.posting.enabled:
        needs.add(("", "events", "create"))  # kopf posts core v1 events
    if not settings.scanning.disabled:
        needs |= {("apiextensions.k8s.io", "customresourcedefinitions", v) for v in ("list", "watch")}
    if not standalone():
        peerings = ("kopfpeerings", "clusterkopfpeerings")
        needs |= {("kopf.dev", p, v) for p in peerings for v in ("list", "watch", "patch")}
    return needs


def standalone() -> bool:
    """Does `kappa operator` run kopf without peering (kopf.run(standalone=True) in runner.py)?"""
    tree = ast.parse(Path(runner.__file__).read_text())
    runs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "run"
        if isinstance(n.func.value, ast.Name) and n.func.value.id == "kopf"
    ]
    assert runs, "no kopf.run(...) in runner.py"
    flags = [k.value for run in runs for k in run.keywords if k.arg == "standalone"]
    return bool(flags) and all(isinstance(f, ast.Constant) and f.value is True for f in flags)


def test_kopf_needs_are_granted(rule_sets: dict[str, set[tuple[str, str, str, str]]]) -> None:
    needs = kopf_needs()
    assert ("sparkoperator.k8s.io", "sparkapplications", "watch") in needs  # the handlers were found
    assert ("kappa.dev", "rewinds", "patch") in needs
    for role, granted in rule_sets.items():
        assert missing(needs, granted) == [], role


# --- ownerReferences ------------------------------------------------------------------------


def manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"] = {**data["metadata"], "namespace": "jobs", "uid": f"uid-{data['metadata']['name']}"}
    return data


def owned_objects() -> list[dict[str, Any]]:
    """Every object the operator creates with ownerReferences, built by its own code."""
    job = StreamingJob.model_validate(manifest("rmi-streamingjob.yaml"))
    live = plan_streaming_job(job, None, NOW)
    backfill = plan_backfill(
        Backfill.model_validate(manifest("rmi-backfill.yaml")), job, None, "http://coordinator:8471", NOW, "admin"
    )
    assert backfill.secret is not None, "an aligned Backfill gets its coordinator credential"
    point = SinkRestore(sink="attributed_plays", batch_id=41, committed_at="2026-11-01T13:58:00Z", query_id="q-1")
    restores = [point.model_dump(by_alias=True)]
    rewind = Rewind.model_validate({**manifest("rmi-rewind.yaml"), "status": {"restores": restores}})
    objects = [
        live.config_map,
        live.create_app,
        backfill.config_map,
        backfill.secret,
        backfill.create_app,
        downstream_rewind(rewind, job),
    ]
    # The coordinator credential as any of our kinds would own it (Owner.reference() is what
    # every child's ownerReference is made of).
    objects += [token_secret(Owner(k.kind, "x", "jobs", "uid-x"), "token") for k in KINDS]
    return [o for o in objects if o is not None]


def plural(kind: str) -> str:
    """Our kinds' plurals from the CRDs; the others' are the lowercase kind plus "s" (true of
    ConfigMap, Secret, SparkApplication)."""
    return {k.kind: k.plural for k in KINDS}.get(kind, f"{kind.lower()}s")


def group(api_version: str) -> str:
    return api_version.rpartition("/")[0]  # "" for core "v1"


def ownership_needs(objects: list[dict[str, Any]]) -> set[Permission]:
    needs: set[Permission] = set()
    for obj in objects:
        needs.add((group(obj["apiVersion"]), plural(obj["kind"]), "create"))
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("blockOwnerDeletion"):
                needs.add((group(ref["apiVersion"]), f"{plural(ref['kind'])}/finalizers", "update"))
    return needs


def test_the_operator_sets_blocking_owner_references() -> None:
    objects = owned_objects()
    owners = {
        (o["kind"], r["kind"]) for o in objects for r in o["metadata"]["ownerReferences"] if r["blockOwnerDeletion"]
    }
    assert {
        ("ConfigMap", "StreamingJob"),
        ("SparkApplication", "StreamingJob"),
        ("ConfigMap", "Backfill"),
        ("SparkApplication", "Backfill"),
        ("Rewind", "Rewind"),
        ("Secret", "Backfill"),
    } <= owners


def test_owners_finalizers_are_updatable_and_children_creatable(
    rule_sets: dict[str, set[tuple[str, str, str, str]]],
) -> None:
    needs = ownership_needs(owned_objects())
    assert {("kappa.dev", f"{k.plural}/finalizers", "update") for k in KINDS} <= needs
    for role, granted in rule_sets.items():
        assert missing(needs, granted) == [], f"{role}: forbidden under OwnerReferencesPermissionEnforcement"


def test_the_ownership_check_catches_a_missing_finalizers_rule(chart: helm_python.Chart) -> None:
    """The defect as it was: the same rules without `update` on */finalizers fail the check."""
    rules = [r for r in one_of(render(chart), "ClusterRole")["rules"] if not r["resources"][0].endswith("/finalizers")]
    refused = missing(ownership_needs(owned_objects()), permissions(rules))
    assert {r[1] for r in refused} == {f"{k.plural}/finalizers" for k in KINDS}
