"""The Helm chart (charts/kappa-operator), offline: `helm lint`, `helm template` with default and
non-default values, every object against the Kubernetes schemas, the alerts under promtool,
and the dashboard's PromQL.

A chart breaks in someone's cluster, not here, unless these pin what matters: the flags of
`kappa operator` (the contract with the CLI), least-privilege RBAC, a locked-down pod, CRDs
equal to the generated ones, alerts that fire when they should, and dashboard queries that name
metrics the operator and the coordinator really export.
"""

from __future__ import annotations

import base64
import inspect
import json
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import promql_parser
import pytest
import yaml

from kappa_operator.cli.commands import build_parser, main
from kappa_operator.leadership.lease import LEADER_LABEL
from kappa_operator.models.streaming_job import StreamingJobSpec
from kappa_operator.render.driver_metrics import STREAMING_GAUGES
from kappa_operator.service import runner
from kappa_operator.service.metrics import OperatorMetrics
from kappa_operator.service.runner import OBJECTS_IN_FLIGHT, OperatorOptions, liveness_url, settings, split_bind

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kappa-operator"
KUBE_VERSION = "1.30"
RELEASE, NAMESPACE = "kappa", "kappa-system"
FULLNAME = f"{RELEASE}-kappa-operator"
PROMTOOL = shutil.which("promtool")

