"""A one-node Kubernetes cluster on this machine, for real (issue 40, first part): the control
plane of tests/cluster (etcd, kube-apiserver, kube-controller-manager) listening on the node's
bridge, kube-scheduler, and a kubelet running pods through containerd and runc (Debian's) with
the CNI bridge plugin (Debian's). Pods get addresses on a bridge inside this machine
(``kappa0``, 10.244.0.0/24) with no route or NAT out of it; the API server and the kubelet listen
on the bridge's address, never on an outside interface.

Images come from no registry: each is an OCI archive written here (``operator/local_cluster/oci.py``) and
imported into containerd, the pod sandbox's pause process included (``images/pause/pause.c``,
built static with gcc).

Needs root (a kubelet, network namespaces, mounts). What the machine lacks is said, not
skipped: the parts are installed by ``cluster/build.sh node``.
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

from kappa_operator.local_cluster.control_plane import (
    ROOT,
    ControlPlane,
    eventually,
    free_port,
    kubeconfig,
    path_of,
    spawn,
)
from kappa_operator.local_cluster.oci import Image, ImageFile, write_archive

NODE = "kappa-node"
BRIDGE, GATEWAY, SUBNET = "kappa0", "10.244.0.1", "10.244.0.0/24"
SERVICES = "10.96.0.0/16"
DNS = "10.96.0.10"
"""The cluster DNS Service's address (cluster/coredns/coredns.yaml), every pod's nameserver."""
"""The control plane's --service-cluster-ip-range: pods route it to the node, where kube-proxy's
rules take each Service's address to its endpoints."""
PAUSE = "kappa.dev/pause:1"
COREDNS = "kappa.dev/coredns:1.12.4"
BUSYBOX = "kappa.dev/busybox:1"
CNI_BIN = Path("/usr/lib/cni")


class NodeError(RuntimeError):
    pass


