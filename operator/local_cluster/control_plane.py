"""A real Kubernetes control plane on 127.0.0.1 for the tests and benchmarks (issue 27):
etcd (Debian's ``etcd-server``), kube-apiserver and kube-controller-manager built from
``k8s.io/kubernetes`` by ``cluster/build.sh`` (pinned, cached under the home directory).

Why real: the emulator the operator tests grew up on accepted CRDs that every real server
refuses (an int64 bound parsed as float64), stored nulls that CEL then tripped over, and
collected no garbage. The server is started as a cluster is run in production: RBAC, the
default admission plugins plus OwnerReferencesPermissionEnforcement, service-account tokens
signed by the server (TokenRequest), and garbage collection by the controller manager. An
audit log of every request by anyone but the administrator and the controller manager lets a
test assert that the operator, running with the chart's ServiceAccount, was never refused
(403) — a 403 is a bug in the chart.

No kubelet runs: pods are never scheduled. The Spark operator is played by the tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from kappa_operator.local.ports import free_port
from kappa_operator.local_cluster.rest import Rest, kubeconfig, namespaces_deleted, path_of, refused

ROOT = Path(__file__).resolve().parents[2]


"""The repository: the cluster is built from its cluster/, images/ and charts/."""


BUILD = ROOT / "cluster" / "build.sh"


ADMIN, CONTROLLER_MANAGER = "kappa-admin", "kappa-controller-manager"


ADMISSION = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,"
    "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota,PodSecurity,"
    "OwnerReferencesPermissionEnforcement"
)


"""kube-apiserver's default admission chain, plus OwnerReferencesPermissionEnforcement (on in
OpenShift and many hardened clusters): an ownerReference with blockOwnerDeletion needs
``update`` on the owner's finalizers, or the create is refused."""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or did not come up: the message names the log."""


@dataclass(frozen=True)
class Parts:
    """Where cluster/build.sh left the control planes and helm."""

    current: Path
    """The bin directory of the kube-apiserver the suite runs on."""
    oldest: Path
    """The bin directory of the oldest kube-apiserver the chart supports."""
    helm: Path
    spark_operator: Path
    """The Kubeflow Spark Operator's binary (the node's image of it: operator/local_cluster/images.py)."""
    coredns: Path
    spark_operator_chart: Path
    """Its Helm chart, from the same module (the one its users install)."""
    prometheus: Path
    """Prometheus with its Kubernetes discovery (``monitoring.py``)."""
    perses: Path
    """Perses's build: ``bin/perses`` and ``plugins/`` (``dashboards.py``)."""


def binaries() -> Parts:
    """The parts cluster/build.sh builds, on first use (a fresh machine: once, some minutes);
    etcd comes from Debian."""
    done = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"cluster/build.sh failed:\n{done.stderr[-4000:]}")
    parts = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Parts(**{f.name: Path(parts[f.name]) for f in dataclasses.fields(Parts)})


def etcd_binary() -> str:
    found = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    if found is None:
        raise ControlPlaneError("etcd is missing: apt-get install etcd-server (cluster/build.sh does it as root)")
    return found


NODE_CONTROLLERS = (
    ",endpointslice,endpoint,job,replicaset,deployment,disruption,nodelifecycle,taint-eviction-controller,podgc,"
    "root-ca-cert-publisher"
)


"""With nodes: what their pods need of the controller manager (Services' endpoints, the CA
ConfigMap every pod mounts, PodDisruptionBudgets' status for evictions and drains), and what it
does when a node goes: NotReady, tainted, its pods evicted (taint eviction), and the pods of a
deleted node removed (pod GC)."""


NODE_MONITOR = ("--node-monitor-period=2s",)


"""A node whose kubelet has not posted for 40 s (the grace period, Kubernetes' default) is
NotReady, looked at every 2 s (5 s by default). 20 s was tried: three kubelets on two busy
cores missed it, and nodes that were alive flapped NotReady. How long our pods stay on a
NotReady node is the operator's ``nodeLostAfter``."""


