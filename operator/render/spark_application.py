"""The Kubeflow Spark Operator's ``SparkApplication`` (v1beta2) and the ConfigMap holding the
JobConfig, owned by our resource so Kubernetes garbage-collects them with it (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kappa_operator.models.common import API_VERSION, ExecutorResources, Resources
from kappa_operator.render.jobconfig import CONFIG_PATH
from spark_app.config import JobConfig

SPARK_API = "sparkoperator.k8s.io/v1beta2"
SPARK_VERSION = "4.3.0"
MAIN = "local:///opt/kappa/spark_app/__main__.py"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kappa-operator"}
TOKEN_ENV = "KAPPA_COORDINATOR_TOKEN"


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    namespace: str
    uid: str | None

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid or "",
            "controller": True,
            "blockOwnerDeletion": True,
        }

    @property
    def labels(self) -> dict[str, str]:
        return {**MANAGED_BY, f"kappa.dev/{self.kind.lower()}": self.name}


@dataclass(frozen=True)
class Launch:
    """What differs between a live job and a backfill."""

    image: str
    driver: Resources
    executor: ExecutorResources
    service_account: str
    restart: dict[str, Any]
    token_secret: str | None = None
    """Secret (key ``token``) the driver reads the coordinator token from."""


def config_map(owner: Owner, cfg: JobConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{owner.name}-jobconfig",
            "namespace": owner.namespace,
            "labels": owner.labels,
            "ownerReferences": [owner.reference()],
        },
        "data": {"job.json": cfg.to_json()},
    }


def spark_application(owner: Owner, cfg: JobConfig, launch: Launch, config_hash: str) -> dict[str, Any]:
    mount = [{"name": "jobconfig", "mountPath": CONFIG_PATH.rsplit("/", 1)[0]}]
    labels = {**owner.labels, "kappa.dev/config-hash": config_hash}
    driver: dict[str, Any] = {
        "cores": launch.driver.cores,
        "memory": launch.driver.memory,
        "serviceAccount": launch.service_account,
        "labels": labels,
        "volumeMounts": mount,
    }
    if launch.token_secret:
        driver["env"] = [
            {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": launch.token_secret, "key": "token"}}}
        ]
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": {
            "name": owner.name,
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": {"kappa.dev/config-hash": config_hash},
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "pythonVersion": "3",
            "image": launch.image,
            "mainApplicationFile": MAIN,
            "arguments": ["--config", CONFIG_PATH],
            "sparkVersion": SPARK_VERSION,
            "sparkConf": dict(cfg.spark_conf),
            "restartPolicy": launch.restart,
            "volumes": [{"name": "jobconfig", "configMap": {"name": f"{owner.name}-jobconfig"}}],
            "driver": driver,
            "executor": {
                "instances": launch.executor.instances,
                "cores": launch.executor.cores,
                "memory": launch.executor.memory,
                "labels": labels,
                "volumeMounts": mount,
            },
        },
    }


LIVE_RESTART = {"type": "Always", "onFailureRetryInterval": 10, "onSubmissionFailureRetryInterval": 20}
BACKFILL_RESTART = {"type": "Never"}
"""A failed backfill stays failed with everything needed to retry (checkpoint, branch); the
operator, not the Spark operator, decides on a retry."""
