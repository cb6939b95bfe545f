"""The API server as the local cluster and its tests speak to it: a small REST client over
``requests`` (``Rest``, each answer a ``Response``), where an object lives (``path_of``), and a
kubeconfig for a user and a token."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
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


def namespaces_deleted(events: Iterable[dict[str, Any]]) -> dict[str, datetime]:
    """When each namespace's deletion was asked for (its first accepted delete in the audit log,
    the server's ``requestReceivedTimestamp``). Pure."""
    deleted: dict[str, datetime] = {}
    for e in events:
        ref = e.get("objectRef") or {}
        code = (e.get("responseStatus") or {}).get("code", 0)
        if e.get("verb") == "delete" and ref.get("resource") == "namespaces" and ref.get("name") and code < 300:
            deleted.setdefault(ref["name"], received(e))
    return deleted


def refused(events: Iterable[dict[str, Any]], user: str, deleted: dict[str, datetime]) -> list[str]:
    """``user``'s requests the server refused with 403, as ``VERB URI``, but for those in a
    namespace already being deleted (``deleted``: :func:`namespaces_deleted`): there the
    namespace controller removes the RoleBindings that grant the operator its namespaced
    rights while the operator still reconciles what is left, a read then meets a 403 that no
    chart can prevent, and a write meets NamespaceLifecycle's (:func:`terminating`). A name
    is taken for good once deleted: the tests never make a namespace again under the name of
    one deleted on the same server. Pure."""
    out = []
    for e in events:
        if (e.get("user") or {}).get("username") != user or (e.get("responseStatus") or {}).get("code") != 403:
            continue
        since = deleted.get((e.get("objectRef") or {}).get("namespace") or "")
        if terminating(e) or (since is not None and received(e) >= since):
            continue
        out.append(f"{e['verb']} {e['requestURI']}")
    return out


def received(event: dict[str, Any]) -> datetime:
    """When the server received an audited request (RFC 3339 with microseconds). Pure."""
    return datetime.fromisoformat(str(event.get("requestReceivedTimestamp") or "1970-01-01T00:00:00Z"))
