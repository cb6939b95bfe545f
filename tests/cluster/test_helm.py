"""The chart with the real helm (built from helm.sh/helm/v3) on the real kube-apiserver:
lint, install, upgrade with a CRD change as the chart README documents it, uninstall
(issue 27, Build 4). The session's own release (``installed``) is what the operator tests run
with; this module installs and removes releases of its own beside it."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from harness.chart import CHART, Helm, Installed, deployment_of, install
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from tests.unit.crd_documents import example


def test_lint_is_clean(helm: Helm) -> None:
    done = helm("lint", str(CHART), "--strict")
    assert "0 chart(s) failed" in done.stdout, done.stdout


def test_the_chart_refuses_a_server_older_than_it_supports(helm: Helm) -> None:
    """The chart's kubeVersion is what the suite checks: helm says so before installing."""
    minimum = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    done = helm("template", "x", str(CHART), "--kube-version", "1.24.0", check=False)
    assert done.returncode != 0 and minimum in done.stderr, done.stderr


def test_install_creates_what_the_operator_needs(control_plane: ControlPlane, installed: Installed) -> None:
    admin = control_plane.admin
    pod = deployment_of(control_plane, installed.namespace, "kappa")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == installed.service_account
    account = admin.get(path_of("ServiceAccount", installed.namespace, installed.service_account))
    assert account.status == 200
    roles = {r["metadata"]["name"] for r in admin.ok(admin.get(path_of("ClusterRole")), "roles")["items"]}
    assert {installed.service_account, f"{installed.service_account}-coordinator-secrets"} <= roles
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": installed.user,
            "groups": ["system:serviceaccounts"],
            "resourceAttributes": {"namespace": "kube-system", "verb": "get", "resource": "secrets"},
        },
    }
    answer = admin.ok(admin.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", review), "review")
    assert answer["status"]["allowed"] is False, "the operator may read Secrets in kube-system"


def previous_backfill_crd() -> dict[str, Any]:
    """The Backfill CRD as an older release had it: without spec.priority."""
    crd = yaml.safe_load((CHART / "crds" / "backfills.kappa.dev.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["priority"]
    return crd


def test_upgrade_with_a_crd_change(control_plane: ControlPlane, helm: Helm) -> None:
    """helm never upgrades a chart's crds/: the chart README's upgrade is `kubectl apply
    --server-side -f charts/kappa-operator/crds/` and then `helm upgrade`. From a release whose
    Backfill CRD lacked a field, the field is stored after the upgrade and the release's
    values change took effect."""
    admin = control_plane.admin
    ns = control_plane.namespace("kappa-upgrade")
    control_plane.apply_manifests([previous_backfill_crd()])
    try:
        install(control_plane, helm, "kappa-upgrade", ns)
        backfill = {**example("Backfill"), "metadata": {"name": "before", "namespace": ns}}
        backfill["spec"] = {**copy.deepcopy(backfill["spec"]), "priority": 5}
        stored = admin.ok(admin.create(path_of("Backfill", ns), backfill), "create before the upgrade")
        assert "priority" not in stored["spec"], "the older CRD prunes the field it does not know"

        control_plane.apply_manifests([yaml.safe_load(p.read_text()) for p in sorted((CHART / "crds").glob("*.yaml"))])
        helm(
            "upgrade",
            "kappa-upgrade",
            str(CHART),
            "--namespace",
            ns,
            "--reuse-values",
            "--set",
            "backfills.maxConcurrent=3",
        )
        backfill["metadata"]["name"] = "after"
        stored = admin.ok(admin.create(path_of("Backfill", ns), backfill), "create after the upgrade")
        assert stored["spec"]["priority"] == 5
        args = deployment_of(control_plane, ns, "kappa-upgrade")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert "--max-concurrent-backfills" in args and args[args.index("--max-concurrent-backfills") + 1] == "3"
        history = helm("history", "kappa-upgrade", "--namespace", ns, "-o", "yaml").stdout
        assert [r["status"] for r in yaml.safe_load(history)] == ["superseded", "deployed"]
    finally:
        control_plane.apply_manifests([yaml.safe_load((CHART / "crds" / "backfills.kappa.dev.yaml").read_text())])
        helm("uninstall", "kappa-upgrade", "--namespace", ns, check=False)
        for name in ("before", "after"):
            admin.delete(path_of("Backfill", ns, name))
        control_plane.delete_namespace(ns)


def test_uninstall_removes_the_release_and_keeps_crds_and_data(control_plane: ControlPlane, helm: Helm) -> None:
    admin = control_plane.admin
    ns = control_plane.namespace("kappa-uninstall")
    installed = install(control_plane, helm, "kappa-gone", ns)
    helm("uninstall", "kappa-gone", "--namespace", ns, "--wait")
    roles = {r["metadata"]["name"] for r in admin.ok(admin.get(path_of("ClusterRole")), "roles")["items"]}
    assert not {r for r in roles if r.startswith(installed.service_account)}, roles
    eventually(
        lambda: not admin.ok(admin.get(f"/apis/apps/v1/namespaces/{ns}/deployments"), "d")["items"],
        "the Deployment gone",
    )
    assert admin.get(path_of("ServiceAccount", ns, installed.service_account)).status == 404
    crds = {c["metadata"]["name"] for c in admin.ok(admin.get(path_of("CustomResourceDefinition")), "crds")["items"]}
    assert {"streamingjobs.kappa.dev", "backfills.kappa.dev", "rewinds.kappa.dev"} <= crds, "helm keeps CRDs"
    control_plane.delete_namespace(ns)
