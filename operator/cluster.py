"""The Kubernetes API as the operator uses it (the I/O edge): every write is idempotent, so a
handler re-run after an operator restart creates nothing twice."""

from __future__ import annotations

from typing import Any

import kubernetes
from kubernetes.client.exceptions import ApiException

from kappa_operator.models.common import GROUP, VERSION
from kappa_operator.render.spark_application import SPARK_API

SPARK_GROUP, SPARK_VERSION = SPARK_API.split("/")


class Cluster:
    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)

    @classmethod
    def connect(cls, host: str | None = None) -> Cluster:
        """``host`` for tests and local emulators; else in-cluster config, else the kubeconfig."""
        if host is not None:
            return cls(kubernetes.client.ApiClient(kubernetes.client.Configuration(host=host)))
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()
        return cls(kubernetes.client.ApiClient())

    # --- SparkApplications ---------------------------------------------------------------

    def get_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(
                SPARK_GROUP, SPARK_VERSION, namespace, "sparkapplications", name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_app(self, body: dict[str, Any]) -> None:
        ns = body["metadata"]["namespace"]
        try:
            self.custom.create_namespaced_custom_object(SPARK_GROUP, SPARK_VERSION, ns, "sparkapplications", body)
        except ApiException as exc:
            if exc.status != 409:  # already there (a re-run after a restart)
                raise

    def delete_app(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                SPARK_GROUP, SPARK_VERSION, namespace, "sparkapplications", name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    # --- ConfigMaps ----------------------------------------------------------------------

    def apply_config_map(self, body: dict[str, Any]) -> None:
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            self.core.create_namespaced_config_map(ns, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            # a patch, not a replace: the data keys are ours and are overwritten either way
            self.core.patch_namespaced_config_map(
                name, ns, {"metadata": {"labels": body["metadata"]["labels"]}, "data": body["data"]}
            )

    def delete_config_map(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_config_map(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise

    # --- our resources -------------------------------------------------------------------

    def get_resource(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, plural, name, {"status": status})

    # --- Secrets -------------------------------------------------------------------------

    def apply_secret(self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str]) -> None:
        """The coordinator token where a backfill's driver can read it (its own namespace)."""
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "type": "Opaque",
            "stringData": data,
        }
        try:
            self.core.create_namespaced_secret(namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            self.core.patch_namespaced_secret(name, namespace, {"stringData": data})

    # --- our resources, written by a Rewind ----------------------------------------------

    def list_resources(self, plural: str, namespace: str) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        return list(listed.get("items", []))

    def create_resource(self, plural: str, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def annotate(self, plural: str, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """Set (None: remove) annotations with a merge patch."""
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, {"metadata": {"annotations": annotations}}
        )
