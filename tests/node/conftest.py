"""The one-node cluster (kappa_operator/local_cluster: the node, CoreDNS, the spark-operator and
kappa installed by their charts, S3 and the catalog's database), once per test process, for the
tests of this directory (tests/conftest.py hands the whole directory to one pytest-xdist worker:
the node's bridge, ports and the kubelet are the machine's). Marked ``node``; ``LAST`` runs last,
on clusters of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.local.example_data import START
from kappa_operator.local_cluster.cluster import JOBS, OPERATOR_NAMESPACE, LocalCluster
from kappa_operator.local_cluster.commands import left_running
from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.kubernetes import Kubernetes
from kappa_operator.local_cluster.rest import path_of
from kappa_operator.local_cluster.storage import database_home
from kappa_operator.local_cluster.sweep import cgroup_hierarchies, container_ids, container_processes
from spark_app.examples.generator import GeneratedStats, GeneratorConfig, generate
from tests.node.objects import NODES, backfill, branch_rows, pod_state, told

LAST = ("test_node_loss.py", "test_cluster_command.py")
"""In this order, after the others: nodes lost (each replaced after, but the session's last
use of its cluster), then clusters of its own, started by `kappa cluster up`, once the
session's cluster stopped."""
RUNNING: list[LocalCluster] = []
"""The session's cluster while it runs (none until a test asks for it)."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marked ``node``; ``LAST``'s tests moved behind the others (after tests/conftest.py's
    stable sort, which keeps them there)."""
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    for item in ours:
        item.add_marker(pytest.mark.node)
    last = sorted(
        (item for item in ours if Path(str(item.fspath)).name in LAST),
        key=lambda item: LAST.index(Path(str(item.fspath)).name),
    )
    items[:] = [item for item in items if item not in last] + last


def as_root() -> None:
    if os.geteuid() != 0:  # said at the end of the run in red (tests/conftest.py), with the fix
        pytest.skip("the node tests run a kubelet, containerd and network namespaces: run the tests as root")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    as_root()
    started = LocalCluster.up(tmp_path_factory.mktemp("cluster"), nodes=len(NODES))
    RUNNING.append(started)
    yield started
    if started in RUNNING:
        RUNNING.remove(started)
        started.stop()
    # what a graceful `kappa cluster down` runs (the supervisor's stop is this one): nothing of
    # the cluster left running (a container's processes outlive its killed shim, in their own
    # sessions), mounted, or in the catalog's database
    left = container_processes(container_ids(started.kube.workdir))
    assert not left, f"processes of the node's containers still running after its stop: {left}"
    assert not left_running(started.workdir), f"the cluster's processes still running: {left_running(started.workdir)}"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    assert not [m for m in mounts if m.startswith(f"{started.workdir}/")], "mounts left"
    assert not database_home(started.workdir / "storage").exists(), "the catalog's database removed"
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [n for n in NODES if n in namespaces.split()], f"the nodes' network namespaces removed: {namespaces}"
    assert not [h / n for h in cgroup_hierarchies() for n in NODES if (h / n).exists()], "the nodes' cgroups removed"


@pytest.fixture
def node_to_itself() -> None:
    """The machine's one node free for a cluster of the test's own: the session's stopped
    first, if one was started (the tests that need it ran before: ``LAST``)."""
    as_root()
    while RUNNING:
        RUNNING.pop().stop()


@pytest.fixture(scope="session")
def kube(cluster: LocalCluster) -> Kubernetes:
    return cluster.kube


@pytest.fixture(scope="session")
def history(cluster: LocalCluster) -> GeneratedStats:
    """The example's input tables (ingest.impressions, ingest.playbacks) in the cluster's
    catalog, on its S3 API: two hours of events (12:00 to 14:00)."""
    gen = GeneratorConfig(
        start=START, hours=2, impressions_per_hour=2000, commit_interval=timedelta(minutes=10), namespace="ingest"
    )
    return generate(cluster.host_catalog(), gen)


@pytest.fixture(scope="session")
def by_kappa_run(
    cluster: LocalCluster, history: GeneratedStats, tmp_path_factory: pytest.TempPathFactory
) -> list[dict[str, Any]]:
    """The rows the example Backfill (``objects.backfill``, its mode left to auto) writes when
    `kappa run` runs it on this machine, from the same history, into a table of its own: what
    every Backfill of that window on the node must write, whatever failed on the way."""
    tmp = tmp_path_factory.mktemp("by-kappa-run")
    job = cluster.streaming_job(yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text()))
    job["spec"]["sinks"]["attributed_plays"]["table"] = "marts.attributed_plays_by_kappa_run"
    job["spec"]["checkpoints"] = {"location": str(tmp / "checkpoints"), "externalLocation": str(tmp / "snap")}
    (tmp / "job.yaml").write_text(yaml.safe_dump(job))
    # alignment.mode auto (the example's default): kappa run runs it bounded, one batch query
    # reading the history from S3; every aligned Backfill on the node must write these rows
    local = backfill("rmi-window", publish={"enabled": False}, alignment={"maxDrift": "10m"})
    (tmp / "backfill.yaml").write_text(yaml.safe_dump(local))
    done = subprocess.run(
        [str(Path(sys.executable).parent / "kappa"), "run", str(tmp / "backfill.yaml"),
         "--job", str(tmp / "job.yaml"), "--state", str(tmp / "objects")],
        capture_output=True, text=True, timeout=900, env={**os.environ, **cluster.store.environment()},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = branch_rows(cluster.host_catalog(), "marts.attributed_plays_by_kappa_run", "backfill-rmi-window")
    assert rows
    return rows


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A node test that failed ends with what a person would look at on the cluster: the
    objects' phases and messages, the SparkApplications' states, the pods, and the tail of the
    operator's log (its pods are gone with the cluster once the session ends)."""
    report = yield
    started = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and isinstance(started, LocalCluster):
        report.sections.append(("the cluster when it failed", cluster_state(started)))
    return report


def cluster_state(cluster: LocalCluster) -> str:
    admin, lines = cluster.kube.plane.admin, []
    try:
        for kind in ("StreamingJob", "Backfill", "Rewind", "SparkApplication"):
            for obj in admin.get(path_of(kind, JOBS)).body.get("items") or []:
                status = obj.get("status") or {}
                state = (status.get("applicationState") or {}) if kind == "SparkApplication" else status
                said = state.get("state") or state.get("phase")
                message = str(state.get("errorMessage") or state.get("message") or "")[:600]
                restarts = f" (restarts {status['restarts']})" if status.get("restarts") else ""
                lines.append(f"{kind} {obj['metadata']['name']}: {said}{restarts}: {message}")
        lines.extend(told(admin.get(path_of("Event", JOBS)).body.get("items") or []))
        for namespace in (JOBS, OPERATOR_NAMESPACE, "spark-operator"):
            for found in admin.get(path_of("Pod", namespace)).body.get("items") or []:
                lines.append(f"pod {namespace}/{found['metadata']['name']}: {pod_state(found)}")
        selector = "?labelSelector=app.kubernetes.io/name=kappa-operator"
        for found in admin.get(path_of("Pod", OPERATOR_NAMESPACE) + selector).body.get("items") or []:
            log = cluster.kube.pod_log(OPERATOR_NAMESPACE, found["metadata"]["name"])
            lines.append(f"--- operator log (tail) ---\n{log[-6000:]}")
    except Exception as exc:  # the cluster itself may be what failed
        lines.append(f"(the cluster did not answer: {exc})")
    return "\n".join(lines)
