"""Nodes lost mid-run on the three-node cluster (issue 59), as a preempted VM goes: its kubelet,
containerd, every container and its network gone at once (``Node.lose``), nothing told to the
control plane. Kubernetes marks the node NotReady (and its pods not Ready); once a pod of the
operator's applications has been there for its ``nodeLostAfter``, the operator deletes it (no
kubelet is left to confirm it stopped): Spark replaces a lost executor, and the operator
restarts an application whose driver was lost from its checkpoint on a live node. Applied with kubectl;
the Backfill's rows are compared with `kappa run`'s (``by_kappa_run``), row for row.

Runs after the other tests of the session's cluster (tests/node/conftest.py orders it): a lost
node is replaced by a new one of the same name (``Kubernetes.replace``) before the next."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import yaml

from kappa_operator.local_cluster.cluster import JOBS, LocalCluster
from kappa_operator.local_cluster.control_plane import eventually, path_of
from spark_app.examples.generator import GeneratedStats
from tests.node.objects import NODES, archive_job, backfill, branch_commits, branch_rows, kubectl, phase_of, pods_of
from tests.node.test_node_faults import KAFKA_METADATA, SINK, VALUES, catalog_rows, produce

LOST_AFTER = {"nodeLostAfter": "10s"}
"""How long the pods may stay on a node that stopped answering (30 s by default): what is
tested is what happens then, not how long it waits first."""
SLOWER_READ = {"maxFilesPerSecond": 0.12}
"""The Backfill read at a file every 8 s: its ~40 files take over 5 min, so that both losses
and a node's replacement land mid-run (at SLOW_READ it ended before the second)."""


def near(node: str) -> dict[str, Any]:
    """A driver's preference for ``node`` (the scheduler may place it elsewhere: a restarted
    driver goes to a live node)."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


def placed(cluster: LocalCluster, app: str, role: str) -> dict[str, str]:
    """Pod name -> node of ``app``'s running pods of ``role`` not being deleted."""
    found = pods_of(cluster, JOBS, f"sparkoperator.k8s.io/app-name={app},spark-role={role}")
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in found
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def node_ready(cluster: LocalCluster, name: str) -> str:
    node = cluster.kube.plane.admin.get(path_of("Node", name=name)).body
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def events_of(cluster: LocalCluster, kind: str, name: str, reason: str) -> list[str]:
    selector = f"?fieldSelector=involvedObject.kind={kind},involvedObject.name={name},reason={reason}"
    return [e["message"] for e in cluster.kube.plane.admin.get(path_of("Event", JOBS) + selector).body["items"]]


