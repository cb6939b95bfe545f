"""`kappa cluster up` and `down` as a user runs them: the supervisor in the background, `up` on
a directory an earlier cluster left (a new cluster: the S3 API's objects were in memory), and
`down` after the supervisor was killed (SIGKILL, the OOM killer), which must end everything it
left running. The machine holds one node (its bridge, ports and kubelet), so this
runs after the node tests' cluster has stopped: last in tests/node (its conftest orders it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kappa_operator.leadership.lease import LEADER_LABEL
from kappa_operator.local_cluster.addresses import SOCKETS, NodeAddress
from kappa_operator.local_cluster.cluster import OPERATOR_NAMESPACE
from kappa_operator.local_cluster.commands import left_running

KAPPA = Path(sys.executable).parent / "kappa"


def kappa_cluster(action: str, workdir: Path, *args: str) -> str:
    done = subprocess.run(
        [str(KAPPA), "cluster", action, "--dir", str(workdir), *args], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, f"kappa cluster {action}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def operator_pods(workdir: Path) -> list[dict[str, Any]]:
    """The kappa operator's pods, as the kubectl that `up` points the user at lists them."""
    ready = json.loads((workdir / "ready.json").read_text())
    listed = subprocess.run(
        [f"{ready['bin']}/kubectl", "--kubeconfig", ready["kubeconfig"], "get", "pods", "-n", OPERATOR_NAMESPACE,
         "-l", "app.kubernetes.io/name=kappa-operator", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return list(json.loads(listed.stdout)["items"])


def mounted_under(parts: Path) -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines() if f"{parts}/" in line]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short directory, as a user's ``~/.kappa/cluster`` is: pytest's own are too long for
    the node's unix sockets (``node.socket_path_too_long``)."""
    top = Path(tempfile.mkdtemp(prefix="kc-"))
    yield top / "cluster"
    shutil.rmtree(top, ignore_errors=True)


def test_up_on_an_old_clusters_directory_then_down_after_a_killed_supervisor_leaves_nothing_running(
    node_to_itself: None, workdir: Path
) -> None:
    """One start (issue 58: a cluster's start is what this directory's time is spent on). What
    a second `up` on the same directory proved, that an earlier cluster's files never reach
    the next one, is proved by this one `up` on a directory an earlier cluster left (its parts,
    a stale ready.json and failure mark). A graceful `down` is ``LocalCluster.stop``, which
    the node tests' own cluster ends with, checked there for the same leftovers
    (tests/node/conftest.py ``cluster``)."""
    parts = workdir / "parts"
    (parts / "storage").mkdir(parents=True)
    stale = parts / "storage" / "an-earlier-clusters-objects"
    stale.write_text("gone with the next up")
    (workdir / "ready.json").write_text(json.dumps({"kubeconfig": "/nonexistent"}))
    (workdir / "failed").write_text("1")

    said = kappa_cluster("up", workdir, "--nodes", "2")
    assert "cluster up" in said and "2 nodes (kappa-node-1, kappa-node-2)" in said, said
    assert f"export KUBECONFIG={workdir / 'kubeconfig'}" in said
    assert "ended the" not in said
    assert not stale.exists() and not (workdir / "failed").exists(), "an earlier cluster's files are gone"
    pods = operator_pods(workdir)
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"], "the chart's two replicas"
    assert sum(LEADER_LABEL in p["metadata"]["labels"] for p in pods) == 1, "one leads"
    assert (workdir / "examples" / "rmi-backfill.yaml").exists()
    # the check `up` makes of the directory's length covers the longest socket the node made
    made = subprocess.run(["find", str(parts / "node"), "-type", "s"], capture_output=True, text=True, check=True)
    longest = max(len(os.fsencode(parts / "node" / NodeAddress(2).directory / socket)) for socket in SOCKETS)
    assert made.stdout.split() and max(len(os.fsencode(s)) for s in made.stdout.split()) <= longest, made.stdout

    supervisor = int((workdir / "supervisor.pid").read_text())
    os.kill(supervisor, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{supervisor}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = left_running(parts)
    assert len(left) > 10, f"a killed supervisor leaves its cluster running: {left}"

    said = kappa_cluster("down", workdir)
    ended = re.search(r"its supervisor was gone; ended the (\d+) processes it left running", said)
    assert ended is not None and int(ended[1]) > 10, said
    assert not left_running(parts), "every process of the cluster ended"
    assert not mounted_under(parts)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert "kappa-node-" not in namespaces, f"the nodes' networks gone too: {namespaces}"
    assert kappa_cluster("down", workdir).strip() == f"no cluster is running from {workdir}"
