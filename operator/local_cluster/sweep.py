"""What a node leaves on the machine, gone (issue 59): after a node is lost (``Node.lose``), its
stop, or a supervisor that died without stopping its nodes (``kappa cluster down`` after a
crash), its containers' processes, mounts, network namespace, route and cgroups are found
from the machine alone (containerd's bundles, ``/proc``, ``/proc/mounts``) and removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from kappa_operator.local_cluster.addresses import MAX_NODES, NodeAddress
from kappa_operator.local_cluster.network import run

CGROUP_HIERARCHIES = Path("/sys/fs/cgroup")


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
