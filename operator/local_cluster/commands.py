"""`kappa cluster up` / `down`: the local cluster (one node, or ``--nodes N``) for a user, as `kind create cluster` is
for others. `up` builds what is missing (cluster/build.sh, our images), starts the cluster under
a supervisor process of its own (its log in the cluster's directory), loads the example data
into the cluster's catalog, writes the examples pointed at it, and returns once everything
answers, printing the KUBECONFIG line and the commands to run next. `down` stops the supervisor,
which stops every part; if the supervisor died without stopping them, `down` (or the next `up`)
ends what they left running. Each `up` starts a new cluster: the S3 API (moto's server) keeps
its objects in memory, and nothing that described them is kept either. Runs as root (a kubelet,
network namespaces, mounts)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from kappa_operator.local_cluster.control_plane import ROOT
from spark_app.contract.errors import KappaError

DEFAULT_DIR = Path(os.environ.get("KAPPA_CLUSTER_DIR", Path.home() / ".kappa" / "cluster"))
EXAMPLES = (
    "rmi-streamingjob.yaml",
    "rmi-backfill.yaml",
    "rmi-rewind.yaml",
    "enrich-streamingjob.yaml",
    "enrich-backfill.yaml",
    "enrich-changes-streamingjob.yaml",
    "enrich-changes-backfill.yaml",
)
"""The examples written for the cluster: rmi's StreamingJob, Backfill and Rewind, and the
enrich examples (over ``dims.promotions`` and its change log, written with the events)."""
PROMOTIONS_EVERY = timedelta(minutes=20)
"""A commit of promotion changes per 20 minutes of the 8 hours (24): a change log that moves
with the events, in fewer commits than they take, so `up` stays within its minute."""
UP_TIMEOUT = 3600.0
"""A first `up` builds images (~10-15 min on 2 cores); later ones start in ~2 min."""
ENDED_WITHIN = 30.0
"""How long `down` waits for what it killed to be gone before it says which outlived it."""


class ClusterCommandError(KappaError):
    """Said whole, without a traceback: each names what to do, or ends with the supervisor's log."""


def _pid(workdir: Path) -> int | None:
    try:
        pid = int((workdir / "supervisor.pid").read_text())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None


def up(workdir: Path, console: Console, nodes: int = 1) -> int:
    from kappa_operator.local_cluster.addresses import NodeAddress, socket_path_too_long
    from kappa_operator.local_cluster.kubernetes import node_count_refused

    if refused := node_count_refused(nodes):
        raise ClusterCommandError(refused)
    if os.geteuid() != 0:
        raise ClusterCommandError("a kubelet runs as root: run `sudo .venv/bin/kappa cluster up`")
    if _pid(workdir) is not None:
        raise ClusterCommandError(f"a cluster is already running from {workdir}: `kappa cluster down` first")
    if too_long := socket_path_too_long(workdir.absolute() / "parts" / "node" / NodeAddress(nodes).directory):
        raise ClusterCommandError(f"the cluster's directory (--dir or $KAPPA_CLUSTER_DIR): {too_long}")
    if ended := _ended(workdir):
        console.print(f"ended the {ended} processes a killed cluster's supervisor left running")
    _anew(workdir / "parts")
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in ("ready.json", "failed"):
        (workdir / stale).unlink(missing_ok=True)
    log = workdir / "supervisor.log"
    started = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kappa_operator.local_cluster.commands", "serve", str(workdir), str(nodes)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command, as a cluster should
        )
    (workdir / "supervisor.pid").write_text(str(proc.pid))
    with console.status("building what is missing and starting the cluster (the first time: 10-15 min)"):
        while not (workdir / "ready.json").exists():
            if proc.poll() is not None or (workdir / "failed").exists():
                with contextlib.suppress(subprocess.TimeoutExpired):  # its traceback written first
                    proc.wait(timeout=60)
                tail = log.read_text(errors="replace")[-3000:]
                raise ClusterCommandError(f"the cluster did not start; its log ({log}) ends:\n{tail}")
            if time.monotonic() - started > UP_TIMEOUT:
                raise ClusterCommandError(f"the cluster did not start within {UP_TIMEOUT:.0f} s; its log: {log}")
            time.sleep(1)
    ready = json.loads((workdir / "ready.json").read_text())
    shape = "one node" if nodes == 1 else f"{nodes} nodes ({', '.join(ready['nodes'])})"
    console.print(f"[green]cluster up[/] in {time.monotonic() - started:.0f} s: {shape}, the spark-operator and kappa")
    console.print(f"  S3 API {ready['s3']}, Iceberg catalog {ready['catalog']}, Kafka {ready['kafka']}")
    if ready.get("prometheus"):
        console.print(
            f"  Prometheus {ready['prometheus']} (the operator's and the Spark drivers' metrics, the chart's alerts)"
        )
    if ready.get("dashboard"):
        console.print(f"  dashboard {ready['dashboard']} (alignment lag, backfills, jobs; Perses)")
    console.print(
        "  example data: ingest.impressions and ingest.playbacks (8 hours from 2026-11-01 12:00Z), "
        "dims.promotions and dims.promotion_changes"
    )
    console.print("next:")
    console.print(f"  export KUBECONFIG={ready['kubeconfig']}")
    console.print(f"  export PATH={ready['bin']}:$PATH    # kubectl, built with the cluster")
    for name in EXAMPLES:
        console.print(f"  kubectl apply -f {workdir / 'examples' / name}")
    console.print("  kubectl get sj,bf,rw,sparkapp,pods -w")
    console.print("stop it with `kappa cluster down`")
    return 0


