"""The Kubeflow Spark Operator's ``SparkApplication`` (v1beta2) and the ConfigMap holding the
JobConfig, owned by our resource so Kubernetes garbage-collects them with it (pure)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kappa_operator.models.common import (
    API_VERSION,
    ExecutorResources,
    PodOverrides,
    PodSettings,
    Resources,
    as_timedelta,
    overridden,
)
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.driver_metrics import with_driver_metrics
from kappa_operator.render.jobconfig import CONFIG_PATH, pipeline_mount
from kappa_operator.render.kafka_security import secret_volumes
from spark_app.contract.config import JobConfig
from spark_app.contract.snapshot_requests import REQUESTS_FILE, REQUESTS_KEY, requests_text

SPARK_API = "sparkoperator.k8s.io/v1beta2"
SPARK_VERSION = "4.2.0"
"""The Spark of the image: the pyspark pyproject pins (and the Kafka connector spark_app.jars pins)."""
MAIN = "local:///opt/kappa/spark_app/__main__.py"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kappa-operator"}
APP_LABEL = "sparkoperator.k8s.io/app-name"
"""The spark-operator's label on an application's driver and executor pods."""
ROLE_LABEL = "spark-role"
"""Spark's label on a pod of an application: driver | executor."""
NODE_LOST_AFTER = "kappa.dev/node-lost-after"
"""On each driver and executor pod: its ``nodeLostAfter`` in seconds, which the operator reads
back from the pod (``reconcile.node_loss``)."""
TOKEN_ENV = "KAPPA_COORDINATOR_TOKEN"


#: The suffix of each kind's children. A StreamingJob's application keeps the job's own name
#: (renaming it would start a second live application on upgrade); every other kind gets its
#: own suffix, so a Backfill named like its StreamingJob never renders the same names. What
#: a suffix cannot rule out (a StreamingJob named ``x-backfill``) the uid check on every write
#: catches (``kappa_operator.kube.api.ForeignObjectError``).
CHILD_SUFFIX = {"StreamingJob": "", "Backfill": "-backfill"}
DNS_LABEL_MAX = 63
CHILD_NAME_MAX = DNS_LABEL_MAX - len("-coordinator")
"""Room for the longest per-child suffix within a DNS label (ConfigMaps, Secrets, pod labels)."""


def child_name(kind: str, name: str) -> str:
    """``name`` + the kind's suffix, shortened with a digest when it would not fit a DNS label."""
    full = name + CHILD_SUFFIX.get(kind, f"-{kind.lower()}")
    if len(full) <= CHILD_NAME_MAX:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"{full[: CHILD_NAME_MAX - 9].rstrip('-')}-{digest}"


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    namespace: str
    uid: str | None

    @property
    def app_name(self) -> str:
        """The SparkApplication's name (unique per owner kind, see ``CHILD_SUFFIX``)."""
        return child_name(self.kind, self.name)

    @property
    def publish_app_name(self) -> str:
        """A Backfill's separate publish application, only where its completed application left
        no publish report of its run (its driver validates and publishes otherwise)."""
        return child_name("Publish", self.app_name)

    @property
    def plan_app_name(self) -> str:
        """A Backfill's plan application (spec.dryRun): reads metadata only, driver-only."""
        return child_name("Plan", self.app_name)

    @property
    def config_map_name(self) -> str:
        return f"{self.app_name}-jobconfig"

    @property
    def green_app_name(self) -> str:
        """A blueGreen upgrade's new version, beside the job's application (``reconcile.blue_green``)."""
        return child_name("Green", self.app_name)

    @property
    def step_app_name(self) -> str:
        """A blueGreen upgrade's step application (compare, switch or discard), one at a time."""
        return child_name("BlueGreen", self.app_name)

    @property
    def control_map_name(self) -> str:
        """A live job's control ConfigMap: the operator's snapshot requests to its driver."""
        return f"{self.app_name}-control"

    @property
    def token_secret_name(self) -> str:
        """The Secret holding this object's coordinator credential (scoped to its group)."""
        return f"{self.app_name}-coordinator"

    def owns(self, child: dict[str, Any]) -> bool:
        """Whether ``child`` is this object's: its controller reference names this kind, name
        and (when known on both sides) uid. A namesake's or another kind's child is not."""
        for ref in (child.get("metadata") or {}).get("ownerReferences") or []:
            if ref.get("kind") != self.kind or ref.get("name") != self.name:
                continue
            if self.uid and ref.get("uid") and ref["uid"] != self.uid:
                continue
            return True
        return False

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
    env_from: tuple[dict[str, Any], ...] = ()
    """The job's ``envFrom`` (its data-plane credentials), on the driver and the executors."""
    volumes: tuple[dict[str, Any], ...] = ()
    image_pull_secrets: tuple[str, ...] = ()
    deps: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The job's ``spec.deps`` as the SparkApplication's (field, entries), set fields only,
    without the pyFiles the driver fetches itself (``Dependencies.submitted``)."""
    pipeline_config_map: str | None = None
    """The job's ``spec.pipelineFrom.configMap``: mounted into the driver (``PIPELINE_MOUNT``)."""
    kafka_secrets: tuple[tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]] = ((), ())
    """The Secrets its Kafka sources and sinks name: (volumes, mounts), in the driver and every
    executor (``render.kafka_security``)."""


