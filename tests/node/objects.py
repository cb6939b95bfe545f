"""What the node tests do with the cluster, as a user would: kubectl, the pods of an
application, the example Backfill over the tests' history, a branch's rows and commits."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from typing import Any

import yaml

from kappa_operator.local_cluster.addresses import NodeAddress
from kappa_operator.local_cluster.cluster import JOBS, LocalCluster
from kappa_operator.local_cluster.control_plane import ROOT
from kappa_operator.local_cluster.rest import path_of
from spark_app.examples.event_tables import KAFKA_ARCHIVE_METADATA_DDL, KAFKA_VALUE_DDL
from spark_app.sinks.iceberg.commit import BATCH_ID, QUERY_ID

NODES = [NodeAddress(i).name for i in (1, 2, 3)]
"""The node tests' cluster: three nodes, one per zone (issue 59)."""


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(cluster.parts.current / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@contextlib.contextmanager
def removed_after(cluster: LocalCluster, *objects: tuple[str, str]) -> Iterator[None]:
    """``(kind, name)`` objects deleted when the block ends, passed or failed: a failed test's
    jobs must not hold the jobs nodes' capacity (or their topics' consumers) from the tests
    after it. A delete that fails is left to the session's end (the test's own error shows)."""
    try:
        yield
    finally:
        for kind, name in objects:
            with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
                kubectl(
                    cluster, "delete", kind, name, "-n", JOBS, "--ignore-not-found", "--wait=true", "--timeout=120s"
                )


def pods_of(cluster: LocalCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return cluster.kube.plane.admin.get(path_of("Pod", namespace) + f"?labelSelector={selector}").body["items"]


def running(cluster: LocalCluster, namespace: str, selector: str) -> list[dict[str, Any]] | None:
    found = pods_of(cluster, namespace, selector)
    return found if found and all((p.get("status") or {}).get("phase") == "Running" for p in found) else None


WINDOW = {"start": "2026-11-01T12:40:00Z", "end": "2026-11-01T13:20:00Z", "warmup": "30m"}
"""Inside the history the StreamingJob read (``history``: 12:00 to 14:00)."""


def backfill(name: str, **spec: Any) -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / "rmi-backfill.yaml").read_text())
    body["metadata"]["name"] = name
    body["spec"]["window"] = dict(WINDOW)
    # the streaming run under faults and restarts (auto would run the example's range join
    # as one batch query: the queue test runs it so)
    body["spec"]["alignment"]["mode"] = "aligned"
    body["spec"].update(spec)
    return body


def phase_of(cluster: LocalCluster, kind: str, name: str, *phases: str) -> dict[str, Any] | None:
    status = cluster.kube.plane.admin.get(path_of(kind, JOBS, name)).body.get("status") or {}
    return status if status.get("phase") in phases else None


def branch_rows(catalog: Any, table: str, branch: str) -> list[dict[str, Any]]:
    loaded = catalog.load_table(table)
    rows = loaded.scan(snapshot_id=loaded.refs()[branch].snapshot_id).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: (r["playback_id"], r["impression_id"]))


def branch_commits(catalog: Any, table: str, branch: str) -> list[tuple[str, str]]:
    """(query id, batch id) of each sink commit in ``branch``'s history, newest first."""
    loaded = catalog.load_table(table)
    ref = loaded.refs().get(branch)
    snap = loaded.snapshot_by_id(ref.snapshot_id) if ref is not None else None
    out = []
    while snap is not None:
        props = snap.summary.additional_properties if snap.summary is not None else {}
        if BATCH_ID in props:
            out.append((props[QUERY_ID], props[BATCH_ID]))
        snap = loaded.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id else None
    return out


def driver_log(cluster: LocalCluster, app: str) -> str:
    """The log of ``app``'s driver pod ("" before it runs)."""
    found = running(cluster, JOBS, f"sparkoperator.k8s.io/app-name={app},spark-role=driver")
    return cluster.kube.pod_log(JOBS, found[0]["metadata"]["name"]) if found else ""


def archive_job(cluster: LocalCluster, topic: str, value_schema: str) -> dict[str, Any]:
    """examples/kafka-archive-streamingjob.yaml for ``topic``: the topic into archive.<topic>,
    its tasks in its driver (a copy of a topic: the Kafka test reads the broker from executors)."""
    example = yaml.safe_load((ROOT / "examples" / "kafka-archive-streamingjob.yaml").read_text())
    example["metadata"]["name"] = f"archive-{topic}"  # first: the checkpoint's location is named after it
    job = cluster.streaming_job(example, executors=0)
    live = job["spec"]["sources"].pop("impressions")
    live["live"].update(bootstrapServers=cluster.broker.bootstrap, topic=topic, valueSchema=value_schema)
    live["history"]["table"] = f"archive.{topic}"
    job["spec"]["sources"] = {topic: live}
    job["spec"]["sinks"]["copy"]["table"] = f"archive.{topic}"
    job["spec"]["triggerInterval"] = "5s"
    return job


KAFKA_METADATA = KAFKA_ARCHIVE_METADATA_DDL
VALUES = KAFKA_VALUE_DDL


def pod(namespace: str, name: str, image: str, script: str, **spec: Any) -> dict[str, Any]:
    """A one-container pod that runs ``script`` once, for probes of the nodes' network."""
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


def told(events: list[dict[str, Any]], last: int = 40) -> list[str]:
    """The jobs' namespace's last Events, one line each, oldest first: what says why a driver
    was restarted or a step retried (the objects' messages keep only the latest)."""
    when = [(e.get("lastTimestamp") or e.get("eventTime") or "", e) for e in events]
    lines = []
    for at, e in sorted(when, key=lambda pair: pair[0])[-last:]:
        about = e.get("involvedObject") or {}
        message = " ".join(str(e.get("message") or "").split())[:240]
        count = f" (x{e['count']})" if (e.get("count") or 1) > 1 else ""
        what = f"{about.get('kind')}/{about.get('name')} {e.get('type')} {e.get('reason')}{count}"
        lines.append(f"event {at} {what}: {message}")
    return lines


def pod_state(pod: dict[str, Any]) -> str:
    """The pod's phase, and why a container of it last ended (OOMKilled, Error, an eviction)."""
    status = pod.get("status") or {}
    said = [str(status.get("phase"))] + [str(status[k]) for k in ("reason", "message") if status.get(k)]
    for container in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            ended = (container.get(key) or {}).get("terminated")
            if ended:
                said.append(f"{container.get('name')} {key} {ended.get('reason')} (exit {ended.get('exitCode')})")
    return ", ".join(said)
