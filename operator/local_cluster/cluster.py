"""The whole cluster a user tries kappa on (`kappa cluster up`) and the node tests run against:
its Kubernetes (control plane, one or more nodes, CoreDNS: ``kubernetes.py``), our images and
the spark-operator's built here and loaded on every node, the spark-operator installed by its
own chart (its webhook on), this repository's chart installed as a user installs it, and what
the jobs reach outside the cluster as on a cloud (S3, the catalog's database, a Kafka broker),
the credentials in Secrets, and Prometheus configured by the chart (``monitoring.py``)."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.leadership.lease import LEADER_LABEL
from kappa_operator.local.kafka import MTLS, SASL_SSL, KafkaBroker, Secured
from kappa_operator.local_cluster.addresses import GATEWAY, JOBS_POOL, SYSTEM_POOL
from kappa_operator.local_cluster.control_plane import ROOT, Parts, binaries, eventually
from kappa_operator.local_cluster.dashboards import Perses
from kappa_operator.local_cluster.images import OPERATOR_IMAGE, SPARK_IMAGE, SPARK_OPERATOR_IMAGE, build_all
from kappa_operator.local_cluster.kubernetes import Kubernetes
from kappa_operator.local_cluster.monitoring import Prometheus
from kappa_operator.local_cluster.network import bridge
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.local_cluster.storage import (
    ACCESS_KEY,
    BUCKET,
    REGION,
    SECRET_KEY,
    CatalogDatabase,
    ObjectStore,
)

OPERATOR_RELEASE, OPERATOR_NAMESPACE = "kappa", "kappa-system"
OPERATOR_PODS = "app.kubernetes.io/name=kappa-operator"
OPERATOR_LEADER = f"{OPERATOR_PODS},{LEADER_LABEL}=true"
"""The replica that leads: the label it sets on its own pod (the coordinator's Service selects it)."""
SPARK_OPERATOR_RELEASE, SPARK_OPERATOR_NAMESPACE = "spark-operator", "spark-operator"
SPARK_APPLICATIONS_CRD = "sparkapplications.sparkoperator.k8s.io"
SMALL_NODE_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
"""The drivers' and executors' JVM options on this one small node: a job here runs minutes on
a few thousand rows, so C2's compilations and parallel GC threads cost CPU the node's other pods
need and never pay back (the tests' own JVMs run so too: tests/conftest.py, 31 % less CPU for
the same Spark tests). C1 alone would shrink the code cache to 48 MB, which one long-lived Spark
session was seen to fill with the code Spark generates per query: the usual 240 MB is kept."""
JOBS = "default"
"""Where the examples' objects go (their own namespace)."""
CREDENTIALS = "lake-credentials"
"""The Secret (in the jobs' and the operator's namespaces) with the S3 API's keys."""
S3_PORT, DB_PORT, KAFKA_PORT = 9000, 5432, 9092
KAFKA_SECURED_PORTS = {SASL_SSL: 9093, MTLS: 9094}
"""The broker's secured listeners, as a company's broker has them: SCRAM over TLS, and TLS with a
client certificate; their certificates from the cluster's own CA (``workdir/pki``)."""
KAFKA_USER = "kappa-job"
"""The SCRAM-SHA-512 user the cluster's broker knows (its password: ``LocalCluster.kafka_password``)."""
CHART = ROOT / "charts" / "kappa-operator"
PROMETHEUS_NAME = f"{OPERATOR_RELEASE}-kappa-operator-prometheus"
"""The chart's Prometheus ConfigMap and ServiceAccount (``prometheusConfig``), release ``kappa``."""
SCRAPE_INTERVAL = "5s"
"""How often the local Prometheus scrapes (the chart's default is 30 s): a Backfill of the
examples runs in a minute or two, and its dashboard needs points within it."""
LOCAL_ALERTS = {"prometheusRule.jobStalled.for": "15s"}
"""The chart's alert thresholds this cluster changes: a StreamingJob Stalled (past its
``spec.health.progressTimeout``) alerts after 15 s here, where a production cluster waits 5 min
before it wakes someone."""


class ClusterError(RuntimeError):
    pass


def _archives(parts: Parts) -> tuple[Path, Path, Path]:
    """The OCI archives of the Spark image, the kappa operator's and the spark-operator's, built
    where missing, two side by side (``images.build_all``: cached by what goes into each, one
    build of each at a time on the machine)."""
    built = build_all(lambda: parts.spark_operator)
    return built["spark"], built["operator"], built["spark-operator"]


def _escaped(key: str) -> str:
    """A label key as one path element of helm's ``--set`` (its dots escaped)."""
    return key.replace(".", "\\.")


def helm(parts: Parts, kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(parts.helm), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=600
    )
    if check and done.returncode != 0:
        raise ClusterError(f"helm {' '.join(args[:3])} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done


def secret(namespace: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _broker(workdir: Path, secured: Secured | None = None) -> KafkaBroker:
    """The broker on the bridge: PLAINTEXT, and the secured listeners (a restart keeps their CA
    and users)."""
    if secured is None:
        from kappa_operator.local.certificates import Authority  # cryptography: the dev extra's

        secured = Secured(Authority.create(workdir / "pki"), scram={KAFKA_USER: secrets.token_urlsafe(18)})
    return KafkaBroker.start(
        workdir / "kafka", KAFKA_PORT, host=GATEWAY, secured=secured, secured_ports=KAFKA_SECURED_PORTS
    )


@dataclass
class LocalCluster:
    workdir: Path
    parts: Parts
    kube: Kubernetes
    store: ObjectStore
    database: CatalogDatabase
    broker: KafkaBroker
    kubeconfig: Path
    started_in: dict[str, float] = field(default_factory=dict)
    """Seconds `up` spent on each part (side by side: they add up to more than "in all")."""
    prometheus: Prometheus | None = None
    """Prometheus, once the chart that configures it is installed."""
    perses: Perses | None = None
    """The dashboard server, once Prometheus runs."""

    # --- what the jobs are given -------------------------------------------------------------

    def catalog(self) -> dict[str, str]:
        """A StreamingJob's ``catalogs.default``: pyiceberg's SQL catalog on the database, its
        warehouse on the S3 API (keys from the pods' environment: ``CREDENTIALS``)."""
        return catalog_properties(self.store, self.database)

    def spark_conf(self) -> dict[str, str]:
        """Spark's S3A for checkpoints and the sink's files on this S3 API (keys from the
        environment, S3A's default chain); the pods' CPU requests below their cores, so a
        driver and its executor fit on a 2-core node beside the operators; and their JVMs
        compiling with C1 only and collecting with one thread (``SMALL_NODE_JVM``)."""
        return {
            "spark.kubernetes.driver.request.cores": "200m",
            "spark.kubernetes.executor.request.cores": "200m",
            "spark.driver.extraJavaOptions": SMALL_NODE_JVM,
            "spark.executor.extraJavaOptions": SMALL_NODE_JVM,
            "spark.hadoop.fs.s3a.endpoint": self.store.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        }

    def host_catalog(self, name: str = "default") -> Any:
        """The same catalog opened from this machine (the keys given, not from a pod's env)."""
        return host_catalog(self.store, self.database, name)

    # --- up and down -------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        workdir: Path,
        parts: Parts | None = None,
        jobs: str = JOBS,
        beside: Callable[[Any], object] | None = None,
        nodes: int = 1,
    ) -> LocalCluster:
        """Started side by side where nothing orders them (issue 58: `up` with its images built
        in a minute, where it took 157 s one part after another): the images found (or built)
        while the node and the storage outside it start; the operators' images loaded before
        their charts are installed, and the Spark image, which only jobs need, loaded while
        the charts' pods start. ``beside``: work that needs the cluster's catalog and not its
        nodes (the example data of `kappa cluster up`, 50 s of writing on 2 cores), given the
        catalog once S3 and the catalog's database run, while the nodes start and the charts
        are installed.
        ``nodes``: how many nodes (``kubernetes.py``). Whatever started is stopped again if
        anything fails."""
        parts = parts or binaries()
        workdir.mkdir(parents=True, exist_ok=True)
        bridge()  # the address the storage and the broker listen on, before they start
        (workdir / "storage").mkdir(exist_ok=True)
        spent: dict[str, float] = {}
        began = time.monotonic()
        side = ThreadPoolExecutor(max_workers=1)
        with ThreadPoolExecutor(max_workers=5) as pool:
            images = pool.submit(_timed, spent, "images", _archives, parts)
            starting = {
                "kube": pool.submit(
                    _timed, spent, "nodes", Kubernetes.start, workdir / "node", parts.current, nodes, parts.coredns
                ),
                "store": pool.submit(_timed, spent, "s3", ObjectStore.start, workdir / "storage", GATEWAY, S3_PORT),
                "database": pool.submit(
                    _timed, spent, "catalog", CatalogDatabase.start, workdir / "storage", GATEWAY, DB_PORT
                ),
                "broker": pool.submit(_timed, spent, "broker", _broker, workdir),
            }
            done_beside = (
                side.submit(_timed, spent, "beside", _with_catalog, starting["store"], starting["database"], beside)
                if beside is not None
                else None
            )
            wait([images, *starting.values()])
        failed = [f.exception() for f in (images, *starting.values()) if f.exception() is not None]
        if failed:
            for name in ("broker", "database", "store", "kube"):  # the nodes last: the others are their clients
                if starting[name].exception() is None:
                    part = starting[name].result()
                    with contextlib.suppress(Exception):
                        part.stop()
            side.shutdown(wait=False, cancel_futures=True)
            raise failed[0]
        kube = starting["kube"].result()
        kubeconfig = kube.plane.write_kubeconfig(workdir / "kubeconfig", kube.plane.admin_token, "admin")
        cluster = cls(
            workdir,
            parts,
            kube,
            starting["store"].result(),
            starting["database"].result(),
            starting["broker"].result(),
            kubeconfig,
        )
        try:
            spark, operator, spark_operator = images.result()
            _timed(spent, "operators' images loaded", kube.load_archive, spark_operator, SYSTEM_POOL)
            _timed(spent, "operators' images loaded", kube.load_archive, operator, SYSTEM_POOL)
            kube.plane.namespace(jobs)
            with ThreadPoolExecutor(max_workers=3) as pool:
                loading = pool.submit(_timed, spent, "spark image loaded", kube.load_archive, spark, JOBS_POOL)
                # both charts at once: kappa's waits for the SparkApplication CRD only, which
                # the spark-operator's chart applies first (its pods' start is what takes time)
                spark_operator_installed = pool.submit(
                    _timed, spent, "spark-operator chart", cluster._spark_operator, jobs
                )
                _timed(spent, "kappa chart", cluster._operator, jobs)
                cluster.prometheus = _timed(spent, "prometheus", cluster._prometheus)
                cluster.perses = _timed(spent, "perses", cluster._perses, cluster.prometheus)
                spark_operator_installed.result()
                loading.result()
                if done_beside is not None:
                    done_beside.result()
            spent["in all"] = round(time.monotonic() - began, 1)
            side.shutdown()
            cluster.started_in = spent
            print("cluster up: " + ", ".join(f"{k} {v} s" for k, v in spent.items()), file=sys.stderr, flush=True)
            return cluster
        except BaseException:
            side.shutdown(wait=True, cancel_futures=True)
            cluster.stop()
            raise

    def _spark_operator(self, jobs: str) -> None:
        """The Kubeflow Spark Operator's own chart (from its module, as cluster/build.sh fetched
        it), its controller and webhook on our image of it. The webhook is on: the driver's and
        executors' ConfigMap volumes, the coordinator token's secretKeyRef, envFrom and the pod
        security context of our SparkApplications are set on the pods by it, not by
        spark-submit."""
        self.kube.plane.namespace(jobs)
        repository, tag = SPARK_OPERATOR_IMAGE.rsplit(":", 1)
        registry, repository = repository.split("/", 1)
        helm(
            self.parts, self.kubeconfig, "upgrade", "--install", SPARK_OPERATOR_RELEASE,
            str(self.parts.spark_operator_chart),
            "--namespace", SPARK_OPERATOR_NAMESPACE, "--create-namespace", "--wait", "--timeout", "5m",
            "--set", f"image.registry={registry}", "--set", f"image.repository={repository}",
            "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
            "--set", f"spark.jobNamespaces={{{jobs}}}",
            # the drivers' ServiceAccount and Role are the kappa chart's (sparkServiceAccount)
            "--set", "spark.serviceAccount.create=false", "--set", "spark.rbac.create=false",
            "--set", "prometheus.metrics.enable=false", "--set", "controller.workers=4",
            "--set-string", f"controller.nodeSelector.{_escaped(SYSTEM_POOL)}=true",
            "--set-string", f"webhook.nodeSelector.{_escaped(SYSTEM_POOL)}=true",
        )  # fmt: skip

    def _operator(self, jobs: str) -> None:
        """kappa's chart, once the spark-operator's chart applied the SparkApplication CRD (the
        operator watches SparkApplications from its start)."""
        plane = self.kube.plane
        plane.apply_manifests([yaml.safe_load(p.read_text()) for p in sorted((ROOT / "crds").glob("*.yaml"))])
        keys = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        plane.namespace(OPERATOR_NAMESPACE)
        # the jobs' pods: the store's address too (pyarrow and pyiceberg read AWS_ENDPOINT_URL_S3)
        plane.apply_manifests(
            [secret(OPERATOR_NAMESPACE, CREDENTIALS, keys), secret(jobs, CREDENTIALS, self.store.environment())]
        )
        repository, tag = OPERATOR_IMAGE.rsplit(":", 1)
        crd = path_of("CustomResourceDefinition", name=SPARK_APPLICATIONS_CRD)
        eventually(lambda: plane.admin.get(crd).status == 200, "the SparkApplication CRD", timeout=300, every=0.5)
        helm(
            self.parts, self.kubeconfig, "upgrade", "--install", OPERATOR_RELEASE, str(CHART),
            "--namespace", OPERATOR_NAMESPACE, "--wait", "--timeout", "5m",
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
            "--set", f"objectStore.endpoint={self.store.endpoint}", "--set", f"objectStore.region={REGION}",
            "--set", f"objectStore.credentialsSecret={CREDENTIALS}",
            "--set", "sparkServiceAccount.create=true", "--set", f"sparkServiceAccount.namespaces={{{jobs}}}",
            "--set", "sparkSubmitter.grantNetworkPolicies=true",
            "--set", f"sparkSubmitter.serviceAccount={SPARK_OPERATOR_RELEASE}-controller",
            "--set", f"sparkSubmitter.namespace={SPARK_OPERATOR_NAMESPACE}",
            "--set", f"rbac.coordinatorSecrets.namespaces={{{jobs}}}",
            "--set", "liveJobs.progressInterval=5s",
            "--set", "prometheusConfig.enabled=true", "--set", "prometheusConfig.serviceAccount.create=true",
            "--set", f"prometheusConfig.interval={SCRAPE_INTERVAL}",
            *[arg for key, value in LOCAL_ALERTS.items() for arg in ("--set", f"{key}={value}")],
            "--set-string", f"nodeSelector.{_escaped(SYSTEM_POOL)}=true",
        )  # fmt: skip
        # ready is not leading: one replica takes the Lease and labels its pod (a few seconds)
        eventually(self._leader_labelled, "an operator replica leading", timeout=120, every=0.5)

    def _leader_labelled(self) -> bool:
        selector = f"?labelSelector={OPERATOR_LEADER}"
        return bool(self.kube.plane.admin.get(path_of("Pod", OPERATOR_NAMESPACE) + selector).body.get("items"))

    def _prometheus(self) -> Prometheus:
        """Prometheus on this machine with the configuration the chart installed (its
        ConfigMap, read back) and a token of the chart's Prometheus ServiceAccount: what the
        chart gives a Prometheus without the Prometheus Operator, and nothing more."""
        plane = self.kube.plane
        config = plane.admin.ok(
            plane.admin.get(path_of("ConfigMap", OPERATOR_NAMESPACE, PROMETHEUS_NAME)),
            "the chart's Prometheus ConfigMap",
        )["data"]
        token = plane.service_account_token(OPERATOR_NAMESPACE, PROMETHEUS_NAME)
        return Prometheus.start(self.workdir / "prometheus", self.parts.prometheus, config, plane.server, plane.ca,
                                token, GATEWAY)  # fmt: skip

    def _perses(self, prometheus: Prometheus) -> Perses:
        """Perses provisioned with the chart's dashboard (the file the chart ships, as a user
        would import it) and this Prometheus."""
        dashboard = json.loads((CHART / "dashboards" / "kappa.perses.json").read_text())
        return Perses.start(
            self.workdir / "perses", self.parts.perses, prometheus.url, SCRAPE_INTERVAL, dashboard, GATEWAY
        )

    def upgrade_operator(self, **values: str) -> None:
        """`helm upgrade --reuse-values --set k=v ...` of kappa's release, as a user changes a
        setting (``backfills.maxConcurrent``, say); returns once the new operator pod runs."""
        sets = [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]
        helm(
            self.parts, self.kubeconfig, "upgrade", OPERATOR_RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
            "--reuse-values", *sets, "--wait", "--timeout", "5m",
        )  # fmt: skip

    def operator_pod(self, timeout: float = 60.0) -> str:
        """The leading operator pod's name (of the chart's replicas, the one writer), once exactly
        one leads: right after an upgrade the Lease may still be moving."""

        def leading() -> list[str]:
            selector = f"?labelSelector={OPERATOR_LEADER}"
            pods = self.kube.plane.admin.get(path_of("Pod", OPERATOR_NAMESPACE) + selector).body.get("items") or []
            return [
                str(p["metadata"]["name"])
                for p in pods
                if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            ]

        found = eventually(lambda: len(leading()) == 1 and leading(), "one leading operator pod", timeout, every=0.5)
        return found[0]

    def stop(self) -> None:
        """Perses, Prometheus, the nodes (their pods are the storage's clients), then the storage. The
        catalog's database is removed: the tables' files were in the S3 API's memory, gone with
        it."""
        try:
            if self.perses is not None:
                self.perses.stop()
            if self.prometheus is not None:
                self.prometheus.stop()
            self.kube.stop()
        finally:
            self.database.remove()
            self.broker.stop()
            self.store.stop()

    def restart_broker(self) -> None:
        """The Kafka broker stopped (a controlled shutdown) and started again on the same log
        directory, address and port: its topics, records and committed offsets kept."""
        self.broker.stop()
        self.broker = _broker(self.workdir, self.broker.secured)

    # --- a job's view -------------------------------------------------------------------------

    def streaming_job(self, manifest: dict[str, Any], executors: int | None = None) -> dict[str, Any]:
        """An example StreamingJob (``examples/*.yaml``) pointed at this cluster's storage and
        image: its namespace, catalogs, S3A settings, the credentials' envFrom, sizes that fit one node.
        ``executors``: that many executors sharing two cores (0: the tasks in the driver, on its
        two cores: one JVM where a spread job has three, for what executor pods do not change);
        by default spread as below."""
        job = json.loads(json.dumps(manifest))
        job["metadata"]["namespace"] = JOBS  # the namespace the cluster's operators run jobs in
        spec = job["spec"]
        spec["image"] = SPARK_IMAGE
        spec["catalogs"] = {name: self.catalog() for name in spec.get("catalogs") or {"default": {}}}
        spec["sparkConf"] = {**spec.get("sparkConf", {}), **self.spark_conf()}
        spec["envFrom"] = [{"secretRef": {"name": CREDENTIALS}}]
        name = job["metadata"]["name"]
        spec["checkpoints"] = {
            **spec.get("checkpoints", {}),
            "location": f"s3a://{BUCKET}/checkpoints/{name}",
            "externalLocation": f"s3://{BUCKET}/kappa-snapshots/{name}",
        }
        jobs_pool = {JOBS_POOL: "true"}
        spec["driver"] = {"cores": 1, "memory": "1g", "nodeSelector": jobs_pool}
        # two task slots, as `kappa run`'s local[2]: one executor of both cores on one node, one
        # of a core on each of two nodes where there are more (spread as the example says)
        spread = self.kube is not None and len(self.kube.nodes) > 1
        executor = {k: v for k, v in (spec.get("executor") or {}).items() if k == "affinity"}
        if executors is None:
            executors = 2 if spread else 1
        sizes = {"instances": executors, "cores": 2 // max(executors, 1) or 1}
        spec["executor"] = {**executor, **sizes, "memory": "1g", "nodeSelector": jobs_pool}
        if executors == 0:
            spec["driver"]["cores"] = 2
        return job


def _timed(spent: dict[str, float], name: str, start: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``start(*args, **kwargs)``, its seconds added to ``spent[name]``: what `up` says it spent
    its time on (issue 58 asks where the minute goes)."""
    began = time.monotonic()
    try:
        return start(*args, **kwargs)
    finally:
        spent[name] = round(spent.get(name, 0.0) + time.monotonic() - began, 1)


def catalog_properties(store: ObjectStore, database: CatalogDatabase) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": database.uri,
        "warehouse": f"s3://{BUCKET}/warehouse",
        "s3.endpoint": store.endpoint,
        "s3.region": REGION,
        "s3.path-style-access": "true",
    }


def host_catalog(store: ObjectStore, database: CatalogDatabase, name: str = "default") -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    props = {k: v for k, v in catalog_properties(store, database).items() if k != "type"}
    return SqlCatalog(name, **props, **{"s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY})


def _with_catalog(store: Future[ObjectStore], database: Future[CatalogDatabase], work: Callable[[Any], object]) -> None:
    """``work`` given the cluster's catalog, opened from this machine once both parts run."""
    work(host_catalog(store.result(), database.result()))
