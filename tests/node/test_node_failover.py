"""The operator's control plane fails over under a running Backfill and a StreamingJob (issue 62),
on the three-node cluster, with the chart's two replicas (one leading through its Lease):

1. the leader's pod deleted (``kubectl delete pod``): it hands the Lease back on its way out,
   and the follower leads within 15 s;
2. ``helm upgrade`` to a new operator image: the Deployment rolls both pods, one new pod at a
   time, and the Lease moves with them;
3. both replicas killed at once (``--grace-period=0 --force``: no hand-over): the Deployment's
   new pods wait out the Lease (15 s) and one leads; meanwhile the drivers keep their last bound.

Each new leader declares the Backfill's alignment group again and says so on the Backfill (an
Event; ``status.alignmentHeld`` while members have not reported again). The Backfill (two
sources aligned, read slowly so every step lands mid-run) succeeds with `kappa run`'s rows, each
batch committed once; every admission its driver traced obeyed the bound the coordinator gave;
the API server's audit log shows no status write and no SparkApplication created by a replica
that did not hold the Lease, and one SparkApplication for the Backfill; the live StreamingJob
(rmi, of the tests before) reports progress after each step."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import yaml

from kappa_operator.leadership.lease import LEADER_LABEL
from kappa_operator.local_cluster.addresses import SYSTEM_POOL
from kappa_operator.local_cluster.cluster import JOBS, OPERATOR_NAMESPACE, OPERATOR_PODS, LocalCluster
from kappa_operator.local_cluster.control_plane import audit_lines, eventually
from kappa_operator.local_cluster.images import OPERATOR_IMAGE
from kappa_operator.local_cluster.rest import path_of
from spark_app.__main__ import TRACE_ENV
from spark_app.examples.generator import GeneratedStats
from tests.node.objects import backfill, branch_commits, branch_rows, kubectl, phase_of, pod_state, pods_of, told
from tests.node.test_node_faults import SINK, assert_exactly_once

LEASE = "kappa-kappa-operator"
"""The chart's Lease: named after the release's full name, in its namespace."""
NEW_TAG = "0.1.0-next"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:kappa-kappa-operator"
SLOW_READ = {"maxFilesPerSecond": 0.1}
"""About 40 files at one every 10 s: every step lands mid-run (as in test_node_loss)."""
WRITES = {"create", "update", "patch", "delete"}


class Watch:
    """Who held the Lease, and every operator pod's address, as seen every half second: what
    the audit log's requests are attributed by (a request's source IP is its pod's)."""

    def __init__(self, cluster: LocalCluster, driver: str) -> None:
        self.cluster, self.driver = cluster, driver
        self.holders: list[tuple[float, str]] = []
        """(epoch seconds first seen, holder), in order."""
        self.ips: dict[str, str] = {}
        """pod IP -> pod name."""
        self.drivers: dict[str, str] = {}
        """The Backfill's driver pods seen, by uid: how each last stood (phase, how its
        container ended). More than one: the driver was lost and its application run again."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        admin = self.cluster.kube.plane.admin
        lease = f"/apis/coordination.k8s.io/v1/namespaces/{OPERATOR_NAMESPACE}/leases/{LEASE}"
        while not self._stop.wait(0.5):
            answer = admin.get(lease)
            if answer.status == 200:
                holder = answer.body["spec"].get("holderIdentity") or ""
                if not self.holders or self.holders[-1][1] != holder:
                    self.holders.append((time.time(), holder))
            for pod in pods_of(self.cluster, OPERATOR_NAMESPACE, OPERATOR_PODS):
                if ip := (pod.get("status") or {}).get("podIP"):
                    self.ips[ip] = pod["metadata"]["name"]
            found = admin.get(path_of("Pod", JOBS, self.driver))
            if found.status == 200:
                self.drivers[found.body["metadata"]["uid"]] = pod_state(found.body)

    def first_led(self) -> dict[str, float]:
        """Each pod that held the Lease, and when it was first seen holding it."""
        led: dict[str, float] = {}
        for at, holder in self.holders:
            if holder:
                led.setdefault(holder, at)
        return led

    @contextmanager
    def running(self) -> Iterator[Watch]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=10)


def leader(cluster: LocalCluster) -> dict[str, Any] | None:
    found = [
        p
        for p in pods_of(cluster, OPERATOR_NAMESPACE, f"{OPERATOR_PODS},{LEADER_LABEL}=true")
        if not p["metadata"].get("deletionTimestamp")
    ]
    return found[0] if len(found) == 1 else None


def a_new_leader(cluster: LocalCluster, before: set[str]) -> Callable[[], dict[str, Any] | None]:
    def found() -> dict[str, Any] | None:
        now = leader(cluster)
        return now if now is not None and now["metadata"]["uid"] not in before else None

    return found


def rmi_progress(cluster: LocalCluster) -> str:
    status = cluster.kube.plane.admin.get(path_of("StreamingJob", JOBS, "rmi")).body.get("status") or {}
    return json.dumps(status.get("progress"), sort_keys=True)


def moves_again(cluster: LocalCluster, what: str) -> None:
    """rmi's progress in status changes: a leader reads its reports again."""
    before = rmi_progress(cluster)
    eventually(lambda: rmi_progress(cluster) != before, f"rmi's progress reported {what}", timeout=180, every=2)