SOCKETS = (
    "containerd/containerd.sock.ttrpc",
    "kubelet/root/device-plugins/kubelet.sock",
    "kubelet/root/pod-resources/kubelet.sock",
)
"""The unix sockets containerd and the kubelet make under the node's directory."""
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


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def bridge() -> None:
    """The pods' bridge with the node's address on it (the CNI bridge plugin then only adds
    each pod's veth to it). No masquerade, no default route in a pod (the plugin's
    isDefaultGateway is off), and a FORWARD rule dropping what the pods send off the bridge:
    pods reach this machine's bridge address and each other, nothing else."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
    addrs = run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f"{GATEWAY}/24" not in addrs:
        run("ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")
    # and nothing from the pods is forwarded anywhere but the bridge, whatever routes appear
    out = ("FORWARD", "-s", SUBNET, "!", "-d", SUBNET, "-j", "DROP")
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


@dataclass
class Node:
    plane: ControlPlane
    workdir: Path
    bin_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @classmethod
    def start(cls, workdir: Path, bin_dir: Path, coredns: Path | None = None) -> Node:
        missing = [t for t in ("containerd", "runc", "ctr", "gcc") if shutil.which(t) is None]
        missing += [str(CNI_BIN / p) for p in ("bridge", "host-local", "loopback") if not (CNI_BIN / p).exists()]
        missing += [str(bin_dir / b) for b in ("kubelet", "kube-scheduler") if not (bin_dir / b).exists()]
        if missing:
            raise NodeError(f"missing for the node: {', '.join(missing)}; run `bash cluster/build.sh node` (as root)")
        if os.geteuid() != 0:
            raise NodeError("a kubelet runs as root: run the node tests as root")
        if too_long := socket_path_too_long(workdir.absolute()):
            raise NodeError(too_long)
        workdir.mkdir(parents=True, exist_ok=True)
        bridge()
        plane = ControlPlane.start(workdir / "control-plane", bin_dir, address=GATEWAY, node=NODE)
        node = cls(plane, workdir, bin_dir)
        try:
            node._containerd()
            for image in (pause_image(workdir), busybox_image()):
                node.load(image)
            node._kubelet()
            node._scheduler()
            node._proxy()
            eventually(node.ready, "the node Ready", timeout=90, every=1)
            if coredns is not None:
                node._dns(coredns)
        except BaseException:
            node.stop()
            raise
        return node

    # --- parts ------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.procs.append(spawn(self.workdir, name, argv))

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
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                                "routes": [{"dst": SERVICES}],
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
        eventually(lambda: self.ctr("version", check=False).returncode == 0, "containerd", timeout=30)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run("ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args, check=check)

    def load_archive(self, archive: Path) -> None:
        """An OCI archive (``operator/local_cluster/images.py``) into the node's containerd, under the name
        its index gives (``io.containerd.image.name``, a full reference), unpacked for the
        overlayfs snapshotter so a pod starts on it at once. The archives' layers are zstd
        (``images.EXPORT_COMPRESSION``: of gzip, zstd and none, the fastest to import here);
        layers another image already brought (the Spark image's first four, in the
        spark-operator's) are not unpacked again.

        No ``--index-name``: it takes a value (the name to keep the index under), and given
        none here it named an extra image ``--all-platforms``."""
        self.ctr("images", "import", str(archive))

    def load(self, image: Image) -> None:
        archive = self.workdir / f"{image.name.replace('/', '_').replace(':', '_')}.tar"
        write_archive(image, archive)
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
                    "address": GATEWAY,
                    "port": 10250,
                    "healthzBindAddress": "127.0.0.1",
                    "cgroupDriver": "cgroupfs",
                    "containerRuntimeEndpoint": f"unix://{self.socket}",
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
        user = f"system:node:{NODE}"
        kc.write_text(
            yaml.safe_dump(kubeconfig(self.plane.server, self.plane.ca, f"{self.plane.admin_token}-node", user))
        )
        self._spawn(
            "kubelet",
            [
                str(self.bin_dir / "kubelet"),
                f"--config={conf}",
                f"--kubeconfig={kc}",
                f"--root-dir={kubelet / 'root'}",
                f"--hostname-override={NODE}",
                f"--node-ip={GATEWAY}",
                f"--cert-dir={kubelet / 'pki'}",
                "--v=1",
            ],
        )

    def _scheduler(self) -> None:
        kc = self.workdir / "scheduler.kubeconfig"
        kc.write_text(yaml.safe_dump(kubeconfig(self.plane.server, self.plane.ca, self.plane.admin_token, "admin")))
        self._spawn(
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

    def _proxy(self) -> None:
        """kube-proxy, iptables mode: Services' cluster IPs to their endpoints (the API server's
        own `kubernetes` Service among them)."""
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
                    "clusterCIDR": SUBNET,
                    "hostnameOverride": NODE,
                    "bindAddress": GATEWAY,
                    "healthzBindAddress": f"127.0.0.1:{free_port()}",
                    "metricsBindAddress": f"127.0.0.1:{free_port()}",
                    # the root shell may not raise kernel limits: leave conntrack's as they are
                    "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
                }
            )
        )
        self._spawn("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={conf}"])

    def _dns(self, binary: Path) -> None:
        """CoreDNS as a Deployment in kube-system behind the ``DNS`` Service, from an image of
        its static binary; waits until it answers (its readiness probe)."""
        self.load(Image(COREDNS, (ImageFile("coredns", binary.read_bytes()),), entrypoint=("/coredns",)))
        self.plane.apply_manifests(
            list(yaml.safe_load_all((ROOT / "cluster" / "coredns" / "coredns.yaml").read_text()))
        )
        eventually(lambda: self.deployment_ready("kube-system", "coredns"), "CoreDNS ready", timeout=120, every=1)

    def deployment_ready(self, namespace: str, name: str) -> bool:
        answer = self.plane.admin.get(path_of("Deployment", namespace, name))
        if answer.status != 200:
            return False
        ready = (answer.body.get("status") or {}).get("readyReplicas") or 0
        return ready > 0 and ready == answer.body["spec"].get("replicas", 1)

    def ready(self) -> bool:
        answer = self.plane.admin.get(path_of("Node", name=NODE))
        if answer.status != 200:
            return False
        conds = {c["type"]: c["status"] for c in answer.body.get("status", {}).get("conditions") or []}
        # Ready, and its not-ready taint gone (the node lifecycle controller removes it): a pod
        # created before that is unschedulable, and waits for the scheduler's next full retry
        return conds.get("Ready") == "True" and not answer.body.get("spec", {}).get("taints")

    def process_memory(self, namespace: str, pod: str) -> tuple[int, int]:
        """(resident, peak resident) bytes of ``pod``'s first container's main process, from
        /proc on this machine (a container's processes are the host's): the peak is the
        kernel's high-water mark since the process started, nothing sampled can miss it."""
        found = self.plane.admin.get(path_of("Pod", namespace, pod)).body
        container = str(found["status"]["containerStatuses"][0]["containerID"]).split("://", 1)[1]
        tasks = self.ctr("tasks", "ls").stdout.splitlines()[1:]
        pid = next(int(t.split()[1]) for t in tasks if t.split() and t.split()[0] == container)
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        kib = {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
        return kib["VmRSS"], kib["VmHWM"]

    def pod_log(self, namespace: str, name: str) -> str:
        answer = self.plane.admin.get(path_of("Pod", namespace, name) + "/log")
        if answer.status != 200:
            raise NodeError(f"log of {namespace}/{name}: {answer.status} {answer.body}")
        return str(answer.body)

    # --- end --------------------------------------------------------------------------------

    def stop(self) -> None:
        """Every process of the node (the containers' shims too) ended, its mounts undone, its
        logs left; containerd's images and snapshots removed (GBs: the next start imports the
        archives again); the bridge stays for the next start."""
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
        sweep(self.workdir, self.bin_dir)
        shutil.rmtree(self.workdir / "containerd" / "root", ignore_errors=True)
        self.plane.stop()


def sweep(workdir: Path, bin_dir: Path) -> None:
    """What a node's processes leave behind, gone: the containers' shims, their containers'
    processes and anything still running from ``workdir``, its mounts, kube-proxy's iptables
    chains, the pods' network namespaces. Also after a supervisor that died without stopping
    its node (`kappa cluster down` after a crash)."""
    ids = container_ids(workdir)  # before the shims go: their bundles name the containers
    for pid in run("pgrep", "-f", f"containerd-shim.*-address {workdir}", check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid), signal.SIGKILL)
    for pid in run("pgrep", "-f", str(workdir), check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            if int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
    for _ in range(3):  # again, for what a container forked while the last pass killed
        left = container_processes(ids)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not left:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(str(workdir))), key=len, reverse=True):
        run("umount", "-l", point, check=False)
    run(str(bin_dir / "kube-proxy"), "--cleanup", check=False)  # its iptables chains go too
    for ns in run("ip", "netns", "list", check=False).stdout.splitlines():
        if ns.startswith("cni-"):
            run("ip", "netns", "delete", ns.split()[0], check=False)


def container_ids(workdir: Path) -> set[str]:
    """The ids of every container and pod sandbox this node's containerd ran: each task's
    bundle directory under containerd's state is named by its id, and stays there when its
    shim is killed."""
    tasks = workdir / "containerd" / "state" / "io.containerd.runtime.v2.task"
    return {bundle.name for bundle in tasks.glob("*/*") if bundle.is_dir()}


def in_containers(cgroups: str, ids: set[str]) -> bool:
    """Whether a process whose ``/proc/<pid>/cgroup`` reads ``cgroups`` runs in one of the
    containers ``ids``: the kubelet (cgroupfs driver) puts each container in a cgroup named by
    its id, under its pod's (``/kubepods/<qos>/pod<uid>/<id>``), in every hierarchy."""
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