def marked_not_ready(pod: dict[str, Any]) -> float | None:
    """When Kubernetes marked the pod not Ready (the node lifecycle controller does, for every
    pod of a node it finds NotReady), else None."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c["type"] == "Ready" and c["status"] == "False":
            return datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
    return None


def test_a_backfill_and_a_streaming_job_survive_losing_a_node_of_executors_then_the_node_of_their_drivers(
    cluster: LocalCluster,
    history: GeneratedStats,
    by_kappa_run: list[dict[str, Any]],
    record_property: Callable[[str, object], None],
) -> None:
    """On the two nodes of jobs (kappa-node-2 and -3; node 1 runs the operators), a Backfill
    (aligned, read slowly so that the faults land mid-run) and a StreamingJob archiving a Kafka
    topic, both drivers preferring node 2, the executors of each spread over both nodes
    (the example's anti-affinity). Then:
    1. node 3 is lost, with executors only: the lost executors are deleted, Spark asks for
       new ones (on node 2), the Backfill commits again without a restart;
    2. node 3 is replaced by a new VM of the same name (empty: the images loaded again);
    3. node 2 is lost, with both drivers: each application restarts from its checkpoint on
       node 3 within 60 s of Kubernetes marking its driver not Ready (``nodeLostAfter``, 10 s
       here, and the operator's backoff, 4 s here, included).
    The Backfill ends Succeeded with `kappa run`'s rows, each batch committed once; the topic's
    records produced before, between and after the faults are each in the archive once."""
    first, second = NODES[1], NODES[2]
    name, app = "rmi-lost", "rmi-lost-backfill"
    catalog = cluster.host_catalog()
    topic = "moved"
    cluster.broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    rows = catalog_rows(cluster, "ingest.impressions")
    produce(cluster, topic, rows[:500])
    job = archive_job(cluster, topic, f"{VALUES['impressions']}, {KAFKA_METADATA}")
    job["metadata"]["name"] = "archive-moved"
    job["spec"]["driver"].update(affinity=near(first), **LOST_AFTER)
    job["spec"]["executor"].update(LOST_AFTER)
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    body = backfill(
        name,
        readLimit=SLOWER_READ,
        publish={"enabled": False},
        restart={"initialBackoff": "4s"},
        driver={"affinity": near(first), **LOST_AFTER},
        executor=LOST_AFTER,
    )
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(body))
    table = f"archive.{topic}"

    def archived(count: int) -> bool:
        return catalog.table_exists(table) and catalog.load_table(table).scan().to_arrow().num_rows >= count

    eventually(lambda: archived(500), "the first records archived", timeout=420, every=2)
    executors = eventually(lambda: len(set(placed(cluster, app, "executor").values())) == 2 and placed(
        cluster, app, "executor"
    ), "the Backfill's executors on two nodes", timeout=300, every=2)  # fmt: skip
    assert set(executors.values()) == {first, second}, executors
    drivers = {a: placed(cluster, a, "driver") for a in (app, "archive-moved")}
    assert all(list(d.values()) == [first] for d in drivers.values()), drivers
    branch = f"backfill-{name}"
    eventually(lambda: branch_commits(catalog, SINK, branch), "the Backfill's first commit", timeout=420, every=2)

    # 1. the node with executors only
    lost = time.monotonic()
    cluster.kube.lose(second)
    eventually(lambda: node_ready(cluster, second) != "True", f"{second} NotReady", timeout=120, every=1)
    not_ready = time.monotonic() - lost
    eventually(lambda: second not in placed(cluster, app, "executor").values() and events_of(
        cluster, "Backfill", name, "NodeLost"
    ), "the lost executors deleted", timeout=180, every=1)  # fmt: skip
    deleted = time.monotonic() - lost
    commits = len(branch_commits(catalog, SINK, branch))
    eventually(lambda: len(branch_commits(catalog, SINK, branch)) > commits, "a commit after", timeout=300, every=1)
    recovered = time.monotonic() - lost
    status = phase_of(cluster, "Backfill", name, "Running")
    assert status is not None and status.get("restarts", 0) == 0, f"its driver was not touched: {status}"
    produce(cluster, topic, rows[500:1000])

    # 2. a new VM in its place
    cluster.kube.replace(second)

    # 3. the node with both drivers
    before = {
        a: next(iter(pods_of(cluster, JOBS, f"sparkoperator.k8s.io/app-name={a},spark-role=driver"))) for a in drivers
    }
    marks: dict[str, float] = {}
    cluster.kube.lose(first)

    def restarted(a: str) -> dict[str, str] | None:
        for pod in pods_of(cluster, JOBS, f"sparkoperator.k8s.io/app-name={a},spark-role=driver"):
            if pod["metadata"]["uid"] == before[a]["metadata"]["uid"]:
                if (at := marked_not_ready(pod)) is not None:
                    marks.setdefault(a, at)
                return None
        now = placed(cluster, a, "driver")
        return now if now and list(now.values()) == [second] else None

    moved = {}
    for a in drivers:
        eventually(lambda a=a: restarted(a), f"{a}'s driver running on {second}", timeout=300, every=0.5)
        moved[a] = time.time()
    produce(cluster, topic, rows[1000:1500])
    status = eventually(
        lambda: phase_of(cluster, "Backfill", name, "Succeeded", "Failed"), "the Backfill", timeout=900, every=2
    )
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == 1, status
    assert branch_rows(catalog, SINK, status["branch"]) == by_kappa_run
    counts = Counter(branch_commits(catalog, SINK, status["branch"]))
    assert max(counts.values()) == 1, [c for c, n in counts.items() if n > 1]
    said = events_of(cluster, "Backfill", name, "NodeLost")
    assert any(f"driver pod {app}-driver lost with node {first}" in m for m in said), said
    restarting = events_of(cluster, "Backfill", name, "BackingOff")
    assert any(f"driver lost with node {first}" in m for m in restarting), restarting
    eventually(lambda: archived(1500), "every record archived", timeout=300, every=2)
    copied = catalog.load_table(table).scan().to_arrow().to_pylist()
    offsets = Counter((r["__metadata__"]["partition"], r["__metadata__"]["offset"]) for r in copied)
    assert len(copied) == 1500 and max(offsets.values()) == 1, "each record once"
    assert {r["impression_id"] for r in copied} == {r["impression_id"] for r in rows[:1500]}, "none lost"
    # from Kubernetes marking the old driver not Ready (its node NotReady) to the new one running
    to_running = {a: round(moved[a] - marks[a], 1) for a in marks}
    assert to_running and max(to_running.values()) <= 60, to_running
    cluster.kube.replace(first)
    for kind, obj in (("backfill", name), ("streamingjob", "archive-moved")):
        kubectl(cluster, "delete", kind, obj, "--wait=true", "--timeout=120s")
    record_property(
        "measured",
        json.dumps(
            {
                "executors_node_lost_to_not_ready_s": round(not_ready, 1),
                "executors_node_lost_to_pods_deleted_s": round(deleted, 1),
                "executors_node_lost_to_next_commit_s": round(recovered, 1),
                "drivers_marked_not_ready_to_running_on_a_live_node_s": to_running,
            }
        ),
    )