def traced_admissions(log: str) -> list[dict[str, Any]]:
    """The admission decisions the driver traced to its stderr (``KAPPA_TRACE_PATH``)."""
    found = []
    for line in log.splitlines():
        start = line.find('{"t":')
        if start < 0 or '"event": "admission"' not in line:
            continue
        try:
            found.append(json.loads(line[start:]))
        except json.JSONDecodeError:
            continue  # a line the log split: the others still hold every bound
    return found


def sender(event: dict[str, Any], watch: Watch) -> str | None:
    """The operator pod that sent an audited request: by its address, else by the user agent
    the operator's own client sends (``kappa-operator/<pod>``)."""
    by_address = watch.ips.get((event.get("sourceIPs") or [""])[0])
    agent = str(event.get("userAgent") or "")
    return by_address or (agent.split("/", 1)[1] if agent.startswith("kappa-operator/") else None)


def ref(event: dict[str, Any]) -> dict[str, Any]:
    return dict(event.get("objectRef") or {})


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()


def test_the_operators_leader_deleted_upgraded_and_both_replicas_killed_under_a_backfill_and_a_streaming_job(
    cluster: LocalCluster,
    history: GeneratedStats,
    by_kappa_run: list[dict[str, Any]],
    record_property: Callable[[str, object], None],
) -> None:
    name, app = "rmi-failover", "rmi-failover-backfill"
    plane, catalog = cluster.kube.plane, cluster.host_catalog()
    audit_from = plane.audit_size()
    trace = [{"name": TRACE_ENV, "value": "/dev/stderr"}]
    measured: dict[str, Any] = {}
    with Watch(cluster, f"{app}-driver").running() as watch:
        kubectl(
            cluster,
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump(backfill(name, readLimit=SLOW_READ, driver={"env": trace})),
        )
        branch = f"backfill-{name}"
        eventually(lambda: branch_commits(catalog, SINK, branch), "the Backfill's first commit", timeout=420, every=2)

        # 1. the leader's pod deleted, as `kubectl delete pod` (or a drain) does: SIGTERM
        first = eventually(lambda: leader(cluster), "a leader", timeout=60, every=1)
        commits = len(branch_commits(catalog, SINK, branch))
        deleted = time.monotonic()
        kubectl(cluster, "delete", "pod", first["metadata"]["name"], "-n", OPERATOR_NAMESPACE, "--wait=false")
        eventually(a_new_leader(cluster, {first["metadata"]["uid"]}), "the follower leading", timeout=60, every=0.2)
        measured["deleted_to_new_leader_s"] = round(time.monotonic() - deleted, 1)
        assert measured["deleted_to_new_leader_s"] <= 15, measured
        eventually(lambda: len(branch_commits(catalog, SINK, branch)) > commits, "a commit after", timeout=300, every=1)
        moves_again(cluster, "after the leader's deletion")

        # 2. helm upgrade to a new image of the operator (a new tag of the same build: what
        # rolls the pods is the Deployment's image changing)
        repository = OPERATOR_IMAGE.rsplit(":", 1)[0]
        cluster.kube.tag_image(OPERATOR_IMAGE, f"{repository}:{NEW_TAG}", SYSTEM_POOL)
        upgraded = time.monotonic()
        cluster.upgrade_operator(**{"image.tag": NEW_TAG})
        measured["upgrade_s"] = round(time.monotonic() - upgraded, 1)
        third = eventually(lambda: leader(cluster), "a leader after the upgrade", timeout=60, every=0.5)
        assert third["spec"]["containers"][0]["image"].endswith(f":{NEW_TAG}"), third["spec"]["containers"][0]
        commits = len(branch_commits(catalog, SINK, branch))
        eventually(lambda: len(branch_commits(catalog, SINK, branch)) > commits, "a commit after", timeout=300, every=1)
        moves_again(cluster, "after the upgrade")

        # 3. both replicas killed at once: no hand-over, the new pods wait out the Lease
        assert phase_of(cluster, "Backfill", name, "Running") is not None, "the steps so far landed mid-run"
        pods = {p["metadata"]["uid"] for p in pods_of(cluster, OPERATOR_NAMESPACE, OPERATOR_PODS)}
        killed = time.monotonic()
        kubectl(cluster, "delete", "pod", "-n", OPERATOR_NAMESPACE, "-l", OPERATOR_PODS, "--grace-period=0", "--force")
        eventually(a_new_leader(cluster, pods), "a new replica leading", timeout=120, every=0.5)
        measured["killed_to_new_leader_s"] = round(time.monotonic() - killed, 1)
        status = eventually(
            lambda: phase_of(cluster, "Backfill", name, "Succeeded", "Failed"), "the Backfill", timeout=900, every=2
        )
        moves_again(cluster, "after both replicas were killed")
    assert status["phase"] == "Succeeded", status

    # the output: `kappa run`'s rows, each batch once
    assert branch_rows(catalog, SINK, status["branch"]) == by_kappa_run
    assert_exactly_once(catalog, status["branch"])

    # one driver all along: none was lost to a failover (else what the Backfill was told)
    events = plane.admin.get(path_of("Event", JOBS)).body.get("items") or []
    about = [e for e in events if name in e["involvedObject"]["name"] or e["involvedObject"]["kind"] == "Node"]
    assert len(watch.drivers) == 1, (watch.drivers, told(about))
    # while no replica answered, the drivers kept their last bound; each new leader said so
    log = cluster.kube.pod_log(JOBS, f"{app}-driver")  # Completed: its log stays with the pod
    assert "keeping the last bound" in log, "the drivers met no coordinator while both replicas were gone"
    said = [
        e["message"]
        for e in plane.admin.get(
            path_of("Event", JOBS) + f"?fieldSelector=involvedObject.name={name},reason=AlignmentGroupDeclaredAgain"
        ).body["items"]
    ]
    assert len(said) >= 3 and all("leads now and declared the alignment group again" in m for m in said), said

    # every admission obeyed the bound the coordinator gave, some held back by it
    decisions = traced_admissions(log)
    assert decisions, "the driver traced its admissions"
    for d in decisions:
        if d["bound"] is not None:
            assert all(lower <= d["bound"] for lower, _, _ in d["admitted"]), d
    measured["admissions"] = len(decisions)
    measured["throttled"] = sum(d["throttled"] for d in decisions)
    assert measured["throttled"] > 0, "one source was held back by the drift bound"

    # the audit log: writes of status and SparkApplications only by a replica holding the Lease
    time.sleep(1.2)  # the audit backend's last batch
    led = watch.first_led()
    events = [
        e
        for e in audit_lines(plane.audit_log.read_bytes()[audit_from:])
        if e.get("user", {}).get("username") == OPERATOR_USER
    ]
    guarded = [
        e
        for e in events
        if e["verb"] in WRITES
        and (
            (e.get("objectRef") or {}).get("subresource") == "status"
            or (e.get("objectRef") or {}).get("resource") == "sparkapplications"
        )
    ]
    assert guarded, "the leaders wrote status"
    unattributed = [e for e in guarded if sender(e, watch) is None]
    assert not unattributed, f"requests from no operator pod: {unattributed[:3]}"
    by_follower = [
        f"{sender(e, watch)}: {e['verb']} {e['requestURI']}"
        for e in guarded
        if sender(e, watch) not in led or stamp(e) < led[str(sender(e, watch))] - 1.0
    ]
    assert not by_follower, f"a replica that did not hold the Lease wrote: {by_follower[:5]}"
    created = [
        e
        for e in guarded
        if e["verb"] == "create"
        and e["objectRef"].get("name") == app
        and (e.get("responseStatus") or {}).get("code") == 201
    ]
    assert len(created) == 1, f"one SparkApplication for the Backfill: {created}"
    measured["leaders"] = list(led)
    measured["guarded_writes"] = len(guarded)
    measured["attributed_by_address"] = sum(1 for e in guarded if (e.get("sourceIPs") or [""])[0] in watch.ips)
    record_property("measured", json.dumps(measured))
    kubectl(cluster, "delete", "backfill", name, "-n", JOBS, "--wait=true", "--timeout=120s")
