"""One Kubernetes node of the local cluster, as a VM of a cloud is one (issue 59): a network
namespace of its own (``kappa-node-N``) with one interface on the machine's bridge, and in it
its own containerd (Debian's, with runc and the CNI bridge plugin), kubelet and kube-proxy
(built from their module by cluster/build.sh). Its pods get addresses from its own range
(``10.244.N.0/24``) on a bridge inside the node; the machine routes each node's range to that
node, and the nodes route each other's, as a cloud's VPC routes do: a pod reaches every other
pod, the Services (through its node's kube-proxy) and the machine's bridge address, where the
control plane, the S3 API, the catalog's database and the broker listen; nothing else.

What a node is made of is the machine's too (processes, cgroups, mounts), so a node can be
taken away at once, as a preempted VM goes (``Node.lose``): its processes killed, its network
gone, no graceful stop; the control plane finds it NotReady and evicts its pods as it does for
any node.

Images come from no registry: each is an OCI archive written here (``oci.py``) and imported
into the node's containerd, the pod sandbox's pause process included (``images/pause/pause.c``,
built static with gcc). Needs root (a kubelet, network namespaces, mounts); the parts are
installed by ``cluster/build.sh node``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kappa_operator.local_cluster.addresses import BRIDGE, DNS, PODS, SERVICES, NodeAddress, NodeError, routes_of
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually, free_port, spawn
from kappa_operator.local_cluster.network import in_netns, run
from kappa_operator.local_cluster.rest import kubeconfig, path_of
from kappa_operator.local_cluster.sweep import cgroup_hierarchies, sweep_node
from kappa_operator.local_cluster.system_images import PAUSE

CNI_BIN = Path("/usr/lib/cni")


def missing_parts(bin_dir: Path) -> list[str]:
    missing = [t for t in ("containerd", "runc", "ctr", "gcc", "nsenter") if shutil.which(t) is None]
    missing += [str(CNI_BIN / p) for p in ("bridge", "host-local", "loopback") if not (CNI_BIN / p).exists()]
    missing += [str(bin_dir / b) for b in ("kubelet", "kube-scheduler", "kube-proxy") if not (bin_dir / b).exists()]
    return missing


@dataclass
class Node:
    """One node: its network namespace, containerd, kubelet and kube-proxy."""

    address: NodeAddress
    plane: ControlPlane
    workdir: Path
    bin_dir: Path
    count: int
    """How many nodes the cluster has (the routes to the others' pods)."""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    archives: list[Path] = field(default_factory=list)
    """The image archives loaded since its start (``load_archive``): what its replacement gets."""

    @property
    def name(self) -> str:
        return self.address.name

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @classmethod
    def start(
        cls, address: NodeAddress, plane: ControlPlane, workdir: Path, bin_dir: Path, count: int, small: list[Path]
    ) -> Node:
        """Started with the ``small`` images (the pause image, busybox, CoreDNS) in its
        containerd; its kubelet registers it, and the scheduler places nothing on it until
        the node lifecycle controller finds it Ready (``ready``)."""
        workdir.mkdir(parents=True, exist_ok=True)
        node = cls(address, plane, workdir, bin_dir, count)
        try:
            node._network()
            node._cgroups()
            node._containerd()
            for archive in small:
                node.load_small(archive)
            node._kubelet()
            node._proxy()
        except BaseException:
            node.stop()
            raise
        return node

    # --- parts ------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        """A part of the node, in its network namespace."""
        netns = ["nsenter", f"--net=/var/run/netns/{self.name}", "--"]
        self.procs.append(spawn(self.workdir, name, [*netns, *argv]))

    def _network(self) -> None:
        """Its namespace, its interface on the machine's bridge, and its routes: the machine's
        to this node's pods, this node's to the others' (a VPC's routes). Forwarding on, as a
        node routes its pods' traffic."""
        a = self.address
        if run("ip", "netns", "list", check=False).stdout.split().count(a.name):
            raise NodeError(f"network namespace {a.name} exists: `kappa cluster down` first")
        run("ip", "netns", "add", a.name)
        run("ip", "link", "add", a.veth, "type", "veth", "peer", "name", "eth0", "netns", a.name)
        run("ip", "link", "set", a.veth, "master", BRIDGE, "up")
        in_netns(a.name, "ip", "link", "set", "lo", "up")
        in_netns(a.name, "ip", "addr", "add", f"{a.ip}/24", "dev", "eth0")
        in_netns(a.name, "ip", "link", "set", "eth0", "up")
        for dst, via in routes_of(a, self.count):
            in_netns(a.name, "ip", "route", "replace", dst, "via", via)
        in_netns(a.name, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        run("ip", "route", "replace", a.pods, "via", a.ip)

    def _cgroups(self) -> None:
        """The kubelet's cgroup root (``/kappa-node-N`` in each hierarchy of cgroup v1), so that
        the nodes' kubelets each manage their own pods' cgroups; cpuset's given the machine's."""
        for hierarchy in cgroup_hierarchies():
            path = hierarchy / self.name
            path.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (path / knob).read_text().strip():
                        (path / knob).write_text((hierarchy / knob).read_text())

    def _containerd(self) -> None:
        root = self.workdir / "containerd"
        cni = self.workdir / "cni"
        cni.mkdir(parents=True, exist_ok=True)
        (cni / "10-kappa.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "kappa",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "kappa-pods",
                            "isGateway": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": self.address.pods, "gateway": self.address.pods_gateway}]],
                                "routes": [{"dst": PODS}, {"dst": SERVICES}],
                                "dataDir": str(self.workdir / "cni-ipam"),
                            },
                        },
                        {"type": "loopback"},
                    ],
                }
            )
        )
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        config.write_text(
            "\n".join(
                [
                    "version = 2",
                    f'root = "{root / "root"}"',
                    f'state = "{root / "state"}"',
                    "[grpc]",
                    f'  address = "{self.socket}"',
                    "[plugins.'io.containerd.grpc.v1.cri']",
                    f'  sandbox_image = "{PAUSE}"',
                    # the root shell lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj
                    "  restrict_oom_score_adj = true",
                    # the pods' network namespaces under this node's state, not the machine's
                    # /var/run/netns: a lost node's go with it
                    "  netns_mounts_under_state_dir = true",
                    "[plugins.'io.containerd.grpc.v1.cri'.cni]",
                    f'  bin_dir = "{CNI_BIN}"',
                    f'  conf_dir = "{cni}"',
                    "[plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes.runc]",
                    '  runtime_type = "io.containerd.runc.v2"',
                    "",
                ]
            )
        )
        self._spawn("containerd", ["containerd", "--config", str(config)])
        eventually(lambda: self.ctr("version", check=False).returncode == 0, f"{self.name}'s containerd", timeout=30)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, check=check)

    def load_archive(self, archive: Path) -> None:
        """An OCI archive (``images.py``) into the node's containerd, under the name its index
        gives (``io.containerd.image.name``), unpacked for the overlayfs snapshotter so a pod
        starts on it at once. The archives' layers are zstd (``images.EXPORT_COMPRESSION``:
        of gzip, zstd and none, the fastest to import here); layers another image already
        brought are not unpacked again.

        No ``--index-name``: it takes a value (the name to keep the index under), and given
        none here it named an extra image ``--all-platforms``."""
        self.ctr("images", "import", str(archive))
        self.archives.append(archive)

    def tag_image(self, source: str, target: str) -> None:
        """Another name for an image the node has: what a registry gives a new tag of a build
        (a Deployment's image changed to it rolls its pods as for any new image)."""
        self.ctr("images", "tag", "--force", source, target)

    def load_small(self, archive: Path) -> None:
        """An archive of ``small_archive``'s: its content first, then unpacked."""
        self.ctr("images", "import", "--no-unpack", str(archive))
        self.ctr("images", "import", str(archive))

    def _kubelet(self) -> None:
        kubelet = self.workdir / "kubelet"
        kubelet.mkdir(parents=True, exist_ok=True)
        conf = kubelet / "config.yaml"
        conf.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "address": self.address.ip,
                    "port": 10250,
                    "healthzBindAddress": "127.0.0.1",
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": f"/{self.name}",
                    "containerRuntimeEndpoint": f"unix://{self.socket}",
                    "podLogsDir": str(self.workdir / "pod-logs"),
                    "failSwapOn": False,
                    "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
                    "authorization": {"mode": "AlwaysAllow"},
                    "clusterDomain": "cluster.local",
                    "clusterDNS": [DNS],
                    "resolvConf": "",
                    "evictionHard": {"memory.available": "100Mi"},
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "serializeImagePulls": False,
                    "localStorageCapacityIsolation": False,
                    "protectKernelDefaults": False,
                }
            )
        )
        kc = kubelet / "kubeconfig"
        user = f"system:node:{self.name}"
        kc.write_text(
            yaml.safe_dump(kubeconfig(self.plane.server, self.plane.ca, self.plane.node_token(self.name), user))
        )
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={conf}",
                f"--kubeconfig={kc}",
                f"--root-dir={kubelet / 'root'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.address.ip}",
                "--node-labels=" + ",".join(f"{k}={v}" for k, v in self.address.labels(self.count).items()),
                f"--cert-dir={kubelet / 'pki'}",
                "--v=1",
            ],
        )

    def _proxy(self) -> None:
        """kube-proxy, iptables mode, in the node's namespace: the Services' cluster IPs to their
        endpoints, on whichever node they run, for this node's pods."""
        conf = self.workdir / "kube-proxy.yaml"
        kc = self.workdir / "kube-proxy.kubeconfig"
        kc.write_text(yaml.safe_dump(kubeconfig(self.plane.server, self.plane.ca, self.plane.admin_token, "admin")))
        conf.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(kc)},
                    "mode": "iptables",
                    "clusterCIDR": PODS,
                    "hostnameOverride": self.name,
                    "bindAddress": self.address.ip,
                    "healthzBindAddress": f"127.0.0.1:{free_port()}",
                    "metricsBindAddress": f"127.0.0.1:{free_port()}",
                    # the root shell may not raise kernel limits: leave conntrack's as they are
                    "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
                }
            )
        )
        self._spawn("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={conf}"])

    def ready(self) -> bool:
        answer = self.plane.admin.get(path_of("Node", name=self.name))
        if answer.status != 200:
            return False
        conds = {c["type"]: c["status"] for c in answer.body.get("status", {}).get("conditions") or []}
        # Ready, and its not-ready taint gone (the node lifecycle controller removes it): a pod
        # created before that is unschedulable, and waits for the scheduler's next full retry
        return conds.get("Ready") == "True" and not answer.body.get("spec", {}).get("taints")

    def process_of(self, container_id: str) -> int:
        """The host pid of a container's main process, from this node's containerd."""
        tasks = self.ctr("tasks", "ls").stdout.splitlines()[1:]
        return next(int(t.split()[1]) for t in tasks if t.split() and t.split()[0] == container_id)

    # --- end --------------------------------------------------------------------------------

    def lose(self) -> None:
        """Gone at once, as a preempted VM goes: every process of the node killed (SIGKILL,
        the containers' too), its mounts and network gone; no graceful stop, nothing told to
        the control plane. The Node object stays, to go NotReady as its kubelet stops posting."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.procs.clear()
        sweep_node(self.workdir, self.address)

    def stop(self) -> None:
        """Every process of the node ended (its containers' too), its mounts undone, its network
        and cgroups removed, containerd's images and snapshots deleted (GBs: the next start
        imports the archives again); its logs left."""
        for proc in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        sweep_node(self.workdir, self.address)
        shutil.rmtree(self.workdir / "containerd" / "root", ignore_errors=True)
