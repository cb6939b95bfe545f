"""The API server as the local cluster and its tests speak to it: a small REST client over
``requests`` (``Rest``, each answer a ``Response``), where an object lives (``path_of``), and a
kubeconfig for a user and a token."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests


def kubeconfig(server: str, ca: Path, token: str, user: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig for ``token`` (what kubectl, helm, kopf and the kubernetes client read)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kappa-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "kappa-test", "user": user, "namespace": namespace}}],
        "current-context": user,
    }


@dataclass
class Response:
    status: int
    body: Any

    @property
    def message(self) -> str:
        return str(self.body.get("message", "")) if isinstance(self.body, dict) else str(self.body)


@dataclass
class Rest:
    """A small synchronous REST client: tests want the status code and the server's own
    message (422 causes, 409, 403), which the generated client hides in exceptions."""

    server: str
    token: str
    ca: Path
    """The server's self-signed certificate and its CA (kube-apiserver writes both to --cert-dir)."""
    http: requests.Session = field(default_factory=requests.Session)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
    ) -> Response:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        r = self.http.request(
            method, self.server + path, data=data, headers=headers, params=params, verify=str(self.ca), timeout=60
        )
        try:
            payload: Any = r.json()
        except ValueError:
            payload = r.text
        return Response(r.status_code, payload)

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def create(self, path: str, body: dict[str, Any]) -> Response:
        return self.request("POST", path, body)

    def merge(self, path: str, body: dict[str, Any]) -> Response:
        return self.request("PATCH", path, body, "application/merge-patch+json")

    def apply(self, path: str, body: dict[str, Any], manager: str = "kappa-test") -> Response:
        """Server-side apply (``kubectl apply --server-side``)."""
        return self.request(
            "PATCH", path, body, "application/apply-patch+yaml", params={"fieldManager": manager, "force": "true"}
        )

    def delete(self, path: str) -> Response:
        return self.request("DELETE", path)

    def ok(self, response: Response, what: str) -> Any:
        if response.status >= 300:
            raise AssertionError(f"{what}: {response.status} {response.message}")
        return response.body


PLURALS = {
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "Namespace": ("v1", "namespaces", False),
    "ServiceAccount": ("v1", "serviceaccounts", True),
    "Secret": ("v1", "secrets", True),
    "ConfigMap": ("v1", "configmaps", True),
    "Service": ("v1", "services", True),
    "Node": ("v1", "nodes", False),
    "Pod": ("v1", "pods", True),
    "Event": ("v1", "events", True),
    "PodDisruptionBudget": ("policy/v1", "poddisruptionbudgets", True),
    "Deployment": ("apps/v1", "deployments", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "StreamingJob": ("kappa.dev/v1alpha1", "streamingjobs", True),
    "Backfill": ("kappa.dev/v1alpha1", "backfills", True),
    "Rewind": ("kappa.dev/v1alpha1", "rewinds", True),
    "SparkApplication": ("sparkoperator.k8s.io/v1beta2", "sparkapplications", True),
    "ValidatingAdmissionPolicy": ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False),
}


def path_of(kind: str, namespace: str | None = None, name: str | None = None, api_version: str | None = None) -> str:
    """The REST path of a collection or an object of ``kind``."""
    version, plural, namespaced = PLURALS[kind]
    version = api_version or version
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    if namespaced:
        base += f"/namespaces/{namespace or 'default'}"
    return f"{base}/{plural}" + (f"/{name}" if name else "")


def terminating(event: dict[str, Any]) -> bool:
    """A 403 of the NamespaceLifecycle plugin (a write into a namespace being deleted): what a
    real cluster answers an operator while a namespace goes, not a missing permission."""
    return "being terminated" in str((event.get("responseStatus") or {}).get("message", ""))