def down(workdir: Path, console: Console) -> int:
    pid = _pid(workdir)
    if pid is None:
        ended = _ended(workdir)
        console.print(
            f"cluster down: its supervisor was gone; ended the {ended} processes it left running"
            if ended
            else f"no cluster is running from {workdir}"
        )
        return 0
    os.kill(pid, signal.SIGTERM)
    with console.status("stopping the cluster"):
        deadline = time.monotonic() + 120
        while _pid(workdir) is not None and time.monotonic() < deadline:
            time.sleep(0.5)
    if _pid(workdir) is not None:
        os.killpg(pid, signal.SIGKILL)
        _ended(workdir)
        raise ClusterCommandError(f"the cluster's supervisor {pid} did not stop in 120 s; killed it (log: {workdir})")
    (workdir / "supervisor.pid").unlink(missing_ok=True)
    console.print("cluster down, its tables and objects with it: the next `up` starts anew")
    return 0


def _ended(workdir: Path) -> int:
    """No supervisor, but perhaps what it started: one killed (SIGKILL, the OOM killer) never
    stopped its parts, whose ports and containers then keep the next `up` from starting. They
    are ended here as its stop would have (``sweep.sweep``); how many were left is returned."""
    from kappa_operator.local_cluster.sweep import sweep

    parts = workdir / "parts"
    left = left_running(parts)
    if left:
        sweep(parts / "node")
        # The storage and the broker, outside the node, and anything the sweep's kill has not
        # yet ended: a SIGKILLed JVM takes a moment to exit, and the next `up` needs its ports.
        deadline = time.monotonic() + ENDED_WITHIN
        while remaining := left_running(parts):
            if time.monotonic() > deadline:
                raise ClusterCommandError(
                    f"{len(remaining)} processes of the cluster in {workdir} outlived SIGKILL for "
                    f"{ENDED_WITHIN:.0f} s (pids {remaining[:10]}): see `ps -o pid,stat,cmd -p PID`"
                )
            for pid in remaining:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
    (workdir / "supervisor.pid").unlink(missing_ok=True)
    return len(left)


def _anew(parts: Path) -> None:
    """An earlier cluster's files gone before the next starts: its S3 API (moto's server) held
    the tables' files and the checkpoints in memory, so its catalog database, etcd's objects and
    the broker's topics would describe files that are gone."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    left = [m for m in mounts if m.startswith(f"{parts}/")]
    if left:  # never delete through a mount
        raise ClusterCommandError(f"{len(left)} mounts are left under {parts} ({left[0]}): `umount -l` them first")
    shutil.rmtree(parts, ignore_errors=True)


def left_running(parts: Path) -> list[int]:
    """The processes a cluster started from ``parts`` that still run, this one aside: those
    naming the directory or the catalog database's (``storage.database_home``), and the nodes'
    containers (``sweep.container_processes``). A stopped cluster leaves none."""
    from kappa_operator.local_cluster.storage import database_home
    from kappa_operator.local_cluster.sweep import container_ids, container_processes

    named = set()
    for where in (parts, database_home(parts / "storage")):
        found = subprocess.run(["pgrep", "-f", str(where)], capture_output=True, text=True, check=False)
        named |= {int(pid) for pid in found.stdout.split()}
    found = (named | set(container_processes(container_ids(parts / "node")))) - {os.getpid()}
    return sorted(pid for pid in found if not _exited(pid))


def _exited(pid: int) -> bool:
    """Whether ``pid`` has ended though not yet been reaped (a zombie): it holds no port, file
    or memory, so it is not left running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X")