def job_launch(
    job: StreamingJob,
    restart: dict[str, Any],
    image: str | None = None,
    token_secret: str | None = None,
    driver: PodOverrides | None = None,
    executor: PodOverrides | None = None,
) -> Launch:
    """How every application of ``job`` is launched: its image (or a Backfill's), its pods
    (with a Backfill's overrides), service account and credentials."""
    spec = job.spec
    env_from = tuple(e.model_dump(by_alias=True, exclude_none=True) for e in spec.env_from)
    secret_vols, secret_mounts = secret_volumes((*spec.security_in_use, *spec.registries_in_use))
    pods_executor = overridden(spec.executor, executor)
    assert isinstance(pods_executor, ExecutorResources)
    return Launch(
        image or spec.image,
        overridden(spec.driver, driver),
        pods_executor,
        spec.service_account,
        restart,
        token_secret,
        env_from,
        tuple(spec.volumes),
        tuple(spec.image_pull_secrets),
        deps=tuple((k, tuple(v)) for k, v in (spec.deps.submitted() if spec.deps else {}).items()),
        pipeline_config_map=spec.pipeline_from.config_map.name if spec.pipeline_from else None,
        kafka_secrets=(tuple(secret_vols), tuple(secret_mounts)),
    )


def pod_spec(
    pod: Resources, service_account: str | None, labels: dict[str, str], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """A SparkPodSpec (spark-operator v1beta2) of the driver or the executors: ours (labels,
    the JobConfig's mount) and the user's pod settings, which never replace ours.
    ``service_account``: the default when the pods name none (None: Spark's, the executors')."""
    out: dict[str, Any] = {"cores": pod.cores, "memory": pod.memory}
    if pod.service_account or service_account:
        out["serviceAccount"] = pod.service_account or service_account
    out["labels"] = {**pod.labels, **labels}
    out["volumeMounts"] = [*mounts, *pod.volume_mounts]
    optional = {
        "memoryOverhead": pod.memory_overhead,
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "affinity": pod.affinity,
        "env": pod.env,
        "annotations": {**pod.annotations, **node_lost_after_annotation(pod)},
        "securityContext": pod.security_context,
        "podSecurityContext": pod.pod_security_context,
        "priorityClassName": pod.priority_class_name,
    }
    out.update({k: v for k, v in optional.items() if v})
    return out


def node_lost_after_annotation(pod: PodSettings) -> dict[str, str]:
    """The pods' ``nodeLostAfter`` in seconds, as an annotation the operator reads back from
    each pod (``reconcile.node_loss``). Not a toleration: the spark-operator's webhook appends
    a pod's tolerations after the 300 s ones the API server's DefaultTolerationSeconds gave it
    at creation, and Kubernetes keeps the first that matches a taint."""
    return {NODE_LOST_AFTER: str(int(as_timedelta(pod.node_lost_after).total_seconds()))}


PIPELINE_VOLUME = "kappa-pipeline"


def pipeline_volume(config_map_name: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volume and the driver's mount of a ``spec.pipelineFrom`` ConfigMap (none without
    one). The driver alone mounts it: it ships the modules to the executors itself
    (``spark_app.apps.pipeline_code``), which works whatever PYTHONPATH the image sets, where a
    mount in the executors would need their PYTHONPATH rewritten."""
    if config_map_name is None:
        return [], []
    volume = {"name": PIPELINE_VOLUME, "configMap": {"name": config_map_name}}
    return [volume], [{"name": PIPELINE_VOLUME, "mountPath": pipeline_mount(config_map_name), "readOnly": True}]


CONTROL_VOLUME = "kappa-control"


def control_volume(name: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The control ConfigMap's volume and the driver's mount (none for ``name`` None). Optional:
    the driver starts before the operator's first request (Kubernetes then mounts an empty
    directory, and updates the files when the ConfigMap changes)."""
    if name is None:
        return [], []
    volume = {"name": CONTROL_VOLUME, "configMap": {"name": name, "optional": True}}
    return [volume], [{"name": CONTROL_VOLUME, "mountPath": REQUESTS_FILE.rsplit("/", 1)[0], "readOnly": True}]


def control_map(owner: Owner, nonces: list[str]) -> dict[str, Any]:
    """The live job's control ConfigMap holding its open snapshot requests."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": owner.control_map_name,
            "namespace": owner.namespace,
            "labels": owner.labels,
            "ownerReferences": [owner.reference()],
        },
        "data": {REQUESTS_KEY: requests_text(nonces)},
    }


def config_map(
    owner: Owner, cfg: JobConfig, extra: dict[str, str] | None = None, name: str | None = None
) -> dict[str, Any]:
    """``extra``: more data keys (a Backfill keeps its StreamingJob's spec here, so it can
    finish after that job is deleted). The JobConfig as the pods run it: Spark's metrics
    served by the driver (``driver_metrics``). ``name``: another of the owner's ConfigMaps
    than its application's (a blueGreen upgrade's green and step applications')."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name or owner.config_map_name,
            "namespace": owner.namespace,
            "labels": owner.labels,
            "ownerReferences": [owner.reference()],
        },
        "data": {"job.json": with_driver_metrics(cfg).to_json(), **(extra or {})},
    }


