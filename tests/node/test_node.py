"""A real one-node cluster on this machine (issue 40, first part): pods scheduled by
kube-scheduler, run by a kubelet through containerd and runc from images built here, on the CNI
bridge, with their logs read back through the API server as ``kubectl logs`` reads them; and the
operator in its own pod (item 5): its image built here from images/operator/Dockerfile,
installed by `helm install` of the chart with its ServiceAccount and RBAC, reaching the API
server through the `kubernetes` Service, turning a StreamingJob a user applies into its
SparkApplication. One file: pytest-xdist's loadfile keeps the node's tests on one worker (the
node's bridge and the kubelet's port are the machine's)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import CHART, Helm, crd_documents
from tests.cluster.control_plane import ROOT, binaries, eventually, path_of
from tests.node.images import build
from tests.node.node import BUSYBOX, GATEWAY, NODE, SERVICES, SUBNET, Node, pod


def ended(node: Node, namespace: str, name: str) -> dict[str, Any] | None:
    status = node.plane.admin.get(path_of("Pod", namespace, name)).body.get("status") or {}
    return status if status.get("phase") in ("Succeeded", "Failed") else None


def create(node: Node, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    node.plane.admin.ok(node.plane.admin.create(path_of("Pod", meta["namespace"]), body), meta["name"])


@pytest.fixture(scope="module")
def namespace(node: Node) -> str:
    return node.plane.namespace("node-tests")


def test_a_pod_runs_from_an_image_built_here_with_an_address_on_the_bridge(node: Node, namespace: str) -> None:
    create(node, pod(namespace, "hello", BUSYBOX, "echo hello from $(hostname)"))
    status = eventually(lambda: ended(node, namespace, "hello"), "the pod to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", status
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(SUBNET)
    assert status["hostIP"] == GATEWAY
    body = node.plane.admin.get(path_of("Pod", namespace, "hello")).body
    assert body["spec"]["nodeName"] == NODE, "placed by kube-scheduler"
    assert node.pod_log(namespace, "hello") == "hello from hello\n", "read through the API server from the kubelet"


def test_pods_reach_each_other_on_the_bridge_and_have_no_route_out_of_the_machine(node: Node, namespace: str) -> None:
    serve = "while true; do echo served by $(hostname) | nc -l -p 8080; done"
    create(node, pod(namespace, "server", BUSYBOX, serve))

    def address() -> str | None:
        status = node.plane.admin.get(path_of("Pod", namespace, "server")).body.get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    ip = eventually(address, "the server pod running", timeout=90, every=0.5)
    # the server may take a moment to listen after its container started
    fetch = f"for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 5 {ip} 8080 </dev/null && break; sleep 1; done; ip route"
    create(node, pod(namespace, "client", BUSYBOX, fetch))
    status = eventually(lambda: ended(node, namespace, "client"), "the client pod to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", status
    served, *routes = node.pod_log(namespace, "client").splitlines()
    assert served == "served by server"
    assert routes and all(r.startswith((SUBNET, SERVICES)) for r in routes), f"only the bridge and Services: {routes}"
    node.plane.admin.delete(path_of("Pod", namespace, "server"))


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(node: Node, namespace: str) -> None:
    """What every in-cluster client does (the operator's pod, a Spark driver creating its
    executors): KUBERNETES_SERVICE_HOST, a Service's cluster IP, taken to the API server by
    kube-proxy's rules."""
    probe = (
        'for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 3 "$KUBERNETES_SERVICE_HOST" 443 </dev/null && echo reached && exit 0;'
        " sleep 1; done; exit 1"
    )
    create(node, pod(namespace, "client-of-the-api", BUSYBOX, probe))
    status = eventually(lambda: ended(node, namespace, "client-of-the-api"), "the probe to end", timeout=90, every=0.5)
    assert status["phase"] == "Succeeded", node.pod_log(namespace, "client-of-the-api")
    assert node.pod_log(namespace, "client-of-the-api").strip() == "reached"


# --- the operator in its pod -----------------------------------------------------------------

OPERATOR_IMAGE = "kappa.dev/kappa-operator:0.1.0"
RELEASE, NAMESPACE = "kappa", "kappa-system"


@pytest.fixture(scope="module")
def jobs(node: Node) -> Iterator[str]:
    """The chart installed on the node with our image; the namespace where the jobs go."""
    node.load_archive(build("operator", OPERATOR_IMAGE))
    plane = node.plane
    plane.apply_manifests(crd_documents())
    for doc in crd_documents():
        plane.wait_established(doc["metadata"]["name"])
    jobs = plane.namespace("jobs")
    helm = Helm(binaries().helm, plane.write_kubeconfig(node.workdir / "helm.kubeconfig", plane.admin_token, "admin"))
    helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
        "--set", "image.repository=kappa.dev/kappa-operator", "--set", "image.tag=0.1.0",
        "--set", "image.pullPolicy=Never", "--set", f"rbac.coordinatorSecrets.namespaces={{{jobs}}}",
    )  # fmt: skip
    yield jobs
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, check=False)


