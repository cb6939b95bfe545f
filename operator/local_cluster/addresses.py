"""The local cluster's addresses and names (issue 59): the machine's bridge, the pod and
Service ranges, and each node's names, addresses, zone and pool, all derived from its index.
Pure: what a node is made of (``node.py``) and what is swept after it (``sweep.py``) both
read them, and so do the tests that reach pods from the machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

BRIDGE, GATEWAY, MACHINE_NET = "kappa0", "10.244.0.1", "10.244.0.0/24"
"""The machine's bridge and its address: where the control plane, the S3 API, the catalog's
database and the broker listen, and what every node has its one interface on."""
PODS = "10.244.0.0/16"
"""Every node's pod range and the machine's bridge: what a pod may reach besides Services (and
kube-proxy's clusterCIDR: traffic from outside it to a Service is masqueraded)."""
SERVICES = "10.96.0.0/16"
"""The control plane's --service-cluster-ip-range: pods route it to their node, where
kube-proxy's rules take each Service's address to its endpoints."""
DNS = "10.96.0.10"
"""The cluster DNS Service's address (cluster/coredns/coredns.yaml), every pod's nameserver."""
MAX_NODES = 9
"""Node N's interface is 10.244.0.1N: nine fit below the bridge's other addresses."""
ZONES = ("zone-a", "zone-b", "zone-c")
"""The nodes' ``topology.kubernetes.io/zone``, in turn: three nodes, three zones."""
SYSTEM_POOL, JOBS_POOL = "pool.kappa.dev/system", "pool.kappa.dev/jobs"
"""Node labels (``"true"``): where the cluster's own services run, and where jobs run."""


class NodeError(RuntimeError):
    pass


SOCKETS = (
    "containerd/containerd.sock.ttrpc",
    "kubelet/root/device-plugins/kubelet.sock",
    "kubelet/root/pod-resources/kubelet.sock",
)
"""The unix sockets containerd and the kubelet make under a node's directory."""
SOCKET_PATH_MAX = 104
"""containerd's bound on a socket's path (Linux's sun_path holds 107 bytes and a NUL)."""


def socket_path_too_long(workdir: Path) -> str | None:
    """Why a node cannot start in ``workdir``, when its sockets' paths would be too long (else
    None): containerd then exits at once and the start waits for it in vain. Pure."""
    longest = max((workdir / socket for socket in SOCKETS), key=lambda p: len(os.fsencode(p)))
    length = len(os.fsencode(longest))
    if length <= SOCKET_PATH_MAX:
        return None
    return (
        f"{workdir} is too long for the node's unix sockets: {longest} would be {length} bytes, "
        f"at most {SOCKET_PATH_MAX} (shorten the directory by {length - SOCKET_PATH_MAX} characters)"
    )


@dataclass(frozen=True)
class NodeAddress:
    """Node ``index``'s names and addresses (1-based), all derived from its index. Pure."""

    index: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_NODES:
            raise NodeError(f"node {self.index}: the local cluster has 1 to {MAX_NODES} nodes")

    @property
    def name(self) -> str:
        """The Node object's name, its network namespace's and its cgroup's."""
        return f"kappa-node-{self.index}"

    @property
    def veth(self) -> str:
        """Its interface's other end, on the machine's bridge (at most 15 characters)."""
        return f"kappa-n{self.index}"

    @property
    def ip(self) -> str:
        return f"10.244.0.1{self.index}"

    @property
    def pods(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def pods_gateway(self) -> str:
        return f"10.244.{self.index}.1"

    @property
    def zone(self) -> str:
        return ZONES[(self.index - 1) % len(ZONES)]

    def labels(self, count: int) -> dict[str, str]:
        """Its zone, and its pool: node 1 runs the cluster's own services (``SYSTEM_POOL``: the
        operators, CoreDNS), the others the jobs (``JOBS_POOL``); one node runs both. A test
        then loses a node of jobs without losing the operators with it (issue 62's)."""
        pools = [SYSTEM_POOL] if self.index == 1 else []
        if self.index > 1 or count == 1:
            pools.append(JOBS_POOL)
        return {"topology.kubernetes.io/zone": self.zone, **{pool: "true" for pool in pools}}

    @property
    def directory(self) -> str:
        """Its directory under the cluster's node directory (short: the sockets' bound)."""
        return f"n{self.index}"


def routes_of(node: NodeAddress, count: int) -> list[tuple[str, str]]:
    """(destination, gateway) of each route node ``node`` holds for the others' pod ranges: the
    host routes of a VPC. Pure."""
    return [(other.pods, other.ip) for other in map(NodeAddress, range(1, count + 1)) if other != node]
