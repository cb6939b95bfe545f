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
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.chart import (
    OPERATOR_NAMESPACE,
    RELEASE,
    Helm,
    Installed,
    crd_documents,
    grant_coordinator_secrets,
    install,
)
from harness.operator_process import OperatorProcess, running_operator
from kappa_operator.local_cluster.control_plane import ControlPlane, Parts, binaries
from tests.cluster.operator_runs import (
    InProcess,
    Processes,
    claim,
    delete_kappa_objects,
    in_process,
    release,
)

LIVE_PROGRESS_INTERVAL = 5.0
"""The release's ``liveJobs.progressInterval`` (30s by default): the tests that wait for a
progress report to reach status (Stalled, lag, a bootstrap's switch) wait for ticks of it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.apiserver)


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
    started on first use, after the current one's tests. Its API server alone: the checks
    need no controller (cluster/build.sh builds no kube-controller-manager of it)."""
    plane = ControlPlane.start(
        tmp_path_factory.mktemp("oldest-control-plane"), parts.oldest, audit=False, controllers=False
    )
    try:
        plane.apply_manifests(crd_documents())
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def helm(control_plane: ControlPlane, parts: Parts) -> Helm:
    path = control_plane.write_kubeconfig(
        control_plane.workdir / "admin.kubeconfig", control_plane.admin_token, "kappa-admin"
    )
    return Helm(parts.helm, path)


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
    offset = control_plane.audit_size()
    yield
    refused = control_plane.forbidden(installed.user, since=offset)
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