@dataclass
class ControlPlane:
    workdir: Path
    server: str
    admin_token: str
    version: str = ""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    controllers: bool = True
    """Whether a kube-controller-manager runs (garbage collection, namespace deletion)."""

    @property
    def ca(self) -> Path:
        return self.workdir / "certs" / "apiserver.crt"

    @property
    def admin(self) -> Rest:
        return Rest(self.server, self.admin_token, self.ca)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    # --- life ------------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: Path,
        bin_dir: Path,
        audit: bool = True,
        address: str = "127.0.0.1",
        nodes: Sequence[str] = (),
        controllers: bool = True,
        max_requests_inflight: int = 800,
    ) -> ControlPlane:
        """``address``: where the API server listens (the nodes reach it on the machine's
        bridge, never on loopback); ``nodes``: the kubelets' names, each given a token of its
        own (``node_token``, user ``system:node:<node>``) and the Node authorizer.
        ``controllers``: False for an API server alone (the oldest version's CRD checks need
        no controller, and cluster/build.sh builds no kube-controller-manager of it).
        ``max_requests_inflight``: the requests it serves at once (read-only; half as many
        mutating), which priority and fairness shares out and answers the rest with 429."""
        workdir.mkdir(parents=True, exist_ok=True)
        token = secrets.token_hex(16)
        lines = f'{token},{ADMIN},{ADMIN},"system:masters"\n'
        lines += f'{token}-kcm,{CONTROLLER_MANAGER},{CONTROLLER_MANAGER},"system:masters"\n'
        for name in nodes:
            lines += f'{token}-{name},system:node:{name},system:node:{name},"system:nodes"\n'
        (workdir / "tokens.csv").write_text(lines)
        key = workdir / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(workdir / "sa.pub")],
            check=True,
            capture_output=True,
        )
        (workdir / "audit-policy.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [
                        # by anyone: a namespace's deletion dates the 403s its end brings (rest.refused)
                        {"level": "Metadata", "verbs": ["delete"], "resources": [NAMESPACES]},
                        {"level": "None", "users": [ADMIN, CONTROLLER_MANAGER]},
                        {"level": "None", "userGroups": ["system:nodes", "system:unauthenticated"]},
                        {"level": "Metadata"},
                    ],
                }
            )
        )
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        plane = cls(workdir, f"https://{address}:{api_port}", token)
        try:
            plane._spawn(
                "etcd",
                [
                    etcd_binary(),
                    "--data-dir",
                    str(workdir / "etcd"),
                    "--name",
                    "kappa-test",
                    "--listen-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--advertise-client-urls",
                    f"http://127.0.0.1:{etcd_port}",
                    "--listen-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-advertise-peer-urls",
                    f"http://127.0.0.1:{peer_port}",
                    "--initial-cluster",
                    f"kappa-test=http://127.0.0.1:{peer_port}",
                    "--unsafe-no-fsync",
                ],
            )
            api = [
                str(bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--bind-address={address}",
                f"--secure-port={api_port}",
                f"--advertise-address={address}",
                f"--cert-dir={workdir / 'certs'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                # with a node, the `kubernetes` Service's endpoint is this server (pods reach it there)
                "--endpoint-reconciler-type=lease" if nodes else "--endpoint-reconciler-type=none",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={workdir / 'sa.pub'}",
                f"--service-account-signing-key-file={key}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC" if nodes else "--authorization-mode=RBAC",
                f"--enable-admission-plugins={ADMISSION}",
                "--profiling=false",
                f"--max-requests-inflight={max_requests_inflight}",
                f"--max-mutating-requests-inflight={max(1, max_requests_inflight // 2)}",
                *(["--kubelet-preferred-address-types=InternalIP"] if nodes else []),  # no DNS names for nodes
                # admission webhooks (the spark-operator's) reached at their pods' addresses, routed
                # to their nodes: this process is not a pod, and routes no cluster IP of its own
                *(["--enable-aggregator-routing=true"] if nodes else []),
                # Debian's etcd (3.4.23) predates the progress notifications watch lists need:
                # clients asking for one (fabric8's in Spark) get a plain list and watch instead
                *(["--feature-gates=WatchList=false"] if nodes else []),
            ]
            if audit:
                api += [
                    f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
                    f"--audit-log-path={plane.audit_log}",
                    "--audit-log-format=json",
                    "--audit-log-mode=batch",
                    "--audit-log-batch-max-wait=1s",
                ]
            plane._spawn("kube-apiserver", api)
            plane._wait_ready()
            plane.controllers = controllers
            if not controllers:
                plane.version = str(plane.admin.ok(plane.admin.get("/version"), "version")["gitVersion"])
                return plane
            kcm = workdir / "controller-manager.kubeconfig"
            kcm.write_text(yaml.safe_dump(kubeconfig(plane.server, plane.ca, f"{token}-kcm", CONTROLLER_MANAGER)))
            plane._spawn(
                "kube-controller-manager",
                [
                    str(bin_dir / "kube-controller-manager"),
                    f"--kubeconfig={kcm}",
                    "--leader-elect=false",
                    "--controllers=garbagecollector,namespace,serviceaccount" + (NODE_CONTROLLERS if nodes else ""),
                    *(NODE_MONITOR if nodes else ()),
                    "--use-service-account-credentials=false",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    f"--authentication-kubeconfig={kcm}",
                    f"--authorization-kubeconfig={kcm}",
                    *([f"--root-ca-file={plane.ca}"] if nodes else []),  # kube-root-ca.crt, which pods mount
                ],
            )
            plane.version = str(plane.admin.ok(plane.admin.get("/version"), "version")["gitVersion"])
        except BaseException:
            plane.stop()
            raise
        return plane

    def _spawn(self, name: str, argv: list[str]) -> None:
        self.procs.append(spawn(self.workdir, name, argv))

    def node_token(self, name: str) -> str:
        """Node ``name``'s kubelet's token (user ``system:node:<name>``, group system:nodes)."""
        return f"{self.admin_token}-{name}"

    def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise ControlPlaneError(f"{proc.args[0]} exited ({proc.returncode}): see {self.workdir}/*.log")
            with contextlib.suppress(requests.RequestException, OSError):  # OSError: no certificate yet
                if self.ca.exists() and self.admin.get("/readyz").status == 200:
                    return
            time.sleep(0.3)
        raise ControlPlaneError(f"kube-apiserver not ready after {timeout:.0f}s: see {self.workdir}/kube-apiserver.log")

    @contextlib.contextmanager
    def api_server_stopped(self) -> Iterator[None]:
        """kube-apiserver stopped (SIGSTOP: it answers nothing, its connections hang, as a
        server that is down or cut off) for the block, then running again where it was."""
        server = next(p for p in self.procs if Path(str(p.args[0])).name == "kube-apiserver")
        with stopped(server):
            yield
        self._wait_ready()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    # --- what tests do with it ----------------------------------------------------------------

    def apply_manifests(self, docs: list[dict[str, Any]], namespace: str | None = None) -> None:
        """Create or replace each manifest as the administrator (server-side apply)."""
        for doc in docs:
            meta = doc.setdefault("metadata", {})
            ns = meta.get("namespace") or namespace
            path = path_of(doc["kind"], ns, meta["name"], doc.get("apiVersion"))
            self.admin.ok(self.admin.apply(path, doc), f"apply {doc['kind']} {meta['name']}")
            if doc["kind"] == "CustomResourceDefinition":
                self.wait_established(meta["name"])

    def wait_established(self, crd: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.admin.get(path_of("CustomResourceDefinition", name=crd)).body
            conditions = (body.get("status") or {}).get("conditions") or [] if isinstance(body, dict) else []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.1)
        raise AssertionError(f"CRD {crd} not established")

    def namespace(self, name: str) -> str:
        self.admin.ok(
            self.admin.apply(
                path_of("Namespace", name=name), {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            ),
            f"namespace {name}",
        )
        return name

    def delete_namespace(self, name: str, wait: float = 0.0) -> None:
        """Delete it (the namespace controller empties it); with ``wait``, until it is gone."""
        self.admin.delete(path_of("Namespace", name=name))
        if wait:
            eventually(
                lambda: self.admin.get(path_of("Namespace", name=name)).status == 404,
                f"namespace {name} gone",
                timeout=wait,
                every=0.5,
            )

    def service_account_token(self, namespace: str, name: str, seconds: int = 24 * 3600) -> str:
        """A token for the ServiceAccount, signed by the server (what a pod would mount)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = path_of("ServiceAccount", namespace, name) + "/token"
        return str(self.admin.ok(self.admin.create(path, body), "token request")["status"]["token"])

    def write_kubeconfig(self, path: Path, token: str, user: str, namespace: str = "default") -> Path:
        path.write_text(yaml.safe_dump(kubeconfig(self.server, self.ca, token, user, namespace)))
        return path

    def audit_events(self, user: str | None = None) -> Iterator[dict[str, Any]]:
        """The audit log's events (by ``user`` only when given), as the server flushed them."""
        if not self.audit_log.exists():
            return
        for event in audit_lines(self.audit_log.read_bytes()):
            if user is None or event.get("user", {}).get("username") == user:
                yield event

    def forbidden(self, user: str, since: int = 0) -> list[str]:
        """Every request of ``user`` the server refused with 403 (``rest.refused``: not those a
        namespace's deletion brings), as ``VERB URI``; ``since``: only those logged after that
        offset of the audit log (:meth:`audit_size`)."""
        time.sleep(1.2)  # the audit backend flushes its batch every second
        if not self.audit_log.exists():
            return []
        logged = self.audit_log.read_bytes()
        # before ``since`` only the namespaces' deletions count: the rest is not parsed again
        before, after = audit_lines(logged[:since], NAMESPACE_LINE), audit_lines(logged[since:])
        return refused(after, user, namespaces_deleted([*before, *after]))

    def audit_size(self) -> int:
        """Where the audit log ends now: ``forbidden(user, since=...)`` reads only what follows."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0


NAMESPACES = {"group": "", "resources": ["namespaces"]}


NAMESPACE_LINE = b'"resource":"namespaces"'
"""What an audit line about a namespace holds (the server writes compact JSON)."""


def audit_lines(logged: bytes, holding: bytes = b"") -> list[dict[str, Any]]:
    """The events of a piece of the audit log, only the lines ``holding`` those bytes if given
    (a line cut by a flush in progress is left out)."""
    events = []
    for line in logged.splitlines():
        if holding not in line:
            continue
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """A part of the cluster stopped for the block (SIGSTOP to its process group: it answers
    nothing and its clients' connections hang, as a server that is down or cut off, and none of
    its state is lost), then running again where it was."""
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


def spawn(workdir: Path, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    """A part of the cluster as a process of its own session (killed with its children), its
    output in ``<workdir>/<name>.log``."""
    log = (workdir / f"{name}.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0, every: float = 0.2) -> Any:
    """``check()``'s first truthy value, polled; an AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