#: Everything a user may reasonably change at once.
CUSTOM: dict[str, Any] = {
    "watchNamespaces": ["a", "b"],
    "image": {"repository": "registry.example.com/kappa/operator", "tag": "1.2.3", "pullPolicy": "Always"},
    "resources": {"requests": {"cpu": "250m", "memory": "300Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
    "coordinator": {"existingSecret": "my-coordinator-token"},
    "extraArgs": ["--verbose"],
    "liveJobs": {"progressInterval": "1m30s"},
    "objectsInFlight": 300,
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
    "dashboard": {"enabled": True, "annotations": {"grafana_folder": "kappa"}},
}

#: What the coordinator and the operator export. A renamed metric must fail the dashboard and
#: alert tests below.
GAUGES = {
    "kappa_alignment_member_watermark_seconds",
    "kappa_alignment_global_watermark_seconds",
    "kappa_alignment_lag_seconds",
    "kappa_alignment_member_throttled",
    "kappa_alignment_group_members",
    "kappa_operator_backfills",
    "kappa_backfill_progress_ratio",
    "kappa_streamingjob_phase",
    "kappa_backfill_phase",
    "kappa_backfill_queue_wait_seconds",
    "kappa_backfill_elapsed_seconds",
    "kappa_backfill_planned_seconds",
    "kappa_streamingjob_kafka_lag_records",
    "kappa_streamingjob_input_rows_per_second",
    "kappa_streamingjob_processed_rows_per_second",
    "kappa_streamingjob_batch_duration_seconds",
    "kappa_streamingjob_state_rows",
    "kappa_streamingjob_watermark_timestamp_seconds",
    "kappa_streamingjob_last_progress_timestamp_seconds",
    "kappa_streamingjob_condition",
    "kappa_streamingjob_external_calls_limit_per_second",
    "kappa_streamingjob_external_calls_per_second",
    "kappa_backfill_external_calls_limit_per_second",
    "kappa_backfill_external_calls_per_second",
}
COUNTERS = {
    "kappa_alignment_throttled_seconds_total",
    "kappa_coordinator_reports_total",
    "kappa_coordinator_rejected_reports_total",
    "kappa_operator_reconciles_total",
    "kappa_operator_reconcile_errors_total",
    "kappa_backfill_read_bytes_total",
    "kappa_backfill_read_files_total",
    "kappa_streamingjob_external_calls_waited_seconds_total",
    "kappa_backfill_external_calls_waited_seconds_total",
}
HISTOGRAMS = {"kappa_coordinator_report_duration_seconds"}
METRICS = GAUGES | COUNTERS | HISTOGRAMS
SERIES = GAUGES | COUNTERS | {f"{h}{suffix}" for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
#: The Spark drivers' gauges as the chart's scrape job renames them (issue 61).
DRIVER_SERIES = {f"kappa_spark_streaming_{gauge}" for gauge in STREAMING_GAUGES}
#: Grafana's macros, replaced by a duration before the query is parsed as PromQL.
GRAFANA_MACROS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


#: Each Backfill's coordinator credential: one Secret per Backfill, named after it. Granted
#: apart from the other rules (see test_rbac.py: only where Backfills run, never list or watch).
SECRET_PERMISSIONS = {("", "secrets", verb, "*") for verb in ("create", "get", "patch", "delete")}


def expected_permissions() -> set[tuple[str, str, str, str]]:
    """(apiGroup, resource, verb, resourceName or "*"): every API call the operator makes, and
    nothing more, except those on Secrets (SECRET_PERMISSIONS). tests/chart/test_rbac.py
    derives what is needed from the code."""
    perms = set()
    for kind in ("streamingjobs", "backfills", "rewinds"):
        perms |= {("kappa.dev", kind, verb, "*") for verb in ("get", "list", "watch", "patch")}
        perms |= {("kappa.dev", f"{kind}/status", verb, "*") for verb in ("get", "patch")}
        # blockOwnerDeletion on their children, under OwnerReferencesPermissionEnforcement
        perms.add(("kappa.dev", f"{kind}/finalizers", "update", "*"))
    perms.add(("kappa.dev", "rewinds", "create", "*"))  # a Rewind's downstream Rewinds
    spark_verbs = ("get", "list", "watch", "create", "delete", "patch")  # patch: a driver lost with its node
    perms |= {("sparkoperator.k8s.io", "sparkapplications", verb, "*") for verb in spark_verbs}
    perms |= {("", "configmaps", verb, "*") for verb in ("create", "get", "patch", "delete")}
    perms |= {("", "events", "create", "*"), ("", "events", "patch", "*")}  # posted, and repeats counted
    perms.add(("", "pods", "get", "*"))  # a failed driver's termination message
    # an application's pods listed, and those evicted from a lost node deleted (issue 59)
    perms |= {("", "pods", "list", "*"), ("", "pods", "delete", "*")}
    # each StreamingJob's driver's PodDisruptionBudget, created if absent (issue 59: drains)
    perms |= {("policy", "poddisruptionbudgets", "create", "*"), ("policy", "poddisruptionbudgets", "get", "*")}
    return perms


NODE_PERMISSIONS = {("", "nodes", "list", "*"), ("", "nodes", "watch", "*")}
"""The Nodes' watch (which stopped answering), cluster-wide in every mode: they have no
namespace."""


def permissions(rules: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    out = set()
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}, rule  # no nonResourceURLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames") or ["*"]:
                        out.add((group, resource, verb, name))
    return out


@pytest.fixture(scope="module")
def chart() -> Iterator[helm_python.Chart]:
    with helm_python.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: helm_python.Chart, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE)
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


@pytest.fixture(scope="module")
def default(chart: helm_python.Chart) -> list[dict[str, Any]]:
    return render(chart)


@pytest.fixture(scope="module")
def custom(chart: helm_python.Chart) -> list[dict[str, Any]]:
    return render(chart, CUSTOM)


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = of_kind(objects, kind)
    return found


def operator_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def container_ports(objects: list[dict[str, Any]]) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in operator_container(objects)["ports"]}


# --- lint and what gets created -------------------------------------------------------------


#: The optional ServiceAccount of the Spark drivers, the coordinator Secrets granted in their
#: namespace, and IPv6 bind addresses.
SPARK: dict[str, Any] = {
    "sparkServiceAccount": {"create": True, "namespaces": ["jobs"]},
    "rbac": {"coordinatorSecrets": {"namespaces": ["jobs"]}},
    "metrics": {"bindAddress": "::"},
    "health": {"bindAddress": "::"},
}


@pytest.mark.parametrize("values", [None, CUSTOM, SPARK], ids=["default", "custom", "spark"])
def test_lint_is_clean(values: dict[str, Any] | None) -> None:
    report = helm_python.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error; 1 is info
    assert report["errors"] == [] and problems == [], report


def test_default_install(default: list[dict[str, Any]]) -> None:
    assert Counter(o["kind"] for o in default) == {
        "ServiceAccount": 1,
        "Secret": 1,
        "Service": 1,
        "Deployment": 1,
        "ClusterRole": 3,  # the operator's, the Nodes', the coordinator Secrets' (bound nowhere by default)
        "ClusterRoleBinding": 2,
        "Role": 1,  # the leader election's, in the release namespace
        "RoleBinding": 1,
        "PodDisruptionBudget": 1,
    }
    assert {o["metadata"].get("namespace") for o in default if not o["kind"].startswith("Cluster")} == {NAMESPACE}


def test_custom_install(custom: list[dict[str, Any]]) -> None:
    assert Counter(o["kind"] for o in custom) == {
        "ServiceAccount": 1,
        "Service": 1,
        "Deployment": 1,
        "Role": 3,  # one per watched namespace, and the leader election's
        "RoleBinding": 3,
        "PodDisruptionBudget": 1,
        "ClusterRole": 1,  # the Nodes' (they have no namespace)
        "ClusterRoleBinding": 1,
        "ServiceMonitor": 1,
        "PrometheusRule": 1,
        "ConfigMap": 1,
    }


# --- the Deployment -------------------------------------------------------------------------


def test_operator_args_follow_the_cli_contract(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    election = ["--leader-election", "--leader-election-lease", FULLNAME]
    common = [
        "--coordinator-bind",
        "0.0.0.0:8471",
        "--coordinator-url",
        f"http://{FULLNAME}-coordinator.{NAMESPACE}.svc:8471",
        "--token-file",
        "/var/run/kappa/token",
    ]
    ports = ["--metrics-bind", "0.0.0.0:8080", "--health-bind", "0.0.0.0:8081"]
    container = operator_container(default)
    assert "command" not in container  # the image's entrypoint is `kappa operator`
    assert container["args"] == [*election, *common, *ports, "--progress-interval", "30s", "--objects-in-flight", "512"]
    assert operator_container(custom)["args"] == [
        *election,
        *("--namespace", "a", "--namespace", "b"),
        *common,
        *ports,
        *("--progress-interval", "1m30s"),
        *("--objects-in-flight", "300"),
        "--verbose",
    ]


def test_the_real_command_line_accepts_the_args(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    """The chart's args parse with `kappa operator`'s own parser (a renamed flag fails here)."""
    parsed = build_parser().parse_args(["operator", *operator_container(default)["args"]])
    assert (parsed.namespace, parsed.coordinator_bind, parsed.metrics_bind, parsed.health_bind) == (
        [],
        "0.0.0.0:8471",
        "0.0.0.0:8080",
        "0.0.0.0:8081",
    )
    assert str(parsed.token_file) == "/var/run/kappa/token"
    assert parsed.progress_interval == 30.0 and parsed.objects_in_flight == 512
    assert parsed.leader_election and parsed.leader_election_lease == FULLNAME
    parsed = build_parser().parse_args(["operator", *operator_container(custom)["args"]])
    assert parsed.namespace == ["a", "b"] and parsed.verbose
    assert parsed.progress_interval == 90.0 and parsed.objects_in_flight == 300


@pytest.mark.parametrize(
    ("value", "message"),
    [("5 minutes", "expected a duration such as 90s, 10m, 1h30m"), ("0s", "must be > 0")],
)
def test_a_bad_progress_interval_is_refused_naming_the_grammar(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--progress-interval", value])
    err = capsys.readouterr().err
    assert "--progress-interval" in err and message in err


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_objects_in_flight_must_be_a_count(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["operator", "--objects-in-flight", value])
    err = capsys.readouterr().err
    assert "--objects-in-flight" in err and "must be a whole number of at least 1" in err


def test_objects_in_flight_bound_kopfs_workers() -> None:
    """The flag is kopf's per-object worker limit: the memory of a burst (issue 62)."""
    assert settings().queueing.worker_limit == OBJECTS_IN_FLIGHT == 512
    assert settings(7).queueing.worker_limit == 7


def test_metrics_and_health_bind_addresses_are_values(chart: helm_python.Chart) -> None:
    """All interfaces by default (the kubelet probes and Prometheus scrapes the pod IP), but
    configurable; an IPv6 address gets its brackets."""
    values = {"metrics": {"bindAddress": "127.0.0.1", "port": 9090}, "health": {"bindAddress": "::"}}
    args = operator_container(render(chart, values))["args"]
    parsed = build_parser().parse_args(["operator", *args])
    assert (parsed.metrics_bind, parsed.health_bind) == ("127.0.0.1:9090", "[::]:8081")
    assert (split_bind(parsed.metrics_bind), liveness_url(parsed.health_bind)) == (
        ("127.0.0.1", 9090),
        "http://[::]:8081/healthz",
    )
    with pytest.raises(helm_python.HelmError, match=r"metrics\.bindAddress must not be empty"):
        render(chart, {"metrics": {"bindAddress": ""}})


def test_the_cli_binds_to_loopback_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a laptop, `kappa operator` serves nothing it was not asked to, and only on 127.0.0.1."""
    ran: list[OperatorOptions] = []
    monkeypatch.setattr(runner, "run_operator", lambda opts: ran.append(opts))
    assert main(["operator"]) == 0
    assert (ran[-1].coordinator_bind, ran[-1].metrics_bind, ran[-1].health_bind) == ("127.0.0.1:8471", None, None)
    assert main(["operator", "--metrics-bind", "8080", "--health-bind", ":8081"]) == 0
    assert split_bind(ran[-1].metrics_bind or "") == ("127.0.0.1", 8080)
    assert liveness_url(ran[-1].health_bind or "") == "http://127.0.0.1:8081/healthz"
    assert main(["operator", "--metrics-bind", "0.0.0.0:8080"]) == 0
    assert split_bind(ran[-1].metrics_bind or "") == ("0.0.0.0", 8080)
    assert inspect.signature(OperatorMetrics.serve).parameters["host"].default == "127.0.0.1"
    for bad in ("0.0.0.0", "host:http", "::1:8080", "127.0.0.1:70000"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["operator", "--metrics-bind", bad])


def test_coordinator_url_can_be_overridden(chart: helm_python.Chart) -> None:
    objects = render(chart, {"coordinator": {"url": "https://coordinator.example.com"}})
    args = operator_container(objects)["args"]
    assert args[args.index("--coordinator-url") + 1] == "https://coordinator.example.com"


def test_token_file_is_the_mounted_secret(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    for objects, secret in ((default, f"{FULLNAME}-token"), (custom, "my-coordinator-token")):
        pod = one(objects, "Deployment")["spec"]["template"]["spec"]
        (mount,) = [m for m in operator_container(objects)["volumeMounts"] if m["name"] == "token"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "token"]
        assert mount["readOnly"] is True
        assert volume["secret"]["secretName"] == secret
        (item,) = volume["secret"]["items"]
        assert item["key"] == "token"
        assert f"{mount['mountPath']}/{item['path']}" == "/var/run/kappa/token"


@pytest.mark.parametrize("which", ["default", "custom"])
def test_pod_is_locked_down(which: str, request: pytest.FixtureRequest) -> None:
    objects = request.getfixturevalue(which)
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = operator_container(objects)["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    (tmp,) = [m for m in operator_container(objects)["volumeMounts"] if m["mountPath"] == "/tmp"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == tmp["name"]]
    assert "emptyDir" in volume
    assert pod["serviceAccountName"] == FULLNAME
    assert one(objects, "ServiceAccount")["metadata"]["name"] == FULLNAME


def test_probes(default: list[dict[str, Any]]) -> None:
    container, ports = operator_container(default), container_ports(default)
    assert ports == {"coordinator": 8471, "metrics": 8080, "health": 8081}
    live, ready = container["livenessProbe"]["httpGet"], container["readinessProbe"]["httpGet"]
    assert (live["path"], ports[live["port"]]) == ("/healthz", 8081)  # kopf's liveness endpoint
    assert (ready["path"], ports[ready["port"]]) == ("/readyz", 8471)  # the coordinator serves


def test_image_and_resources(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    container = operator_container(default)
    assert container["image"] == "kappa-operator:0.1.0"  # the chart's appVersion
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert container["resources"]["limits"] == {"memory": "512Mi"}
    container = operator_container(custom)
    assert container["image"] == "registry.example.com/kappa/operator:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == CUSTOM["resources"]


# --- Service, Secret ------------------------------------------------------------------------


def test_service_exposes_coordinator_and_metrics(default: list[dict[str, Any]]) -> None:
    service = one(default, "Service")
    assert service["metadata"]["name"] == f"{FULLNAME}-coordinator"  # the host in --coordinator-url
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert ports == {"coordinator": (8471, "coordinator"), "metrics": (8080, "metrics")}
    pod_labels = one(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selector = dict(service["spec"]["selector"])
    assert selector.pop(LEADER_LABEL) == "true", "the leader's pod only: it answers the coordinator's reports"
    assert selector.items() <= pod_labels.items()


# --- several replicas, one leading (issue 62) -------------------------------------------------


def test_two_replicas_one_leading_on_the_releases_lease(default: list[dict[str, Any]]) -> None:
    deployment = one(default, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # a new pod ready before an old one goes: an upgrade always leaves a follower to take over
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in operator_container(default)["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    budget = one(default, "PodDisruptionBudget")
    assert budget["metadata"]["namespace"] == NAMESPACE
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


def test_the_leader_election_is_granted_its_lease_and_its_pods_in_the_release_namespace_only(
    default: list[dict[str, Any]],
) -> None:
    role = named(default, "Role", f"{FULLNAME}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert permissions(role["rules"]) == {
        ("coordination.k8s.io", "leases", "create", "*"),  # RBAC cannot narrow a create by name
        ("coordination.k8s.io", "leases", "get", FULLNAME),
        ("coordination.k8s.io", "leases", "update", FULLNAME),
        ("", "pods", "list", "*"),  # which pod led before
        ("", "pods", "patch", "*"),  # the leader label
    }
    binding = named(default, "RoleBinding", f"{FULLNAME}-leader-election")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_one_replica_and_no_budget_are_values(chart: helm_python.Chart) -> None:
    objects = render(chart, {"replicaCount": 1, "podDisruptionBudget": {"enabled": False}})
    assert one(objects, "Deployment")["spec"]["replicas"] == 1 and not of_kind(objects, "PodDisruptionBudget")
    assert "--leader-election" in operator_container(objects)["args"]  # a rolling update runs two for a moment


def test_token_secret_is_generated_or_given(chart: helm_python.Chart, default: list[dict[str, Any]]) -> None:
    secret = one(default, "Secret")
    assert secret["metadata"]["name"] == f"{FULLNAME}-token"
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", token)
    given = one(render(chart, {"coordinator": {"token": "s3cret-token"}}), "Secret")
    assert base64.b64decode(given["data"]["token"]).decode() == "s3cret-token"


def test_existing_secret_replaces_the_charts(custom: list[dict[str, Any]]) -> None:
    assert of_kind(custom, "Secret") == []


# --- RBAC -----------------------------------------------------------------------------------


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in of_kind(objects, kind) if o["metadata"]["name"] == name]
    return found


def test_rbac_is_cluster_wide_without_watch_namespaces(default: list[dict[str, Any]]) -> None:
    """Everything but Secrets cluster-wide; the Secret rule is a ClusterRole of its own that
    the default install binds nowhere (test_rbac.py follows the bindings). The one Role is the
    leader election's, in the release namespace."""
    assert [r["metadata"]["name"] for r in of_kind(default, "Role")] == [f"{FULLNAME}-leader-election"]
    assert [b["metadata"]["name"] for b in of_kind(default, "RoleBinding")] == [f"{FULLNAME}-leader-election"]
    role, binding = named(default, "ClusterRole", FULLNAME), named(default, "ClusterRoleBinding", FULLNAME)
    assert permissions(role["rules"]) == expected_permissions()
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": FULLNAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]
    secrets = named(default, "ClusterRole", f"{FULLNAME}-coordinator-secrets")
    assert permissions(secrets["rules"]) == SECRET_PERMISSIONS
    assert_nodes_read_cluster_wide(default)


def assert_nodes_read_cluster_wide(objects: list[dict[str, Any]]) -> None:
    nodes = named(objects, "ClusterRole", f"{FULLNAME}-nodes")
    assert permissions(nodes["rules"]) == NODE_PERMISSIONS
    binding = named(objects, "ClusterRoleBinding", f"{FULLNAME}-nodes")
    assert binding["roleRef"]["name"] == f"{FULLNAME}-nodes"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


def test_rbac_is_per_namespace_with_watch_namespaces(custom: list[dict[str, Any]]) -> None:
    assert [r["metadata"]["name"] for r in of_kind(custom, "ClusterRole")] == [f"{FULLNAME}-nodes"], "Nodes only"
    assert_nodes_read_cluster_wide(custom)
    roles = {r["metadata"]["namespace"]: r for r in of_kind(custom, "Role") if r["metadata"]["name"] == FULLNAME}
    bindings = {
        b["metadata"]["namespace"]: b for b in of_kind(custom, "RoleBinding") if b["metadata"]["name"] == FULLNAME
    }
    assert set(roles) == set(bindings) == {"a", "b"}
    others = {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in of_kind(custom, "Role")} - {
        (ns, FULLNAME) for ns in roles
    }
    assert others == {(NAMESPACE, f"{FULLNAME}-leader-election")}
    for namespace in ("a", "b"):
        assert permissions(roles[namespace]["rules"]) == expected_permissions() | SECRET_PERMISSIONS
        binding = bindings[namespace]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": FULLNAME}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}]


# --- the ServiceAccount of the Spark drivers ------------------------------------------------

SPARK_DRIVER_PERMISSIONS = {
    ("", resource, verb, "*")
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims")
    for verb in ("create", "get", "list", "watch", "delete", "deletecollection")
}


def spark_objects(objects: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """namespace → kind → the spark-driver ServiceAccount, Role or RoleBinding there."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        if obj["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "spark-driver":
            kinds = found.setdefault(obj["metadata"]["namespace"], {})
            assert obj["kind"] not in kinds, obj
            kinds[obj["kind"]] = obj
    return found


def test_spark_service_account_is_opt_in(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    assert spark_objects(default) == spark_objects(custom) == {}


def test_spark_service_account_with_the_rights_of_a_driver(chart: helm_python.Chart) -> None:
    annotations = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/spark"}
    values = {"sparkServiceAccount": {"create": True, "namespaces": ["jobs-a", "jobs-b"], "annotations": annotations}}
    objects = render(chart, values)
    found = spark_objects(objects)
    assert set(found) == {"jobs-a", "jobs-b"}
    driver_account = StreamingJobSpec.model_fields["service_account"].default  # what drivers run as
    for namespace, kinds in found.items():
        account, role, binding = kinds["ServiceAccount"], kinds["Role"], kinds["RoleBinding"]
        assert account["metadata"]["name"] == driver_account == "spark"
        assert account["metadata"]["annotations"] == annotations
        assert permissions(role["rules"]) == SPARK_DRIVER_PERMISSIONS
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "spark", "namespace": namespace}]
        for obj in kinds.values():
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    # the operator's own RBAC is untouched
    assert permissions(named(objects, "ClusterRole", FULLNAME)["rules"]) == expected_permissions()


def test_spark_service_account_namespaces_and_extra_rules(chart: helm_python.Chart) -> None:
    patch_pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}
    values = {
        "watchNamespaces": ["a", "b"],
        "sparkServiceAccount": {"create": True, "name": "driver", "extraRules": [patch_pods]},
    }
    found = spark_objects(render(chart, values))
    assert set(found) == {"a", "b"}  # empty namespaces: the watched ones
    assert {k["ServiceAccount"]["metadata"]["name"] for k in found.values()} == {"driver"}
    assert permissions(found["a"]["Role"]["rules"]) == SPARK_DRIVER_PERMISSIONS | {("", "pods", "patch", "*")}
    with pytest.raises(helm_python.HelmError, match=r"sparkServiceAccount\.create needs"):
        render(chart, {"sparkServiceAccount": {"create": True}})


# --- schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["default", "custom"])
def test_objects_validate_against_kubernetes_schemas(which: str, request: pytest.FixtureRequest) -> None:
    checked = []
    for obj in request.getfixturevalue(which):
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # not built in: see the ServiceMonitor and PrometheusRule tests
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}")
        checked.append(obj["kind"])
    assert "Deployment" in checked


def test_strict_validation_catches_a_misspelt_field(default: list[dict[str, Any]]) -> None:
    deployment = json.loads(json.dumps(one(default, "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def test_crds_validate_against_the_apiextensions_schema(chart: helm_python.Chart) -> None:
    crds = [yaml.safe_load(c["data"]) for c in chart.crds]
    assert {c["spec"]["group"] for c in crds} == {"kappa.dev"}
    for crd in crds:
        kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)


def test_chart_crds_equal_the_generated_ones() -> None:
    generated = {p.name: p.read_bytes() for p in sorted((ROOT / "crds").glob("*.yaml"))}
    packaged = {p.name: p.read_bytes() for p in sorted((CHART / "crds").glob("*.yaml"))}
    assert generated, "no CRDs in crds/"
    differ = [name for name, text in generated.items() if packaged.get(name) != text]
    extra = sorted(set(packaged) - set(generated))
    assert not differ and not extra, (
        f"charts/kappa-operator/crds/ is not crds/ (differ or missing: {differ}, not generated: {extra}): "
        "run `kappa crds --out charts/kappa-operator/crds`"
    )


def test_service_monitor_scrapes_the_metrics_port(custom: list[dict[str, Any]]) -> None:
    monitor, service = one(custom, "ServiceMonitor"), one(custom, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # Our series carry the job's `namespace`: keep it rather than the operator pod's.
    assert endpoint["honorLabels"] is True


def test_prometheus_rule_structure(custom: list[dict[str, Any]]) -> None:
    rule = one(custom, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    (group,) = rule["spec"]["groups"]
    for alert in group["rules"]:
        assert set(alert) == {"alert", "expr", "for", "labels", "annotations"}, alert
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}
        assert set(alert["annotations"]) == {"summary", "description"}


# --- alerts under promtool ------------------------------------------------------------------


def rule_groups(chart: helm_python.Chart) -> list[dict[str, Any]]:
    """The PrometheusRule's groups with the chart's default thresholds."""
    rule = one(render(chart, {"prometheusRule": {"enabled": True}}), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def test_rule_expressions_name_exported_metrics(chart: helm_python.Chart) -> None:
    for group in rule_groups(chart):
        for rule in group["rules"]:
            assert metric_names(rule["expr"]) <= SERIES, rule["alert"]


needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not on PATH (Debian package `prometheus`; .ci/run installs it)"
)


@needs_promtool
def test_promtool_checks_the_rules(chart: helm_python.Chart, tmp_path: Path) -> None:
    groups = rule_groups(chart)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"SUCCESS: (\d+) rules found", result.stdout + result.stderr)
    assert found and int(found.group(1)) == sum(len(g["rules"]) for g in groups) == 7, result.stdout


def series(metric: str, values: str, **labels: str) -> dict[str, str]:
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{selector}}}", "values": values}


def expect(alertname: str, at: str, *fired: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alertname, "exp_alerts": [{"exp_labels": labels} for labels in fired]}


SJ, BF = "kappa_streamingjob_phase", "kappa_backfill_phase"
PROGRESS, ERRORS = "kappa_backfill_progress_ratio", "kappa_operator_reconcile_errors_total"
COND = "kappa_streamingjob_condition"
CALLS, LIMIT = "kappa_streamingjob_external_calls_per_second", "kappa_streamingjob_external_calls_limit_per_second"
#: Series in, alerts out, with the chart's default thresholds (lag > 3600 s for 15m, progress
#: flat over 30m for 5m, Failed for 10m, errors > 0.05/s for 15m). One sample a minute.
ALERT_CASES: list[dict[str, Any]] = [
    {
        "input_series": [
            series("kappa_alignment_lag_seconds", "4000x40", group="rmi", member="impressions"),
            series("kappa_alignment_lag_seconds", "0x40", group="rmi", member="playbacks"),
        ],
        "alert_rule_test": [
            expect("KappaAlignmentLagHigh", "10m"),  # still pending
            expect("KappaAlignmentLagHigh", "20m", {"severity": "warning", "group": "rmi", "member": "impressions"}),
        ],
    },
    {
        "input_series": [
            series(SJ, "1 1 0x30", namespace="prod", streamingjob="rmi", phase="Running"),
            series(SJ, "0 0 1x30", namespace="prod", streamingjob="rmi", phase="Failed"),
            series(SJ, "1x32", namespace="prod", streamingjob="ok", phase="Running"),
            series(SJ, "0x32", namespace="prod", streamingjob="ok", phase="Failed"),
        ],
        "alert_rule_test": [
            expect("KappaStreamingJobFailing", "8m"),
            expect(
                "KappaStreamingJobFailing",
                "15m",
                {"severity": "critical", "namespace": "prod", "streamingjob": "rmi", "phase": "Failed"},
            ),
        ],
    },
    {
        # stuck: moves for 2 minutes, then flat; moving: always moves; fresh: started at minute
        # 50 and has not moved yet, which is not "flat for 30m".
        "input_series": [
            series(BF, "1x70", namespace="prod", backfill="stuck", phase="Running"),
            series(PROGRESS, "0.1 0.2 0.3x68", namespace="prod", backfill="stuck"),
            series(BF, "1x70", namespace="prod", backfill="moving", phase="Running"),
            series(PROGRESS, "0+0.01x70", namespace="prod", backfill="moving"),
            series(BF, "_x50 1x20", namespace="prod", backfill="fresh", phase="Running"),
            series(PROGRESS, "_x50 0x20", namespace="prod", backfill="fresh"),
        ],
        "alert_rule_test": [
            expect("KappaBackfillStalled", "20m"),
            *(
                expect(
                    "KappaBackfillStalled",
                    at,
                    {"severity": "warning", "namespace": "prod", "backfill": "stuck", "phase": "Running"},
                )
                for at in ("40m", "68m")
            ),
        ],
    },
    {
        # Stalled from minute 2 (critical after 5m); Lagging from minute 0 (warning after 15m)
        "input_series": [
            series(COND, "0 0 1x30", namespace="prod", streamingjob="rmi", condition="Stalled"),
            series(COND, "0x32", namespace="prod", streamingjob="ok", condition="Stalled"),
            series(COND, "1x32", namespace="prod", streamingjob="slow", condition="Lagging"),
        ],
        "alert_rule_test": [
            expect("KappaStreamingJobStalled", "5m"),
            expect(
                "KappaStreamingJobStalled",
                "8m",
                {"severity": "critical", "namespace": "prod", "streamingjob": "rmi", "condition": "Stalled"},
            ),
            expect("KappaStreamingJobLagging", "10m"),
            expect(
                "KappaStreamingJobLagging",
                "20m",
                {"severity": "warning", "namespace": "prod", "streamingjob": "slow", "condition": "Lagging"},
            ),
        ],
    },
    {
        # held: at 97/100 for 50 minutes (info after 30m); below: 80/100; freed: at the limit for
        # 20 minutes, then its limit was raised
        "input_series": [
            series(CALLS, "97x50", namespace="prod", streamingjob="held"),
            series(LIMIT, "100x50", namespace="prod", streamingjob="held"),
            series(CALLS, "80x50", namespace="prod", streamingjob="below"),
            series(LIMIT, "100x50", namespace="prod", streamingjob="below"),
            series(CALLS, "100x50", namespace="prod", streamingjob="freed"),
            series(LIMIT, "100x20 500x30", namespace="prod", streamingjob="freed"),
        ],
        "alert_rule_test": [
            expect("KappaExternalCallsAtLimit", "20m"),
            expect(
                "KappaExternalCallsAtLimit", "45m", {"severity": "info", "namespace": "prod", "streamingjob": "held"}
            ),
        ],
    },
    {
        "input_series": [
            series(ERRORS, "0+60x40", kind="Backfill"),  # 1/s
            series(ERRORS, "0x40", kind="StreamingJob"),
        ],
        "alert_rule_test": [
            expect("KappaOperatorReconcileErrors", "10m"),
            expect("KappaOperatorReconcileErrors", "25m", {"severity": "warning", "kind": "Backfill"}),
        ],
    },
]


@needs_promtool
def test_alerts_fire_on_their_series(chart: helm_python.Chart, tmp_path: Path) -> None:
    # Annotations are prose for people: promtool would compare them verbatim. Their templates
    # are checked by `promtool check rules` and by the label test below; here, the expressions.
    groups = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in rule_groups(chart)
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = [{"interval": "1m", **case} for case in ALERT_CASES]
    unit = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(unit))
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tested = {t["alertname"] for case in ALERT_CASES for t in case["alert_rule_test"]}
    assert tested == {r["alert"] for g in groups for r in g["rules"]}  # every alert has a case


def test_annotations_name_only_labels_the_alert_has(chart: helm_python.Chart) -> None:
    fired = {
        t["alertname"]: set(alert["exp_labels"])
        for case in ALERT_CASES
        for t in case["alert_rule_test"]
        for alert in t["exp_alerts"]
    }
    for group in rule_groups(chart):
        for rule in group["rules"]:
            named = {n for text in rule["annotations"].values() for n in re.findall(r"\$labels\.(\w+)", text)}
            assert named and named <= fired[rule["alert"]], rule["alert"]


# --- the Grafana dashboard ------------------------------------------------------------------


def metric_names(query: str) -> set[str]:
    for macro, duration in GRAFANA_MACROS.items():
        query = query.replace(macro, duration)
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(query), visit)
    return names


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "dashboards" / "kappa.json").read_text())
    return loaded


def test_dashboard_configmap_carries_the_file(custom: list[dict[str, Any]], dashboard: dict[str, Any]) -> None:
    config_map = one(custom, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "kappa"}
    assert json.loads(config_map["data"]["kappa.json"]) == dashboard


def test_dashboard_queries_parse_and_name_exported_metrics(dashboard: dict[str, Any]) -> None:
    shown: set[str] = set()
    queried = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len({p["id"] for p in panels(dashboard)}) == len(list(panels(dashboard)))
    for panel in queried:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names and names <= SERIES | DRIVER_SERIES, f"{panel['title']}: {target['expr']}"
            shown |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            (name,) = re.findall(r"label_values\((\w+),", variable["query"]["query"])
            assert name in SERIES, variable["name"]
    histograms = {f"{h}{suffix}": h for h in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
    assert {histograms.get(n, n) for n in shown} - DRIVER_SERIES == METRICS  # every metric is on a panel


def test_dashboard_shows_event_time_throughput(dashboard: dict[str, Any]) -> None:
    exprs = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    assert any(e.startswith("deriv(kappa_alignment_global_watermark_seconds") for e in exprs)


# --- values.yaml ----------------------------------------------------------------------------


def undocumented_values(text: str) -> list[str]:
    """Leaf keys with no comment line above them or above one of their parents."""
    missing: list[str] = []
    stack: list[tuple[int, str, bool]] = []  # (indent, key, documented)
    commented = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            commented = True
            continue
        match = re.match(r"(\s*)([\w.-]+):(.*)$", line)
        if not match:
            commented = False
            continue
        indent, key, rest = len(match.group(1)), match.group(2), match.group(3).strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        documented = commented or any(d for _, _, d in stack)
        if rest and not documented:
            missing.append(".".join([*(k for _, k, _ in stack), key]))
        stack.append((indent, key, documented))
        commented = False
    return missing


def test_every_value_is_documented() -> None:
    assert undocumented_values((CHART / "values.yaml").read_text()) == []
    assert undocumented_values("a:\n  # doc\n  b: 1\n  c: 2\n") == ["a.c"]


def test_every_metric_the_dashboard_and_alerts_name_is_exported() -> None:
    """The names above are what the operator and the coordinator register: a metric renamed in
    the code (not only in the dashboard) fails here."""
    from kappa_operator.coordinator.core import Coordinator
    from kappa_operator.coordinator.metrics import CoordinatorMetrics

    operator = OperatorMetrics()
    operator.include(CoordinatorMetrics(Coordinator()).registry)
    families = {m.name for m in operator.registry.collect()}  # counters' without their _total
    missing = {n for n in METRICS if n not in families and n.removesuffix("_total") not in families}
    assert not missing, f"named on the dashboard or in alerts, exported by nobody: {sorted(missing)}"
    assert "kappa_backfill_no_such_metric" not in families
