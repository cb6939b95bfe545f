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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.local_cluster.control_plane import ROOT, ControlPlane, eventually, free_port, spawn
from kappa_operator.local_cluster.oci import Image, ImageFile, write_archive
from kappa_operator.local_cluster.rest import kubeconfig, path_of

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
PAUSE = "kappa.dev/pause:1"
COREDNS = "kappa.dev/coredns:1.12.4"
BUSYBOX = "kappa.dev/busybox:1"
CNI_BIN = Path("/usr/lib/cni")
MAX_NODES = 9
"""Node N's interface is 10.244.0.1N: nine fit below the bridge's other addresses."""
ZONES = ("zone-a", "zone-b", "zone-c")
"""The nodes' ``topology.kubernetes.io/zone``, in turn: three nodes, three zones."""
CGROUP_HIERARCHIES = Path("/sys/fs/cgroup")
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


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def in_netns(netns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``argv`` in the node's network namespace, in the machine's mounts (nsenter --net: `ip
    netns exec` would give it a mount namespace of its own, where a kubelet's mounts are lost
    to containerd)."""
    return run("nsenter", f"--net=/var/run/netns/{netns}", "--", *argv, check=check)


def bridge() -> None:
    """The machine's bridge with its address, before the storage and the broker listen on it.
    A FORWARD rule drops what pods send off the cluster's ranges, whatever routes appear: pods
    reach the machine's bridge address, each other and the Services, nothing else."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{GATEWAY}/24" not in addrs:
        run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    out = ("FORWARD", "-s", PODS, "!", "-d", PODS, "-j", "DROP")
    if run("iptables", "-C", *out, check=False).returncode != 0:
        run("iptables", "-I", *out)


def pause_image(workdir: Path) -> Image:
    binary = workdir / "pause"
    source = ROOT / "images" / "pause" / "pause.c"
    run("gcc", "-static", "-O2", "-o", str(binary), str(source))
    return Image(PAUSE, (ImageFile("pause", binary.read_bytes()),), entrypoint=("/pause",))


def busybox_image() -> Image:
    """Debian's static busybox and the applets a test shell needs."""
    data = Path("/bin/busybox").read_bytes()
    applets = ("sh", "echo", "cat", "sleep", "hostname", "wget", "nslookup", "ls", "env", "ip", "mkdir", "nc")
    files = (ImageFile("bin/busybox", data), *(ImageFile(f"bin/{a}", link="busybox") for a in applets))
    return Image(BUSYBOX, files, entrypoint=("/bin/sh",))


def coredns_image(binary: Path) -> Image:
    return Image(COREDNS, (ImageFile("coredns", binary.read_bytes()),), entrypoint=("/coredns",))


def small_archive(image: Image, workdir: Path) -> Path:
    """``image`` as an OCI archive in ``workdir``, for every node to import."""
    archive = workdir / f"{image.name.replace('/', '_').replace(':', '_')}.tar"
    write_archive(image, archive)
    return archive


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


def cgroup_hierarchies() -> list[Path]:
    """cgroup v1's hierarchies the kubelet uses (cgroupfs driver), or v2's one tree."""
    if (CGROUP_HIERARCHIES / "cgroup.controllers").exists():
        return [CGROUP_HIERARCHIES]
    return [p for p in CGROUP_HIERARCHIES.iterdir() if p.is_dir() and not p.is_symlink() and p.name not in ("unified",)]


def remove_cgroups(name: str) -> None:
    """A node's cgroup tree gone, deepest first. Its processes were killed; a cgroup whose last
    one has not been reaped yet is busy a moment longer, so each hierarchy is tried again."""
    for _ in range(10):
        left = [hierarchy / name for hierarchy in cgroup_hierarchies() if (hierarchy / name).exists()]
        for top in left:
            for path in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    path.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()
        if not any(top.exists() for top in left):
            return
        time.sleep(0.5)


def sweep_node(workdir: Path, address: NodeAddress) -> None:
    """What a node's processes leave behind, gone: its containers' shims and processes, anything
    still running from ``workdir``, its mounts, its network namespace (its pods' with it) and
    interface, the machine's route to its pods, its cgroups."""
    ids = container_ids(workdir)  # before the shims go: their bundles name the containers
    for pid in run("pgrep", "-f", f"containerd-shim.*-address {workdir}/", check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid), signal.SIGKILL)
    for pid in run("pgrep", "-f", f"{workdir}/", check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            if int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(5):  # again, for what a container forked while the last pass killed
        left = container_processes(ids)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            break
        time.sleep(0.2)
    time.sleep(0.3)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{workdir}/")), key=len, reverse=True):
        run("umount", "-l", point, check=False)
    run("ip", "netns", "delete", address.name, check=False)
    run("ip", "link", "delete", address.veth, check=False)
    run("ip", "route", "delete", address.pods, check=False)
    remove_cgroups(address.name)


def sweep(workdir: Path) -> None:
    """Every node under the cluster's node directory ``workdir`` swept (``sweep_node``), also
    after a supervisor that died without stopping its nodes (`kappa cluster down` after a
    crash)."""
    for index in range(1, MAX_NODES + 1):
        address = NodeAddress(index)
        if (workdir / address.directory).exists():
            sweep_node(workdir / address.directory, address)


def container_ids(workdir: Path) -> set[str]:
    """The ids of every container and pod sandbox the containerd of each node under ``workdir``
    (a node's directory, or the cluster's node directory) ran: each task's bundle directory
    under containerd's state is named by its id, and stays there when its shim is killed."""
    tasks = "containerd/state/io.containerd.runtime.v2.task/*/*"
    bundles = [*workdir.glob(tasks), *workdir.glob(f"n*/{tasks}")]
    return {bundle.name for bundle in bundles if bundle.is_dir()}


def in_containers(cgroups: str, ids: set[str]) -> bool:
    """Whether a process whose ``/proc/<pid>/cgroup`` reads ``cgroups`` runs in one of the
    containers ``ids``: the kubelet (cgroupfs driver) puts each container in a cgroup named by
    its id, under its pod's (``/<node>/kubepods/<qos>/pod<uid>/<id>``), in every hierarchy."""
    for line in cgroups.splitlines():
        path = line.split(":", 2)[-1].rstrip("/")
        if path.rsplit("/", 1)[-1] in ids:
            return True
    return False


def container_processes(ids: set[str]) -> list[int]:
    """The host's processes inside the containers ``ids``. Why not the shims' process groups
    alone: a container's processes run in sessions of their own, and a killed shim leaves them
    running, re-parented to init (the pause processes, CoreDNS, the operator's pod)."""
    found = []
    for proc in Path("/proc").iterdir() if ids else ():
        with contextlib.suppress(OSError):  # gone meanwhile
            if proc.name.isdigit() and in_containers((proc / "cgroup").read_text(), ids):
                found.append(int(proc.name))
    return found


def pod(namespace: str, name: str, image: str, script: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": ["/bin/sh", "-c", script]}
            ],
            **spec,
        },
    }