def token_secret(owner: Owner, token: str) -> dict[str, Any]:
    """The coordinator credential of one object, owned by it: garbage-collected with it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": owner.token_secret_name,
            "namespace": owner.namespace,
            "labels": owner.labels,
            "ownerReferences": [owner.reference()],
        },
        "type": "Opaque",
        "stringData": {"token": token},
    }


SECRET_VERSIONS_ANNOTATION = "kappa.dev/secret-versions"
"""On a live job's application: the ``resourceVersion`` of each Secret its spec.kafkaSecurity
names, as it was created with (JSON, name -> version). Part of its config hash too: a Secret
whose version moved on restarts the job (``reconcile.streaming_job``)."""


def running_secret_versions(app: Mapping[str, Any] | None) -> dict[str, str]:
    """What ``spark_application`` recorded of the Secrets' versions (empty: none, or an
    application from before they were recorded)."""
    said = (((app or {}).get("metadata") or {}).get("annotations") or {}).get(SECRET_VERSIONS_ANNOTATION)
    try:
        versions = json.loads(said) if said else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {}


def spark_application(
    owner: Owner,
    cfg: JobConfig,
    launch: Launch,
    config_hash: str,
    command: str = "run",
    control: bool = False,
    secret_versions: Mapping[str, str] | None = None,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    config_map_name: str | None = None,
) -> dict[str, Any]:
    """``command``: ``run`` (the query; a backfill's with ``publish`` in its JobConfig then
    validates and publishes in the same driver), ``publish`` (a finished backfill's validation
    and publish alone, under ``Owner.publish_app_name``; it reads the same ConfigMap), ``plan`` (a
    Backfill's plan, ``Owner.plan_app_name``, same ConfigMap) or ``restore`` (a Rewind's
    restore, its owner's only application). ``control``: mount the owner's control ConfigMap
    into the driver (a live job: its snapshot requests, ``spark_app.contract.snapshot_requests``).
    ``name``, ``labels``, ``config_map_name``: a blueGreen upgrade's green and step applications,
    each with its own name, role label and ConfigMap (``render.blue_green``)."""
    annotations = {"kappa.dev/config-hash": config_hash}
    if secret_versions:
        annotations[SECRET_VERSIONS_ANNOTATION] = json.dumps(dict(sorted(secret_versions.items())))
    name = name or {"publish": owner.publish_app_name, "plan": owner.plan_app_name}.get(command, owner.app_name)
    mount = [{"name": "jobconfig", "mountPath": CONFIG_PATH.rsplit("/", 1)[0]}]
    code_volumes, code_mounts = pipeline_volume(launch.pipeline_config_map)
    labels = {**owner.labels, **(labels or {}), "kappa.dev/config-hash": config_hash}
    control_volumes, control_mounts = control_volume(owner.control_map_name if control else None)
    secret_vols, secret_mounts = launch.kafka_secrets
    driver = pod_spec(
        launch.driver, launch.service_account, labels, [*mount, *code_mounts, *control_mounts, *secret_mounts]
    )
    if launch.token_secret:
        token = {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": launch.token_secret, "key": "token"}}}
        driver["env"] = [*[e for e in driver.get("env", []) if e.get("name") != TOKEN_ENV], token]
    executor = {
        # none: the tasks run in the driver (the JobConfig's local master); the spark-operator's
        # schema has no 0, and a local master asks Kubernetes for no executor
        **({"instances": launch.executor.instances} if launch.executor.instances else {}),
        **pod_spec(launch.executor, launch.service_account, labels, [*mount, *secret_mounts]),
    }
    if launch.env_from:
        driver["envFrom"] = executor["envFrom"] = [dict(e) for e in launch.env_from]
    return {
        "apiVersion": SPARK_API,
        "kind": "SparkApplication",
        "metadata": {
            "name": name,
            "namespace": owner.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "pythonVersion": "3",
            "image": launch.image,
            "mainApplicationFile": MAIN,
            "arguments": ([] if command == "run" else [command]) + ["--config", CONFIG_PATH],
            "sparkVersion": SPARK_VERSION,
            "sparkConf": spark_conf(cfg),
            "restartPolicy": launch.restart,
            "volumes": [
                {"name": "jobconfig", "configMap": {"name": config_map_name or owner.config_map_name}},
                *code_volumes,
                *control_volumes,
                *secret_vols,
                *launch.volumes,
            ],
            **({"deps": {k: list(v) for k, v in launch.deps}} if launch.deps else {}),
            **({"imagePullSecrets": list(launch.image_pull_secrets)} if launch.image_pull_secrets else {}),
            "driver": driver,
            "executor": executor,
        },
    }


NO_WAIT_FOR_EXECUTORS = {"spark.scheduler.minRegisteredResourcesRatio": "0"}
"""A Backfill's applications start their work without waiting for executors to register.

On Kubernetes a SparkContext asks for its executor pods when it starts, then blocks until 80%
of them registered (``minRegisteredResourcesRatio``, 0.8 there) or 30 s passed
(``maxRegisteredResourcesWaitingTime``): the driver idles while the pods are scheduled, pull and
start their JVMs, and only then plans (Iceberg metadata, the pipeline's plan, the coordinator),
one after the other; a backfill with one executor waits for all of it. At 0 the session is
ready at once, the driver plans while its executors start, and its first Spark job waits for
them as any job waits for free slots. The driver sizes its tasks and state partitions for the
executors it asked for, registered or not (``spark_app.sources.frames.task_slots``). A job's
own ``sparkConf`` setting wins. Nothing else needs changing: Spark asks for up to
``spark.kubernetes.allocation.batch.size`` pods per round (10 in Spark 4.0, 20 from 4.2), a
round every ``allocation.batch.delay`` (1 s), so a backfill's executors are asked for in the
first round unless it has more than that. Live StreamingJobs keep Spark's defaults: they start
rarely and run for weeks, and a first micro-batch on a few executors would place their state
stores unevenly."""


EXECUTOR_FAILURES = {"spark.executor.failuresValidityInterval": "10m", "spark.executor.maxNumFailures": "300"}
"""How many executor failures end a driver: more than 300 within 10 minutes.

Spark's own limit: more than ``max(2 x executors, 3)`` failures over the application's whole life
(exit code 11), and on Kubernetes a failed creation of an executor pod counts as one. Under it, a
live job with two executors dies at the fifth executor lost in weeks of running (a preempted
node, a drain). Also, any API server outage of a few seconds ends every driver that asks for an
executor meanwhile: each allocation round's failed creation counts. The node's fault run saw four
in five seconds of a 60-s outage, and in CI the same outage ended a Backfill's driver.

A driver's exit buys nothing here. The operator restarts a failed driver itself, with backoff,
once the API server answers. What the limit guards against stays guarded: a task that kills its
executors fails its stage after ``spark.task.maxFailures`` attempts, and a StreamingJob whose
executors never run makes no progress (``Stalled``, ``health.progressTimeout``). So failures
count within a 10-minute window, up to 300 in it (a failure every 2 s for the whole window). A
job's own ``sparkConf`` setting wins."""


def spark_conf(cfg: JobConfig) -> dict[str, str]:
    """The application's Spark settings: the job's, over ``EXECUTOR_FAILURES`` and, for a
    backfill, ``NO_WAIT_FOR_EXECUTORS``; and Spark's metrics served by the driver
    (``driver_metrics``, the same as the ConfigMap's)."""
    backfill = NO_WAIT_FOR_EXECUTORS if cfg.mode == "backfill" else {}
    return {**EXECUTOR_FAILURES, **backfill, **with_driver_metrics(cfg).spark_conf}


LIVE_RESTART = {"type": "Never"}
"""The operator restarts a failed live application itself, with backoff (``reconcile.restarts``):
the Spark operator's ``Always`` waits a fixed interval, forever."""
BACKFILL_RESTART = {"type": "Never"}
"""A failed backfill stays failed with everything needed to retry (checkpoint, branch); the
operator, not the Spark operator, decides on a retry."""
