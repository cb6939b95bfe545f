"""What a cluster takes away under a running Backfill and StreamingJob, one after the other in
one run (issue 58: faults that can share a run share it), on the three-node cluster:
- a driver pod deleted between its batch's writes and its commit;
- the leading operator's pod, with the watermark coordinator in it (issue 41; issue 62: the other replica leads);
- kube-apiserver, stopped for 60 s;
- the S3 API answering 503 SlowDown for 30 s, as S3 throttles;
- nodes lost (issue 59), as a preempted VM goes: its kubelet, containerd, every container and
  its network gone at once (``Node.lose``), nothing told to the control plane. Kubernetes marks
  the node NotReady (and its pods not Ready); once a pod of the operator's applications has
  been there for its ``nodeLostAfter``, the operator deletes it (no kubelet is left to confirm it
  stopped): Spark replaces a lost executor, and the operator restarts an application whose
  driver was lost from its checkpoint on a live node.
Applied with kubectl; the Backfill's rows are compared with `kappa run`'s (``by_kappa_run``), row
for row.

Runs after the other tests of the session's cluster (tests/node/conftest.py orders it): a lost
node is replaced by a new one of the same name (``Kubernetes.replace``) before the next."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

import yaml

from kappa_operator.local_cluster.cluster import JOBS, OPERATOR_LEADER, OPERATOR_NAMESPACE, LocalCluster
from kappa_operator.local_cluster.control_plane import eventually
from kappa_operator.local_cluster.rest import path_of
from spark_app.examples.generator import GeneratedStats
from spark_app.sinks.iceberg.writer import FAULT_ENV
from tests.node.objects import (
    KAFKA_METADATA,
    NODES,
    VALUES,
    archive_job,
    backfill,
    branch_commits,
    branch_rows,
    driver_log,
    kubectl,
    phase_of,
    pods_of,
    removed_after,
    running,
)
from tests.node.test_node_faults import SINK, assert_exactly_once, backing_off, catalog_rows, produce

LOST_AFTER = {"nodeLostAfter": "10s"}
"""How long the pods may stay on a node that stopped answering (30 s by default): what is
tested is what happens then, not how long it waits first."""
SLOWEST_READ = {"maxFilesPerSecond": 0.1}
"""The Backfill read at a file every 10 s (spec.readLimit, which admits less, later, and changes
no row): its ~40 files take over 6 min, so that every fault and the restart the last one causes
land mid-run (at 0.12, with the nodes lost only, it ended 2 min after the second loss)."""


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


def test_kubectl_drain_of_the_node_under_a_streaming_jobs_driver_waits_for_a_snapshot_and_the_move(
    cluster: LocalCluster, history: GeneratedStats, record_property: Callable[[str, object], None]
) -> None:
    """``kubectl drain`` of the node running a Kafka archive job's driver, as a node upgrade runs
    it. The driver's PodDisruptionBudget (the operator's, ``maxUnavailable: 0``) refuses the
    drain's eviction while the operator moves the job: the driver takes a snapshot (reason
    ``nodeDrain``, in status), then the application is deleted and runs again from its checkpoint on
    the other node of jobs; the drain then ends on its own. No restart is counted; the records
    produced before, during and after the move are each in the archive once."""
    topic = "drained"
    cluster.broker.create_topic(topic, partitions=2, config={"retention.ms": "-1"})
    rows = catalog_rows(cluster, "ingest.impressions")
    produce(cluster, topic, rows[:500])
    job = archive_job(cluster, topic, f"{VALUES['impressions']}, {KAFKA_METADATA}")
    name = job["metadata"]["name"]
    with removed_after(cluster, ("streamingjob", name)):
        kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(job))
        drained_in, to_running = drain_and_move(cluster, job, topic, rows)
    record_property(
        "measured",
        json.dumps({"drain_to_driver_running_elsewhere_s": round(to_running, 1), "drain_done_s": round(drained_in, 1)}),
    )


def drain_and_move(
    cluster: LocalCluster, job: dict[str, Any], topic: str, rows: list[dict[str, Any]]
) -> tuple[float, float]:
    """The drain and what the test checks of it (``rows``: the topic's records, the first 500
    produced); seconds to the drain's end and to the driver running elsewhere."""
    name = job["metadata"]["name"]
    catalog, table = cluster.host_catalog(), f"archive.{topic}"

    def archived(count: int) -> bool:
        return catalog.table_exists(table) and catalog.load_table(table).scan().to_arrow().num_rows >= count

    eventually(lambda: archived(500), "the first records archived", timeout=300, every=2)
    budget = cluster.kube.plane.admin.get(path_of("PodDisruptionBudget", JOBS, f"{name}-driver")).body
    assert budget["spec"]["maxUnavailable"] == 0, budget
    ((old, node),) = placed(cluster, name, "driver").items()
    started = time.monotonic()
    drain = subprocess.Popen(
        [str(cluster.parts.current / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "drain", node,
         "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=300s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        drained = eventually(
            lambda: [s for s in job_status(cluster, name).get("snapshots") or [] if s["reason"] == "nodeDrain"],
            "a snapshot asked for by the drain", timeout=120, every=1,
        )  # fmt: skip
        produce(cluster, topic, rows[500:1000])
        moved = eventually(lambda: {p: n for p, n in placed(cluster, name, "driver").items() if p != old or n != node},
                           "the driver running on another node", timeout=300, every=1)  # fmt: skip
        to_running = time.monotonic() - started
        output, _ = drain.communicate(timeout=300)
    finally:
        if drain.poll() is None:
            drain.kill()
        kubectl(cluster, "uncordon", node)
    drained_in = time.monotonic() - started
    assert drain.returncode == 0, output
    assert "Cannot evict pod as it would violate the pod's disruption budget" in output, output
    assert set(moved.values()) and node not in moved.values(), moved
    status = job_status(cluster, name)
    taken = next(s for s in status["snapshots"] if s["nonce"] == drained[0]["nonce"])
    assert taken.get("takenAt") and taken["batchIds"], taken
    assert status["phase"] == "Running" and not status.get("nodeDrain") and status.get("restarts", 0) == 0, status
    said = [e for r in ("Draining", "Moving", "Moved") for e in events_of(cluster, "StreamingJob", name, r)]
    assert len(said) == 3 and f"snapshot {taken['nonce']} taken" in said[1], said
    produce(cluster, topic, rows[1000:1500])
    eventually(lambda: archived(1500), "every record archived", timeout=300, every=2)
    copied = catalog.load_table(table).scan().to_arrow().to_pylist()
    offsets = Counter((r["__metadata__"]["partition"], r["__metadata__"]["offset"]) for r in copied)
    assert len(copied) == 1500 and max(offsets.values()) == 1, "each record once"
    return drained_in, to_running


def reported_lag(cluster: LocalCluster, name: str) -> str | None:
    """The Backfill's ``status.alignmentLag`` while it runs: its drivers' reports reached the
    coordinator, and the operator put the group's view on the object."""
    status = phase_of(cluster, "Backfill", name, "Running") or {}
    return status.get("alignmentLag")


def application_names(cluster: LocalCluster) -> Counter[str]:
    """How many SparkApplications of each name the jobs' namespace holds: one per object."""
    apps = cluster.kube.plane.admin.get(path_of("SparkApplication", JOBS)).body["items"]
    return Counter(a["metadata"]["name"] for a in apps)


def job_status(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return cluster.kube.plane.admin.get(path_of("StreamingJob", JOBS, name)).body.get("status") or {}


def test_a_backfill_and_streaming_jobs_survive_the_operator_the_api_server_s3_and_two_nodes_lost_in_one_run(
    cluster: LocalCluster,
    history: GeneratedStats,
    by_kappa_run: list[dict[str, Any]],
    record_property: Callable[[str, object], None],
) -> None:
    """On the two nodes of jobs (kappa-node-2 and -3; node 1 runs the operators), a Backfill
    (two sources aligned, read slowly so that the faults land mid-run) beside the live
    StreamingJob (rmi, of the tests before) and a StreamingJob archiving a Kafka topic (its tasks
    in its driver); both new drivers prefer node 2, the executors of the Backfill spread over both
    nodes (the example's anti-affinity). Then, in order:
    0. the Backfill's driver deleted between its first batch's file writes and its Iceberg
       commit: the operator backs off and submits a new application from the checkpoint;
    1. node 3 lost, with executors only, and the leading operator's pod (the coordinator in it)
       deleted at once: the other replica leads, and declares the alignment group again from the
       Backfill (the drivers hold their last bound meanwhile and report again); the lost executors
       are deleted, Spark asks for new ones (on node 2), the Backfill commits again without a
       restart;
    2. kube-apiserver stopped for 60 s;
    3. the S3 API answering every request 503 SlowDown for 30 s, while the sink commits (its data
       files, the Iceberg metadata, Spark's checkpoint: all on S3); node 3 replaced meanwhile by a
       new VM of the same name (empty: the images loaded again);
    4. node 2 lost, with both new drivers: each application restarts from its checkpoint on
       node 3 within 60 s of Kubernetes marking its driver not Ready (``nodeLostAfter``, 10 s
       here, and the operator's backoff, 4 s here, included).
    The Backfill ends Succeeded with `kappa run`'s rows, each batch committed once, nothing
    half-published; after the operator's restart no source ran more than maxDrift ahead of the
    group; the topic's records produced before, between and after the faults are each in the
    archive once; rmi Running and reporting again; one SparkApplication per object."""
    first, second = NODES[1], NODES[2]
    name, app = "rmi-lost", "rmi-lost-backfill"
    began, steps = time.monotonic(), dict[str, int]()  # each step's end, s from the start: where the time goes

    def step(done: str) -> None:
        steps[done] = round(time.monotonic() - began)

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
    fault = [{"name": FAULT_ENV, "value": "pause-before-commit:1"}]
    body = backfill(
        name,
        readLimit=SLOWEST_READ,
        # restarted after 4 s (10 s by default): what is tested is that it restarts from its
        # checkpoint, not how long it waits first
        restart={"initialBackoff": "4s"},
        driver={"affinity": near(first), **LOST_AFTER, "env": fault},
        executor=LOST_AFTER,
    )
    kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(body))
    table = f"archive.{topic}"

    def archived(count: int) -> bool:
        return catalog.table_exists(table) and catalog.load_table(table).scan().to_arrow().num_rows >= count

    eventually(lambda: archived(500), "the first records archived", timeout=420, every=2)
    step("0a_first_records_archived")
    # 0. the driver deleted between its first batch's file writes and its Iceberg commit (held
    # there by KAPPA_SINK_FAULT, on the first driver only: removed before the restart reads it)
    eventually(lambda: "fault point reached" in driver_log(cluster, app), "a batch written", timeout=420, every=2)
    step("0b_first_batch_written")
    paused = next(iter(placed(cluster, app, "driver")))
    kubectl(cluster, "patch", "backfill", name, "--type=json", "-p", '[{"op":"remove","path":"/spec/driver/env"}]')
    kubectl(cluster, "delete", "pod", paused, "-n", JOBS, "--wait=false")
    off = eventually(lambda: backing_off(cluster, name), "the Backfill backing off", timeout=120, every=1)
    assert off["restarts"] == 1 and "restart 1 at" in off["message"], off
    executors = eventually(lambda: len(set(placed(cluster, app, "executor").values())) == 2 and placed(
        cluster, app, "executor"
    ), "the Backfill's executors on two nodes", timeout=300, every=2)  # fmt: skip
    assert set(executors.values()) == {first, second}, executors
    step("0c_restarted_executors_running")
    drivers = {a: placed(cluster, a, "driver") for a in (app, "archive-moved")}
    assert all(list(d.values()) == [first] for d in drivers.values()), drivers
    eventually(lambda: reported_lag(cluster, name), "the group's lag reported", timeout=300, every=1)
    step("0d_lag_reported")
    branch = f"backfill-{name}"
    eventually(lambda: branch_commits(catalog, SINK, branch), "the Backfill's first commit", timeout=420, every=2)
    step("0_restarted_and_committed")

    # 1. the node with executors only, and the leading operator's pod
    (operator,) = pods_of(cluster, OPERATOR_NAMESPACE, OPERATOR_LEADER)  # the leader, the coordinator in it
    commits = len(branch_commits(catalog, SINK, branch))
    lost = time.monotonic()
    cluster.kube.lose(second)
    kubectl(cluster, "delete", "pod", operator["metadata"]["name"], "-n", OPERATOR_NAMESPACE, "--wait=false")

    def new_operator() -> bool:
        found = running(cluster, OPERATOR_NAMESPACE, OPERATOR_LEADER) or []
        return any(p["metadata"]["uid"] != operator["metadata"]["uid"] for p in found)

    eventually(new_operator, "another replica leading", timeout=180, every=1)
    lags: list[int] = []

    def lag_reported() -> bool:
        status = phase_of(cluster, "Backfill", name, "Running", "Publishing", "Succeeded") or {}
        if status.get("alignmentLag"):
            lags.append(int(str(status["alignmentLag"]).rstrip("s")))
        return len(lags) >= 3 or status.get("phase") != "Running"

    eventually(lag_reported, "the group's lag reported again", timeout=180, every=5)
    operator_recovered = time.monotonic() - lost
    eventually(lambda: node_ready(cluster, second) != "True", f"{second} NotReady", timeout=120, every=1)
    not_ready = time.monotonic() - lost
    eventually(lambda: second not in placed(cluster, app, "executor").values() and events_of(
        cluster, "Backfill", name, "NodeLost"
    ), "the lost executors deleted", timeout=180, every=1)  # fmt: skip
    deleted = time.monotonic() - lost
    eventually(lambda: len(branch_commits(catalog, SINK, branch)) > commits, "a commit after", timeout=300, every=1)
    recovered = time.monotonic() - lost
    status = phase_of(cluster, "Backfill", name, "Running")
    assert status is not None and status.get("restarts", 0) == 1, f"its driver was not touched: {status}"
    produce(cluster, topic, rows[500:1000])
    step("1_node_and_operator_recovered")

    # 2. the API server
    with cluster.kube.plane.api_server_stopped():
        time.sleep(60)
    # 3. S3's 503s, and a new VM in the lost node's place meanwhile
    with cluster.store.slowing_down() as refused:
        slowed = time.monotonic()
        cluster.kube.replace(second)
        time.sleep(max(0.0, 30 - (time.monotonic() - slowed)))
    assert phase_of(cluster, "Backfill", name, "Running") is not None, "the faults so far landed mid-run"
    step("3_api_server_and_s3_back")

    # 4. the node with both drivers (a driver the 503s failed restarted on it first: preferred)
    eventually(lambda: all(list(placed(cluster, a, "driver").values()) == [first] for a in drivers),
               f"both drivers running on {first}", timeout=180, every=1)  # fmt: skip
    restarts = (phase_of(cluster, "Backfill", name, "Running") or {}).get("restarts", 0)
    before = {}
    for a in drivers:
        running_now = placed(cluster, a, "driver")
        pods = pods_of(cluster, JOBS, f"sparkoperator.k8s.io/app-name={a},spark-role=driver")
        before[a] = next(p for p in pods if p["metadata"]["name"] in running_now)
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
    step("4_drivers_moved")
    status = eventually(
        lambda: phase_of(cluster, "Backfill", name, "Succeeded", "Failed"), "the Backfill", timeout=900, every=2
    )
    step("5_backfill_succeeded")
    assert status["phase"] == "Succeeded", status
    assert status["restarts"] == restarts + 1, status
    assert lags and max(lags) <= 600, f"alignment lag after the operator's restart: {lags} s (maxDrift 10m)"
    assert branch_rows(catalog, SINK, status["branch"]) == by_kappa_run
    assert_exactly_once(catalog, status["branch"])
    sink_refused = [r for r in refused if "attributed_plays" in r or "checkpoints" in r]
    assert sink_refused, f"the 503s met the sink and its checkpoint: {refused[:20]}"
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
    # rmi's own application may be between its deletion and its restart here (its driver, too, may
    # have been on the lost node): none twice now, and rmi's once it runs again
    now = application_names(cluster)
    assert max(now.values()) == 1 and now[app] == 1, now
    cluster.kube.replace(first)
    eventually(lambda: job_status(cluster, "rmi").get("phase") == "Running", "rmi Running", timeout=300, every=2)
    names = application_names(cluster)
    assert names["rmi"] == 1 and names["archive-moved"] == 1 and max(names.values()) == 1, names
    reported = json.dumps(job_status(cluster, "rmi").get("progress"), sort_keys=True)
    eventually(lambda: json.dumps(job_status(cluster, "rmi").get("progress"), sort_keys=True) != reported,
               "rmi's progress reported again", timeout=180, every=3)  # fmt: skip
    for kind, obj in (("backfill", name), ("streamingjob", "archive-moved")):
        kubectl(cluster, "delete", kind, obj, "--wait=true", "--timeout=120s")
    step("6_rmi_back_and_deleted")
    record_property(
        "measured",
        json.dumps(
            {
                "operator_restart_to_lag_reported_s": round(operator_recovered, 1),
                "lags_s": lags,
                "s3_503_refused": len(refused),
                "s3_503_refused_sink": len(sink_refused),
                "executors_node_lost_to_not_ready_s": round(not_ready, 1),
                "executors_node_lost_to_pods_deleted_s": round(deleted, 1),
                "executors_node_lost_to_next_commit_s": round(recovered, 1),
                "drivers_marked_not_ready_to_running_on_a_live_node_s": to_running,
                "restarts": status["restarts"],
                "steps_s": steps,
            }
        ),
    )
