"""The chart on a real control plane, as the cluster tests and the operator bench install it:
the CRDs (ours, generated, and the spark-operator's SparkApplication), the real helm CLI
(built by cluster/build.sh), ``helm install`` of charts/kappa-operator with the token of the
ServiceAccount it created (so the operator runs with exactly the chart's RBAC), and the
RoleBinding the chart's README tells a platform team to create for the coordinator's secrets."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane

CHART = ROOT / "charts" / "kappa-operator"
SPARK_CRD = ROOT / "tests" / "fixtures" / "sparkoperator.k8s.io_sparkapplications.yaml"
RELEASE, OPERATOR_NAMESPACE = "kappa", "kappa-system"


def crd_documents() -> list[dict[str, Any]]:
    """The generated CRDs and the SparkApplication CRD the chart targets."""
    paths = [*sorted((ROOT / "crds").glob("*.yaml")), SPARK_CRD]
    return [yaml.safe_load(p.read_text()) for p in paths]


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

    @property
    def lease(self) -> str:
        """The Lease the replicas elect their leader on (``--leader-election-lease``)."""
        return self.args[self.args.index("--leader-election-lease") + 1]


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