def operator_pod(node: Node) -> dict[str, Any] | None:
    items = node.plane.admin.get(path_of("Pod", NAMESPACE)).body.get("items") or []
    return items[0] if items else None


def ready(node: Node) -> dict[str, Any] | None:
    found = operator_pod(node)
    conds = {c["type"]: c["status"] for c in ((found or {}).get("status") or {}).get("conditions") or []}
    return found if conds.get("Ready") == "True" else None


def test_the_chart_runs_the_operator_in_its_pod_and_it_turns_a_streaming_job_into_its_application(
    node: Node, jobs: str
) -> None:
    found = eventually(lambda: ready(node), "the operator's pod Ready", timeout=120, every=1)
    container = found["spec"]["containers"][0]
    assert container["image"] == OPERATOR_IMAGE and found["spec"]["securityContext"]["runAsUser"] == 10001
    job = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    job["metadata"]["namespace"] = jobs
    node.plane.admin.ok(node.plane.admin.create(path_of("StreamingJob", jobs), job), "the StreamingJob")

    def submitted() -> dict[str, Any] | None:
        status = node.plane.admin.get(path_of("StreamingJob", jobs, "rmi")).body.get("status") or {}
        return status if status.get("phase") == "Submitted" else None

    status = eventually(submitted, "the job Submitted by the operator in its pod", timeout=60, every=1)
    app = node.plane.admin.get(path_of("SparkApplication", jobs, "rmi"))
    assert app.status == 200 and app.body["metadata"]["ownerReferences"][0]["name"] == "rmi", app.body
    assert status["observedGeneration"] == 1
    log = node.pod_log(NAMESPACE, found["metadata"]["name"])
    assert " 403" not in log and "Forbidden" not in log, log[-3000:]


# --- Spark on Kubernetes from our image --------------------------------------------------------

SPARK_IMAGE = "kappa.dev/kappa-spark:0.1.0"

JOB = """cat > /tmp/job.py <<'PY'
from pyspark.sql import SparkSession
s = SparkSession.builder.getOrCreate()
print("EXECUTORS", s.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)
print("SUM", s.range(0, 1000, numPartitions=4).selectExpr("sum(id)").first()[0])
s.stop()
PY
exec /opt/spark/bin/spark-submit --master "k8s://https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT" \\
  --deploy-mode client --conf spark.driver.host="$POD_IP" --conf spark.driver.bindAddress=0.0.0.0 \\
  --conf spark.kubernetes.driver.pod.name="$POD_NAME" --conf spark.kubernetes.namespace="$POD_NAMESPACE" \\
  --conf spark.kubernetes.container.image=IMAGE --conf spark.kubernetes.container.image.pullPolicy=Never \\
  --conf spark.kubernetes.authenticate.serviceAccountName=spark --conf spark.executor.instances=1 \\
  --conf spark.executor.memory=512m --conf spark.executor.cores=1 --conf spark.kubernetes.executor.request.cores=100m \\
  /tmp/job.py
"""


def test_a_spark_driver_from_our_image_runs_its_executor_pod_from_our_image(node: Node) -> None:
    """images/spark/Dockerfile built here, its entrypoint ours: a driver pod (client mode, no
    cluster DNS needed: executors reach it at its pod address) asks the API server for an
    executor pod with its ServiceAccount; the executor starts from the same image through the
    entrypoint's `executor` branch, registers with the driver, and runs the job's tasks."""
    node.load_archive(build("spark", SPARK_IMAGE))
    plane = node.plane
    ns = plane.namespace("spark-on-node")
    rule = {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "persistentvolumeclaims"],
        "verbs": ["*"],
    }
    plane.apply_manifests(
        [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spark", "namespace": ns}},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "spark", "namespace": ns},
                "rules": [rule],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "spark", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark"},
                "subjects": [{"kind": "ServiceAccount", "name": "spark", "namespace": ns}],
            },
        ]
    )
    script = JOB.replace("IMAGE", SPARK_IMAGE)
    body = pod(ns, "driver", SPARK_IMAGE, script, serviceAccountName="spark")
    container = body["spec"]["containers"][0]
    container["command"] = ["/opt/entrypoint.sh", "/bin/bash", "-c", script]
    container["env"] = [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field}}}
        for name, field in (
            ("POD_IP", "status.podIP"),
            ("POD_NAME", "metadata.name"),
            ("POD_NAMESPACE", "metadata.namespace"),
        )
    ]
    create(node, body)
    executors: set[str] = set()

    def finished() -> dict[str, Any] | None:
        for item in plane.admin.get(path_of("Pod", ns)).body.get("items") or []:
            if item["metadata"].get("labels", {}).get("spark-role") == "executor":
                executors.add(item["metadata"]["name"])
        return ended(node, ns, "driver")

    status = eventually(finished, "the Spark driver to end", timeout=300, every=1)
    log = node.pod_log(ns, "driver")
    assert status["phase"] == "Succeeded", log[-4000:]
    assert "EXECUTORS 1" in log and "SUM 499500" in log, log[-4000:]
    assert executors, "an executor pod was created by the driver"