def example_manifests(cluster: object, out: Path) -> list[Path]:
    """The examples (StreamingJob, Backfill, Rewind) with the job pointed at this cluster."""
    from kappa_operator.local_cluster.cluster import LocalCluster

    assert isinstance(cluster, LocalCluster)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in EXAMPLES:
        doc = yaml.safe_load((ROOT / "examples" / name).read_text())
        head = ""
        if doc["kind"] == "StreamingJob":
            doc = cluster.streaming_job(doc)
            for source in doc["spec"]["sources"].values():  # the example data is history already
                source["live"]["startingPosition"] = "earliest"
        if doc["kind"] == "Rewind":  # a job started minutes ago has no snapshot before 14:00
            doc["spec"]["target"] = {"batchId": 0}
            head = "# Back to the job's first micro-batch (its snapshot at batch 0), its sink's later commits undone\n"
        (out / name).write_text(head + yaml.safe_dump(doc, sort_keys=False))
        written.append(out / name)
    return written


def serve(workdir: Path, nodes: int = 1) -> None:
    """The supervisor: the cluster up, then waiting for SIGTERM to take it down."""
    from kappa_operator.local.example_data import HOURS, PER_HOUR, START
    from kappa_operator.local_cluster.cluster import LocalCluster
    from spark_app.examples.generator import GeneratorConfig, generate
    from spark_app.examples.promotions import PromotionsConfig, write_promotions

    def stop(*_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the parts are being stopped
        raise Stopped

    def example_data(catalog: Any) -> None:
        """What `kappa example-data` writes, and the enrich examples' dimension beside it (each
        mostly waits on S3 and the database), while the nodes start and the charts are
        installed (it needs only the catalog and S3)."""
        if catalog.table_exists("ingest.impressions"):
            return
        every = timedelta(minutes=5)
        dimension = PromotionsConfig(START, HOURS, every=PROMOTIONS_EVERY)
        with ThreadPoolExecutor(max_workers=1) as beside:
            promotions = beside.submit(write_promotions, catalog, dimension)
            generate(catalog, GeneratorConfig(START, HOURS, PER_HOUR, commit_interval=every, namespace="ingest"))
            promotions.result()

    signal.signal(signal.SIGTERM, stop)
    cluster = None
    try:
        # stops what it started, if it fails
        cluster = LocalCluster.up(workdir / "parts", beside=example_data, nodes=nodes)
        example_manifests(cluster, workdir / "examples")
        (workdir / "kubeconfig").write_bytes(cluster.kubeconfig.read_bytes())
        ready = {
            "kubeconfig": str(workdir / "kubeconfig"),
            "bin": str(cluster.parts.current),
            "s3": cluster.store.endpoint,
            "catalog": cluster.database.uri,
            "kafka": cluster.broker.bootstrap,
            "prometheus": cluster.prometheus.url if cluster.prometheus else None,
            "dashboard": cluster.perses.dashboard_url if cluster.perses else None,
            "nodes": [node.name for node in cluster.kube.nodes],
        }
        (workdir / "ready.json").write_text(json.dumps(ready))
        while True:
            time.sleep(3600)
    except Stopped:
        pass
    except BaseException:
        (workdir / "failed").write_text("1")
        raise
    finally:
        if cluster is not None:
            cluster.stop()
        (workdir / "ready.json").unlink(missing_ok=True)


class Stopped(Exception):
    """SIGTERM to the supervisor (`kappa cluster down`)."""


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) == 4 else 1)
    else:
        raise SystemExit("usage: python -m kappa_operator.local_cluster.commands serve DIR [NODES]")
