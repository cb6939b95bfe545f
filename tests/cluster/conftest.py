"""The real control plane, once per session, and the chart installed on it by the real helm:
every test in this directory is marked ``apiserver`` and runs against kube-apiserver.

- ``control_plane``: etcd + kube-apiserver + kube-controller-manager (operator/local_cluster/control_plane.py),
  with the generated CRDs and the Kubeflow Spark Operator's SparkApplication CRD applied.
- ``installed``: ``helm install`` of charts/kappa-operator (release ``kappa`` in
  ``kappa-system``, the default values): the operator under test runs with a token of the
  ServiceAccount the chart created, so it has exactly the chart's RBAC, and a 403 fails the test.
- ``namespace``: one namespace per test module, deleted after it (the namespace controller
  empties it, as on a real cluster).

The operator under test runs in one of three ways, **one at a time** (two operators would fight
over the same objects; tests/cluster/operator_runs.py), each for one test module and stopped
after its objects are released:

- ``operator`` (with ``watched``): ``kappa operator`` as the chart runs it (the installed
  Deployment's arguments: every namespace), as a process of its own.
- ``in_process_operator`` (with ``fresh_namespace``, a namespace per test): the same in a thread of
  the test process, for tests that need hooks inside it (the data plane refused, a storage call
  made to hang, the coordinator's groups and the metrics read directly).
- ``own_operators``: processes of their own watching one namespace, with extra flags or a fault
  armed, killed and started again as a pod would be.

A module that runs the operator uses ``never_forbidden``: any 403 the operator meets fails the test.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane, Parts, binaries
from tests.cluster.operator_process import OperatorProcess, running_operator
from tests.cluster.operator_runs import (
    InProcess,
    Processes,
    audit_size,
    claim,
    delete_kappa_objects,
    forbidden_since,
    in_process,
    release,
)

CHART = ROOT / "charts" / "kappa-operator"
SPARK_CRD = ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml"
RELEASE, OPERATOR_NAMESPACE = "kappa", "kappa-system"
LIVE_PROGRESS_INTERVAL = 5.0
"""The release's ``liveJobs.progressInterval`` (30s by default): the tests that wait for a
progress report to reach status (Stalled, lag, a bootstrap's switch) wait for ticks of it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.apiserver)


def crd_documents() -> list[dict[str, Any]]:
    """The generated CRDs and the SparkApplication CRD the chart targets."""
    paths = [*sorted((ROOT / "crds").glob("*.yaml")), SPARK_CRD]
    return [yaml.safe_load(p.read_text()) for p in paths]


@pytest.fixture(scope="session")
def parts() -> Parts:
    return binaries()


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory, parts: Parts) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(tmp_path_factory.mktemp("control-plane"), parts.current)
    try:
        plane.apply_manifests(crd_documents())
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def oldest_control_plane(tmp_path_factory: pytest.TempPathFactory, parts: Parts) -> Iterator[ControlPlane]:
    """The oldest kube-apiserver the chart supports (its kubeVersion), for the CRD checks;
    started on first use, after the current one's tests."""
    plane = ControlPlane.start(tmp_path_factory.mktemp("oldest-control-plane"), parts.oldest, audit=False)
    try:
        plane.apply_manifests(crd_documents())
        yield plane
    finally:
        plane.stop()


@dataclass(frozen=True)
class Helm:
    """The real helm CLI (built from helm.sh/helm/v3 by cluster/build.sh) on the test server."""

    binary: Path
    kubeconfig: Path

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done


@pytest.fixture(scope="session")
def helm(control_plane: ControlPlane, parts: Parts) -> Helm:
    path = control_plane.write_kubeconfig(
        control_plane.workdir / "admin.kubeconfig", control_plane.admin_token, "kappa-admin"
    )
    return Helm(parts.helm, path)


