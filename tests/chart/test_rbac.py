"""The chart's RBAC against what the operator really does, derived from the code rather than
listed by hand (issue 14, defect 9).

test_chart.py pins the rules exactly (nothing more than needed); these tests fail when the
operator needs something the rules do not grant:

- every call `Cluster` (operator/kube/api.py) makes through the Kubernetes client, read with
  `ast` and mapped to (apiGroup, resource, verb) through the client's own endpoint paths;
- what kopf does for the handlers registered: list and watch every handled resource, patch the
  ones with changing handlers (finalizer, progress annotations, status), post events, and peer
  or scan CRDs if those are ever switched on;
- every ownerReference the operator sets, built by the operator's own render and reconcile
  functions: with `blockOwnerDeletion: true`, the OwnerReferencesPermissionEnforcement admission
  plugin (on by default in OpenShift) refuses the create unless the creator may `update` the
  owner's `finalizers` subresource.

What is granted is read as the RBAC authorizer reads it: the rendered bindings of the operator's
ServiceAccount are followed to their (Cluster)Roles, a ClusterRoleBinding granting in every
namespace and a RoleBinding only in its own (issue 27, item 9: the coordinator Secrets, which
RBAC can narrow by namespace only, are granted where Backfills run, not in the whole cluster).
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
import kubernetes_validate
import pytest
import yaml

from kappa_operator.kube import api as cluster_module
from kappa_operator.leadership import lease as lease_module
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.crd import KINDS
from kappa_operator.models.rewind import Rewind, SinkRestore
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill.decide import decide_backfill
from kappa_operator.reconcile.rewind import downstream_rewind
from kappa_operator.reconcile.streaming_job import decide_streaming_job
from kappa_operator.render.spark_application import Owner, token_secret
from kappa_operator.service import runner
from tests.chart.test_chart import CHART, FULLNAME, KUBE_VERSION, NAMESPACE, ROOT, permissions, render

Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb), any object name
Grant = tuple[str, str, str, str]  # a Permission and the object name it is limited to ("*": any)
NOW = "2026-11-21T10:00:00Z"
OPERATOR = ROOT / "operator"
CLUSTER = OPERATOR / "kube" / "api.py"
LEASE = OPERATOR / "leadership" / "lease.py"

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


#: Installs that let Backfills run, and the namespaces where they run. Watching all namespaces,
#: the coordinator Secrets are granted in the namespaces listed or, if asked, everywhere.
MODES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "all namespaces, Secrets in listed ones": ({"rbac": {"coordinatorSecrets": {"namespaces": ["jobs"]}}}, ("jobs",)),
    "all namespaces, Secrets cluster-wide": ({"rbac": {"coordinatorSecrets": {"clusterWide": True}}}, ("jobs",)),
    "watchNamespaces": ({"watchNamespaces": ["jobs", "b"]}, ("jobs", "b")),
}
ALL = "*"  # where a ClusterRoleBinding grants: every namespace, and cluster-scoped requests
OPERATOR_ACCOUNT = {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
SECRET_RULE = f"{FULLNAME}-coordinator-secrets"


def bindings(objects: list[dict[str, Any]]) -> list[tuple[str, set[Grant]]]:
    """(where, grants) of each binding of the operator's ServiceAccount: ``ALL`` for a
    ClusterRoleBinding, the namespace of a RoleBinding (to a Role there, or to a ClusterRole,
    whose rules then hold in that namespace only). A binding to a role the chart does not
    render fails: the install would grant less than it says."""
    roles = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    found = []
    for binding in [o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        if OPERATOR_ACCOUNT not in binding["subjects"]:
            continue  # e.g. the Spark drivers' RoleBindings
        ref, namespace = binding["roleRef"], binding["metadata"].get("namespace")
        key = (ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"])
        assert key in roles, f"{binding['kind']} {binding['metadata']['name']} refers to a missing {key}"
        where = ALL if binding["kind"] == "ClusterRoleBinding" else namespace
        found.append((where, permissions(roles[key]["rules"])))
    return found


def granted(objects: list[dict[str, Any]], namespace: str | None) -> set[Grant]:
    """What the operator may do in ``namespace`` (None: a cluster-scoped request, such as a
    list or watch across all namespaces)."""
    return {g for where, grants in bindings(objects) if where in (ALL, namespace) for g in grants}


def where_granted(objects: list[dict[str, Any]], permission: Permission) -> set[str]:
    """The namespaces (``ALL``: all of them) where the operator may do ``permission`` to any
    object name."""
    return {where for where, grants in bindings(objects) if (*permission, "*") in grants}


@pytest.fixture(scope="module")
def installs(chart: helm_python.Chart) -> dict[str, list[dict[str, Any]]]:
    return {mode: render(chart, values) for mode, (values, _) in MODES.items()}


@pytest.fixture(scope="module")
def rule_sets(installs: dict[str, list[dict[str, Any]]]) -> dict[str, set[Grant]]:
    """What the operator may do in each namespace where Backfills run, per install mode."""
    sets = {
        f"{mode}: namespace {namespace}": granted(installs[mode], namespace)
        for mode, (_, namespaces) in MODES.items()
        for namespace in namespaces
    }
    assert len(sets) == 4 and all(sets.values())
    return sets


def missing(needed: set[Permission], grants: set[Grant]) -> list[Permission]:
    """What is needed but not granted for any object name (no resourceNames restriction)."""
    return sorted(p for p in needed if (*p, "*") not in grants)


# --- the Kubernetes client calls of operator/kube/api.py --------------------------------------


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


def resolve(node: ast.expr, method: ast.FunctionDef, module: Any = cluster_module) -> set[str]:
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
        value = getattr(module, node.id, None)
        if isinstance(value, str):
            return {value}
    raise AssertionError(f"Cluster.{method.name}: cannot resolve {ast.unparse(node)}: extend resolve()")


def cluster_calls() -> dict[str, set[Permission]]:
    """``Cluster.<method>`` → the permissions its Kubernetes client calls need."""
    return client_calls(CLUSTER, "Cluster", cluster_module)


def client_calls(path: Path, class_name: str, module: Any) -> dict[str, set[Permission]]:
    """``<class_name>.<method>`` (in ``path``) → the permissions its Kubernetes client calls need."""
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
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
                groups = resolve(args["group"], method, module) if group == "{group}" else {group}
                head, _, sub = resource.partition("/")
                heads = resolve(args["plural"], method, module) if head == "{plural}" else {head}
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
    # A sample of what operator/kube/api.py does today, so a broken parser cannot pass vacuously.
    assert ("sparkoperator.k8s.io", "sparkapplications", "create") in calls["create_app"]
    assert ("", "configmaps", "patch") in calls["apply_config_map"]
    assert ("kappa.dev", "backfills/status", "patch") in calls["patch_status"]
    assert ("kappa.dev", "rewinds", "create") in calls["create_resource"]


def test_every_cluster_call_is_granted(rule_sets: dict[str, set[Grant]]) -> None:
    calls = cluster_calls()
    for role, grants in rule_sets.items():
        refused = {m: missing(needed, grants) for m, needed in calls.items() if missing(needed, grants)}
        assert not refused, f"{role} does not grant what Cluster methods call: {refused}"


def leader_election_calls() -> set[Permission]:
    """What the replicas' election calls (operator/leadership/lease.py): the Lease and the pods'
    leader label, in the release namespace."""
    return {
        p
        for cls in ("LeaseLock", "LeaderLabel")
        for needed in client_calls(LEASE, cls, lease_module).values()
        for p in needed
    }


def test_the_leader_election_calls_are_granted_in_the_release_namespace(
    installs: dict[str, list[dict[str, Any]]],
) -> None:
    needed = leader_election_calls()
    assert ("coordination.k8s.io", "leases", "update") in needed and ("", "pods", "patch") in needed
    for mode, objects in installs.items():
        grants = granted(objects, NAMESPACE)
        for group, resource, verb in needed:
            named = (group, resource, verb, FULLNAME) in grants  # the Lease is named after the release
            assert named or (group, resource, verb, "*") in grants, f"{mode}: {verb} {resource} refused in {NAMESPACE}"


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
    # registers the handlers, as `kappa operator` does; its progress timer (registered at start,
    # handlers.progress.follow_progress_every) is on streamingjobs, whose other timers are here
    import kappa_operator.handlers  # noqa: F401

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


def test_kopf_needs_are_granted(rule_sets: dict[str, set[Grant]], installs: dict[str, list[dict[str, Any]]]) -> None:
    needs = kopf_needs()
    assert ("sparkoperator.k8s.io", "sparkapplications", "watch") in needs  # the handlers were found
    assert ("kappa.dev", "rewinds", "patch") in needs
    for role, grants in rule_sets.items():
        assert missing(needs, grants) == [], role
    # Watching all namespaces, kopf lists and watches across the cluster: a cluster-scoped
    # request, which only a ClusterRoleBinding grants.
    streams = {p for p in needs if p[2] in ("list", "watch")}
    for mode, (values, _) in MODES.items():
        if not values.get("watchNamespaces"):
            assert missing(streams, granted(installs[mode], None)) == [], mode


# --- ownerReferences ------------------------------------------------------------------------


def manifest(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "examples" / name).read_text())
    data["metadata"] = {**data["metadata"], "namespace": "jobs", "uid": f"uid-{data['metadata']['name']}"}
    return data


def owned_objects() -> list[dict[str, Any]]:
    """Every object the operator creates with ownerReferences, built by its own code."""
    job = StreamingJob.model_validate(manifest("rmi-streamingjob.yaml"))
    live = decide_streaming_job(job, None, NOW)
    backfill = decide_backfill(
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


def test_owners_finalizers_are_updatable_and_children_creatable(rule_sets: dict[str, set[Grant]]) -> None:
    needs = ownership_needs(owned_objects())
    assert {("kappa.dev", f"{k.plural}/finalizers", "update") for k in KINDS} <= needs
    for role, grants in rule_sets.items():
        assert missing(needs, grants) == [], f"{role}: forbidden under OwnerReferencesPermissionEnforcement"


def test_the_ownership_check_catches_a_missing_finalizers_rule(installs: dict[str, list[dict[str, Any]]]) -> None:
    """The defect as it was: the same rules without `update` on */finalizers fail the check."""
    (objects, (namespace, *_)) = installs["watchNamespaces"], MODES["watchNamespaces"][1]
    (role,) = [o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == namespace]
    rules = [r for r in role["rules"] if not r["resources"][0].endswith("/finalizers")]
    refused = missing(ownership_needs(owned_objects()), permissions(rules))
    assert {r[1] for r in refused} == {f"{k.plural}/finalizers" for k in KINDS}


# --- Secrets: only where Backfills run (issue 27, item 9) -----------------------------------


def secret_needs() -> set[Permission]:
    """What the operator does to Secrets, from the code: its Cluster calls and the Secrets it
    creates with ownerReferences."""
    calls = {p for needed in cluster_calls().values() for p in needed if p[:2] == ("", "secrets")}
    return calls | {p for p in ownership_needs(owned_objects()) if p[:2] == ("", "secrets")}


def test_the_secret_calls_are_found() -> None:
    """The coordinator Secret's create, read-back, update and delete (Cluster.apply_secret and
    delete_secret), so the checks below cannot pass on an empty set."""
    assert secret_needs() == {("", "secrets", verb) for verb in ("create", "get", "patch", "delete")}


def test_the_secret_rule_is_exactly_what_the_operator_does(installs: dict[str, list[dict[str, Any]]]) -> None:
    """The one rule the operator holds on Secrets grants what the code calls and no more: in
    particular never list or watch, which would hand it every Secret of a namespace."""
    rule = [o for o in installs["all namespaces, Secrets in listed ones"] if o["metadata"]["name"] == SECRET_RULE]
    (secrets,) = [o for o in rule if o["kind"] == "ClusterRole"]
    assert permissions(secrets["rules"]) == {(*p, "*") for p in secret_needs()}
    for objects in installs.values():
        for where, grants in bindings(objects):
            on_secrets = {g for g in grants if g[:2] == ("", "secrets")}
            assert on_secrets <= {(*p, "*") for p in secret_needs()}, where


def test_no_binding_grants_secrets_in_the_whole_cluster_unless_asked(chart: helm_python.Chart) -> None:
    """Watching all namespaces, the default install grants no Secret anywhere, and listing
    namespaces grants them there only: no ClusterRoleBinding reaches a rule on Secrets."""
    listed = {"rbac": {"coordinatorSecrets": {"namespaces": ["jobs", "etl", "jobs"]}}}
    for values, where in ((None, set()), (listed, {"jobs", "etl"})):
        objects = render(chart, values)
        for need in secret_needs():
            assert where_granted(objects, need) == where, (values, need)
        for namespace in (None, "kube-system", "kappa-system"):
            assert not {g for g in granted(objects, namespace) if g[:2] == ("", "secrets")}, (values, namespace)
    # The explicit opt-in (rbac.coordinatorSecrets.clusterWide) is the one way back to it.
    everywhere = render(chart, {"rbac": {"coordinatorSecrets": {"clusterWide": True}}})
    assert all(where_granted(everywhere, need) == {ALL} for need in secret_needs())


def test_the_secret_check_catches_the_old_cluster_wide_grant(chart: helm_python.Chart) -> None:
    """The defect as it was: the Secret rule in the operator's ClusterRole, bound cluster-wide,
    grants every Secret of the cluster; the check above sees it."""
    objects = render(chart, {"rbac": {"coordinatorSecrets": {"namespaces": ["jobs"]}}})
    (main,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == FULLNAME]
    main["rules"].append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get", "patch", "delete"]})
    assert all(where_granted(objects, need) == {ALL, "jobs"} for need in secret_needs())
    assert ("", "secrets", "get", "*") in granted(objects, "kube-system")


def test_watched_namespaces_carry_the_secret_rule_and_nothing_else_does(
    installs: dict[str, list[dict[str, Any]]],
) -> None:
    objects = installs["watchNamespaces"]
    assert not [o for o in objects if o["metadata"]["name"] == SECRET_RULE]
    for need in secret_needs():
        assert where_granted(objects, need) == set(MODES["watchNamespaces"][1])


def test_a_backfill_namespace_without_the_grant_lacks_only_secrets(installs: dict[str, list[dict[str, Any]]]) -> None:
    """Watching all namespaces, a namespace not listed still gets everything StreamingJobs and
    Rewinds need; what a Backfill there is refused is its coordinator Secret (the trade-off the
    chart's README states)."""
    objects = installs["all namespaces, Secrets in listed ones"]
    needs = {p for needed in cluster_calls().values() for p in needed} | kopf_needs() | ownership_needs(owned_objects())
    assert set(missing(needs, granted(objects, "elsewhere"))) == secret_needs()
    assert missing(needs, granted(objects, "jobs")) == []


def test_no_wildcards_in_the_operators_rules(installs: dict[str, list[dict[str, Any]]]) -> None:
    """`*` in a rule would grant Secrets (and everything else) behind the checks above, which
    compare names literally."""
    for mode, objects in installs.items():
        for role in [o for o in objects if o["kind"] in ("Role", "ClusterRole")]:
            for rule in role["rules"]:
                terms = [*rule["apiGroups"], *rule["resources"], *rule["verbs"]]
                assert "*" not in terms and not any(t.startswith("*/") for t in terms), (mode, rule)


def test_coordinator_secrets_values_that_cannot_hold_fail_to_render(chart: helm_python.Chart) -> None:
    """Settings that would be silently ignored, or contradict each other, stop the install."""
    with pytest.raises(helm_python.HelmError, match="set either clusterWide or namespaces"):
        render(chart, {"rbac": {"coordinatorSecrets": {"clusterWide": True, "namespaces": ["jobs"]}}})
    for secrets in ({"clusterWide": True}, {"namespaces": ["jobs"]}):
        values = {"watchNamespaces": ["jobs"], "rbac": {"coordinatorSecrets": secrets}}
        with pytest.raises(helm_python.HelmError, match="applies only when watchNamespaces is empty"):
            render(chart, values)


def test_secret_rbac_objects_validate(installs: dict[str, list[dict[str, Any]]]) -> None:
    checked = 0
    for objects in installs.values():
        for obj in objects:
            if obj["kind"] in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
                checked += 1
    assert checked >= 10
