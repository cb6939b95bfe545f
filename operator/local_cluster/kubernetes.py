"""The local cluster's Kubernetes (issue 40; several nodes, issue 59): the control plane of
tests/cluster (etcd, kube-apiserver, kube-controller-manager) listening on the machine's bridge
(``kappa0``, 10.244.0.1), kube-scheduler, CoreDNS, and ``N`` nodes (``node.py``), each a
network namespace of its own with its own containerd, kubelet and kube-proxy, as a cloud's VMs
would be: pods spread over them, reach each other across nodes, and a node can be lost.

Needs root. What the machine lacks is said, not skipped: the parts are installed by
``cluster/build.sh node``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kappa_operator.local_cluster.addresses import GATEWAY, MAX_NODES, NodeAddress, NodeError, socket_path_too_long
from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane, eventually, spawn
from kappa_operator.local_cluster.network import bridge
from kappa_operator.local_cluster.node import Node, missing_parts
from kappa_operator.local_cluster.rest import kubeconfig, path_of
from kappa_operator.local_cluster.sweep import container_processes
from kappa_operator.local_cluster.system_images import busybox_image, coredns_image, pause_image, small_archive


def node_count_refused(count: int) -> str | None:
    """Why ``count`` nodes cannot run here (else None). Pure."""
    if 1 <= count <= MAX_NODES:
        return None
    return f"--nodes {count}: the local cluster runs 1 to {MAX_NODES} nodes (its addresses: 10.244.0.11-19)"


@dataclass
class Kubernetes:
    plane: ControlPlane
    workdir: Path
    bin_dir: Path
    nodes: list[Node] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    small: list[Path] = field(default_factory=list)
    """The archives every node starts with (pause, busybox, CoreDNS)."""

    @classmethod
    def start(cls, workdir: Path, bin_dir: Path, nodes: int = 1, coredns: Path | None = None) -> Kubernetes:
        """The control plane, then the nodes side by side, the scheduler, and CoreDNS once
        every node is Ready; whatever started is stopped again if anything fails."""
        if refused := node_count_refused(nodes):
            raise NodeError(refused)
        if missing := missing_parts(bin_dir):
            raise NodeError(f"missing for the nodes: {', '.join(missing)}; run `bash cluster/build.sh node` (as root)")
        if os.geteuid() != 0:
            raise NodeError("a kubelet runs as root: run the node tests as root")
        addresses = [NodeAddress(i) for i in range(1, nodes + 1)]
        if too_long := socket_path_too_long(workdir.absolute() / addresses[-1].directory):
            raise NodeError(too_long)
        workdir.mkdir(parents=True, exist_ok=True)
        bridge()
        plane = ControlPlane.start(
            workdir / "control-plane", bin_dir, address=GATEWAY, nodes=[a.name for a in addresses]
        )
        kube = cls(plane, workdir, bin_dir)
        try:
            small = [small_archive(pause_image(workdir), workdir), small_archive(busybox_image(), workdir)]
            if coredns is not None:
                small.append(small_archive(coredns_image(coredns), workdir))
            kube.small = small
            with ThreadPoolExecutor(max_workers=nodes) as pool:
                starting = [
                    pool.submit(Node.start, a, plane, workdir / a.directory, bin_dir, nodes, small) for a in addresses
                ]
            kube.nodes = [f.result() for f in starting if f.exception() is None]
            failed = [f.exception() for f in starting if f.exception() is not None]
            if failed:
                raise failed[0]  # type: ignore[misc]
            kube._scheduler()
            eventually(kube.ready, f"{nodes} nodes Ready", timeout=90, every=1)
            if coredns is not None:
                kube._dns()
        except BaseException:
            kube.stop()
            raise
        return kube

    def _scheduler(self) -> None:
        kc = self.workdir / "scheduler.kubeconfig"
        kc.write_text(yaml.safe_dump(kubeconfig(self.plane.server, self.plane.ca, self.plane.admin_token, "admin")))
        self.procs.append(
            spawn(
                self.workdir,
                "kube-scheduler",
                [
                    str(self.bin_dir / "kube-scheduler"),
                    f"--kubeconfig={kc}",
                    f"--authentication-kubeconfig={kc}",
                    f"--authorization-kubeconfig={kc}",
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "--secure-port=0",
                ],
            )
        )

    def _dns(self) -> None:
        """CoreDNS as a Deployment in kube-system behind the ``DNS`` Service; waits until it
        answers (its readiness probe)."""
        self.plane.apply_manifests(
            list(yaml.safe_load_all((ROOT / "cluster" / "coredns" / "coredns.yaml").read_text()))
        )
        eventually(lambda: self.deployment_ready("kube-system", "coredns"), "CoreDNS ready", timeout=120, every=1)

    # --- what runs on it ----------------------------------------------------------------------

    def load_archive(self, archive: Path, pool: str | None = None) -> None:
        """An image archive into the containerd of every node of ``pool`` (a label of
        ``addresses.NodeAddress.labels``; None: every node), side by side: each node keeps its own
        images, as each VM of a cluster pulls its own, and only those its pods run (the Spark
        image on the nodes of jobs, the operators' on the node of the cluster's services)."""
        nodes = [n for n in self.nodes if pool is None or pool in n.address.labels(n.count)]
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as threads:
            for done in [threads.submit(node.load_archive, archive) for node in nodes]:
                done.result()

    def tag_image(self, source: str, target: str, pool: str | None = None) -> None:
        """``source`` also named ``target`` on every node of ``pool`` (None: every node)."""
        for node in [n for n in self.nodes if pool is None or pool in n.address.labels(n.count)]:
            node.tag_image(source, target)

    def lose(self, name: str) -> Node:
        """Node ``name`` gone at once, as a preempted VM goes (``Node.lose``); returned."""
        node = self.node(name)
        node.lose()
        return node

    def replace(self, name: str) -> Node:
        """A lost node's VM replaced: a new node of the same name and address, empty (its
        containerd's images loaded again), registering with the control plane as the old one's
        kubelet did; Ready when returned."""
        old = self.node(name)
        old.stop()  # what the loss left (nothing, normally), and its directory's images
        new = Node.start(old.address, self.plane, old.workdir, self.bin_dir, old.count, self.small)
        self.nodes[self.nodes.index(old)] = new
        for archive in old.archives:
            new.load_archive(archive)
        eventually(new.ready, f"{name} Ready again", timeout=90, every=1)
        return new

    def node(self, name: str) -> Node:
        found = [n for n in self.nodes if n.name == name]
        if not found:
            raise NodeError(f"no node {name}: the nodes are {', '.join(n.name for n in self.nodes)}")
        return found[0]

    def ready(self) -> bool:
        return all(node.ready() for node in self.nodes)

    def deployment_ready(self, namespace: str, name: str) -> bool:
        answer = self.plane.admin.get(path_of("Deployment", namespace, name))
        if answer.status != 200:
            return False
        ready = (answer.body.get("status") or {}).get("readyReplicas") or 0
        return ready > 0 and ready == answer.body["spec"].get("replicas", 1)

    def container_of(self, namespace: str, pod: str) -> tuple[str, str]:
        """(node name, containerd id) of ``pod``'s first container."""
        found = self.plane.admin.get(path_of("Pod", namespace, pod)).body
        container = str(found["status"]["containerStatuses"][0]["containerID"]).split("://", 1)[1]
        return str(found["spec"]["nodeName"]), container

    def process_memory(self, namespace: str, pod: str) -> tuple[int, int]:
        """(resident, peak resident) bytes of ``pod``'s first container's main process, from
        /proc on this machine (a container's processes are the host's): the peak is the
        kernel's high-water mark since the process started, nothing sampled can miss it."""
        node, container = self.container_of(namespace, pod)
        pid = self.node(node).process_of(container)
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        kib = {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
        return kib["VmRSS"], kib["VmHWM"]

    def pod_processes(self, namespace: str, pod: str) -> list[int]:
        """Every host pid of ``pod``'s first container: the processes in its cgroups, cgroup v1's or
        v2's (a driver's container runs tini, spark-submit's JVM, the Python driver and its
        workers)."""
        return container_processes({self.container_of(namespace, pod)[1]})

    def signal_pod(self, namespace: str, pod: str, sig: signal.Signals) -> list[int]:
        """``sig`` to every process of ``pod``'s first container (SIGSTOP: the pod frozen as a
        hung process is, its container still running); the pids signalled."""
        pids = self.pod_processes(namespace, pod)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def pod_log(self, namespace: str, name: str) -> str:
        answer = self.plane.admin.get(path_of("Pod", namespace, name) + "/log")
        if answer.status != 200:
            raise NodeError(f"log of {namespace}/{name}: {answer.status} {answer.body}")
        return str(answer.body)

    def pods_by_node(self, namespace: str, selector: str) -> dict[str, list[str]]:
        """The names of the pods ``selector`` picks, by the node each was placed on."""
        path = path_of("Pod", namespace) + f"?labelSelector={selector}"
        out: dict[str, list[str]] = {}
        for item in self.plane.admin.get(path).body.get("items") or []:
            out.setdefault(item["spec"].get("nodeName") or "", []).append(item["metadata"]["name"])
        return out

    # --- end ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Every node stopped side by side (``Node.stop``), then the scheduler and the control
        plane; the bridge stays for the next start."""
        if self.nodes:
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                list(pool.map(lambda n: n.stop(), self.nodes))
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        self.plane.stop()