@dataclass(frozen=True)
class Installed:
    """The chart as installed: who the operator runs as and with which arguments."""

    namespace: str
    service_account: str
    args: tuple[str, ...]
    kubeconfig: Path

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def deployment_of(control_plane: ControlPlane, namespace: str, release: str) -> dict[str, Any]:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    items = control_plane.admin.ok(control_plane.admin.get(path), "deployments")["items"]
    mine = [d for d in items if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/instance") == release]
    assert len(mine) == 1, (
        f"one operator Deployment of release {release}, found {[d['metadata']['name'] for d in items]}"
    )
    return mine[0]


def install(control_plane: ControlPlane, helm: Helm, release: str, namespace: str, *values: str) -> Installed:
    helm("install", release, str(CHART), "--namespace", namespace, "--create-namespace", *values)
    pod = deployment_of(control_plane, namespace, release)["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    container = (
        next(c for c in pod["containers"] if c["name"] == "operator")
        if len(pod["containers"]) > 1
        else pod["containers"][0]
    )
    token = control_plane.service_account_token(namespace, account)
    config = control_plane.write_kubeconfig(
        control_plane.workdir / f"{release}.kubeconfig", token, f"{namespace}-{account}", namespace
    )
    return Installed(namespace, account, tuple(container.get("args") or ()), config)


@pytest.fixture(scope="session")
def installed(control_plane: ControlPlane, helm: Helm) -> Installed:
    return install(
        control_plane,
        helm,
        RELEASE,
        OPERATOR_NAMESPACE,
        "--set",
        f"liveJobs.progressInterval={LIVE_PROGRESS_INTERVAL:g}s",
    )


@pytest.fixture(scope="module")
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    base = re.sub(r"[^a-z0-9]+", "-", request.module.__name__.rsplit(".", 1)[-1].lower()).strip("-")
    name = control_plane.namespace(base[:50])
    yield name
    control_plane.delete_namespace(name)


def grant_coordinator_secrets(plane: ControlPlane, installed: Installed, namespace: str) -> None:
    """What the chart README tells a platform team to run for a namespace where Backfills run
    (`kubectl create rolebinding ... --clusterrole=<fullname>-coordinator-secrets`)."""
    name = f"{installed.service_account}-coordinator-secrets"
    plane.apply_manifests(
        [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [
                    {"kind": "ServiceAccount", "name": installed.service_account, "namespace": installed.namespace}
                ],
            }
        ]
    )


@pytest.fixture(scope="module")
def operator(
    control_plane: ControlPlane, installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """`kappa operator` with the installed Deployment's arguments and ServiceAccount (watching
    every namespace), for one test module; its namespace gets the coordinator-secrets grant."""
    with (
        claim("the chart's operator process"),
        running_operator(
            control_plane,
            installed.namespace,
            installed.args,
            installed.kubeconfig,
            tmp_path_factory.mktemp("operator"),
        ) as running,
    ):
        yield running
        forbidden = control_plane.forbidden(installed.user)
        assert forbidden == [], f"the chart's RBAC refused the operator: {forbidden}"


@pytest.fixture(scope="module")
def watched(
    control_plane: ControlPlane, installed: Installed, operator: OperatorProcess, namespace: str
) -> Iterator[str]:
    """A namespace the running operator works in, with the grant Backfills need; its objects
    are released before the operator stops."""
    grant_coordinator_secrets(control_plane, installed, namespace)
    yield namespace
    release(control_plane, [namespace])


@pytest.fixture
def never_forbidden(control_plane: ControlPlane, installed: Installed) -> Iterator[None]:
    """Any 403 the operator met during a test fails it: the chart's RBAC must cover everything."""
    offset = audit_size(control_plane)
    yield
    refused = forbidden_since(control_plane, installed.user, offset)
    assert refused == [], f"the chart's RBAC refused the operator: {refused}"


@pytest.fixture(scope="module")
def in_process_operator(control_plane: ControlPlane, installed: Installed) -> Iterator[InProcess]:
    """`kappa operator` (every namespace) in a thread of the test process, for one module."""
    with in_process(control_plane, installed) as running:
        yield running


@pytest.fixture
def fresh_namespace(
    control_plane: ControlPlane, installed: Installed, in_process_operator: InProcess, request: pytest.FixtureRequest
) -> Iterator[str]:
    """A namespace of one test, with the coordinator-secrets grant, watched by the module's
    in-process operator; deleted after the test (the operator releases its objects meanwhile)."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    base = re.sub(r"[^a-z0-9]+", "-", module.lower()).strip("-")[:40]
    name = control_plane.namespace(f"{base}-{len(in_process_operator.namespaces) + 1}")
    grant_coordinator_secrets(control_plane, installed, name)
    in_process_operator.namespaces.append(name)
    yield name
    delete_kappa_objects(control_plane, name)
    control_plane.delete_namespace(name)


@pytest.fixture(scope="module")
def own_operators(
    control_plane: ControlPlane, installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Processes]:
    """`kappa operator` processes of one module, each watching the namespace it is given."""
    with claim("the module's own operator processes"):
        processes = Processes(control_plane, installed, tmp_path_factory.mktemp("own-operators"))
        try:
            yield processes
        finally:
            processes.close()
