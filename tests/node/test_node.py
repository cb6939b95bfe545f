"""A real one-node cluster on this machine (issue 40, first part): pods scheduled by
kube-scheduler, run by a kubelet through containerd and runc from images built here, on the CNI
bridge, with their logs read back through the API server as ``kubectl logs`` reads them."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tests.cluster.control_plane import eventually, path_of
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
