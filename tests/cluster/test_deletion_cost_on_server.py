"""What a deletion costs, and what one job's unreadable store costs the others (issue 39), on the
real API server, counted from its audit log (never timed).

A StreamingJob's progress timer reads its drivers' reports from the job's store. When that read
hangs, kopf kept the deleted job's finalizer until the timer returned and ran the deletion
handler again on every poll meanwhile: 29 runs and 53 API requests per deleted job in
``bench/operator.py``. Here every job's store is a server that accepts connections and never
answers (the worst a store can do), so a timer is mid-read whenever the deletion comes: the
deletion must not wait for it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from harness.chart import Installed
from kappa_operator.local_cluster.control_plane import ControlPlane, eventually
from kappa_operator.local_cluster.rest import path_of
from spark_app.contract.reports.progress import ProgressReport, report_name
from tests.cluster.conftest import LIVE_PROGRESS_INTERVAL
from tests.cluster.operator_runs import InProcess
from tests.cluster.spark_operator import conditions, create, example, items, status

pytestmark = pytest.mark.usefixtures("never_forbidden")

SJ = "StreamingJob"
JOBS = 12
BACKFILLS = 4
REQUESTS_PER_RUN = 9
"""What one run of the deletion handler costs at most: a Backfill's GET of its three applications
(the run's, the publish's, the plan's) and DELETE of the one that exists, GET and DELETE of its
ConfigMap and of its credential Secret, and kopf's patch that records the run and removes the
finalizer (a StreamingJob's: 5). A second run finds everything gone: its GETs answer 404."""
SPARE_REQUESTS = 2
"""A GET of the object by an application's watch event arriving meanwhile, and one to spare."""
DELETE_RUNS = 2
"""kopf may run the deletion handler a second time when the finalizer's patch races an event
(kopf waits ``persistence.consistency_timeout``, 5 s, for its own patch to come back through the
watch: a loaded machine can take longer); never once per poll. With the regression it was 53
requests per deleted job in bench/operator.py and up to 137 here."""


class SilentStore:
    """A TCP server on loopback that accepts every connection and never answers: an S3
    endpoint that hangs. Counts the connections (each one a read the operator started)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True, name="silent-store").start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            self.held.append(conn)

    def close(self) -> None:
        self._stop.set()
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent_store(monkeypatch: pytest.MonkeyPatch) -> Iterator[SilentStore]:
    """Every ``s3://`` read the in-process operator makes goes to the silent store."""
    store = SilentStore()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{store.port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    yield store
    store.close()


def running(plane: ControlPlane, namespace: str, app: str) -> None:
    body = {"status": {"applicationState": {"state": "RUNNING"}, "driverInfo": {}}}
    plane.admin.ok(plane.admin.merge(path_of("SparkApplication", namespace, app) + "/status", body), app)


def operator_requests(plane: ControlPlane, user: str, namespace: str, since: str) -> list[dict[str, Any]]:
    """The operator's completed requests in ``namespace`` received at or after ``since`` (RFC
    3339 with microseconds, as the audit log writes them), watches and lists left out."""
    return [
        e
        for e in plane.audit_events(user)
        if e.get("stage") == "ResponseComplete"
        and e.get("verb") not in ("watch", "list")
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and e["requestReceivedTimestamp"] >= since
    ]


def test_deleting_jobs_and_backfills_whose_store_hangs_costs_a_bounded_number_of_requests(
    control_plane: ControlPlane,
    installed: Installed,
    in_process_operator: InProcess,
    fresh_namespace: str,
    silent_store: SilentStore,
) -> None:
    plane, ns = control_plane, fresh_namespace
    names = [f"hang-{i:02d}" for i in range(JOBS)]
    for name in names:
        create(plane, example("rmi-streamingjob.yaml", ns, name, checkpoints={"location": f"s3://lake/ck/{name}"}))
    backfills = [f"bfill-{i:02d}" for i in range(BACKFILLS)]
    for name in backfills:
        create(plane, example("rmi-backfill.yaml", ns, name, jobRef={"name": names[0]}))
    everything = JOBS + BACKFILLS
    eventually(lambda: len(items(plane, "SparkApplication", ns)) == everything, "every application", timeout=60)
    for app in items(plane, "SparkApplication", ns):
        running(plane, ns, app["metadata"]["name"])
    # the progress timers are now inside reads that will not return by themselves for 20 s, or
    # queued behind them (the S3 client runs only a few requests at once)
    eventually(lambda: silent_store.accepted >= 2, "the timers reading", timeout=4 * LIVE_PROGRESS_INTERVAL)
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    plane.admin.ok(plane.admin.request("DELETE", path_of("Backfill", ns)), "delete every backfill")
    plane.admin.ok(plane.admin.request("DELETE", path_of(SJ, ns)), "delete every job")
    eventually(lambda: not items(plane, SJ, ns) and not items(plane, "Backfill", ns), "every object gone", timeout=60)
    eventually(lambda: not items(plane, "SparkApplication", ns), "every application gone", timeout=30, every=0.5)
    # the audit backend flushes every second: wait until it wrote the last finalizer patch
    eventually(
        lambda: (
            sum(1 for e in operator_requests(plane, installed.user, ns, since) if e["verb"] == "patch") >= everything
        ),
        "the audit log",
        timeout=10,
    )
    done = operator_requests(plane, installed.user, ns, since)
    per_object: Counter[str] = Counter()
    delete_runs: Counter[str] = Counter()
    said: dict[str, list[str]] = defaultdict(list)  # each object's requests, for the message
    objects = [*names, *backfills]
    for e in done:
        ref = e["objectRef"]
        if ref["resource"] == "events":
            continue  # the Deleted Event, posted once per object
        owner = next((n for n in objects if ref.get("name", "").startswith(n)), ref.get("name", ""))
        per_object[owner] += 1
        code = e.get("responseStatus", {}).get("code")
        said[owner].append(f"{e['verb']} {ref['resource']}/{ref.get('name', '')} {code}")
        if ref["resource"] == "configmaps" and e["verb"] == "get" and ref["name"].endswith("-jobconfig"):
            delete_runs[owner] += 1  # the deletion handler reads the object's ConfigMap once per run
    assert max(delete_runs[n] for n in objects) <= DELETE_RUNS, f"deletion handler runs: {dict(delete_runs)}"
    over = [n for n in objects if per_object[n] > max(delete_runs[n], 1) * REQUESTS_PER_RUN + SPARE_REQUESTS]
    assert not over, f"requests per object: {per_object}; theirs: {[said[n] for n in over]}"
    patched_status = [e for e in done if e.get("objectRef", {}).get("subresource") == "status"]
    assert len(patched_status) <= 2 * everything, f"status writes while deleting: {len(patched_status)}"


def test_one_unreadable_store_is_one_condition_and_costs_the_others_nothing(
    control_plane: ControlPlane,
    in_process_operator: InProcess,
    fresh_namespace: str,
    silent_store: SilentStore,
    tmp_path: Path,
) -> None:
    """20 jobs report from a local store; one job's store hangs. The 20 show their progress,
    the one gets ``ProgressUnknown`` with the fix and one Warning, and its store is asked at
    most once per interval (each ask: at most the two attempts of its bounded retry)."""
    plane, ns = control_plane, fresh_namespace
    good = [f"good-{i:02d}" for i in range(20)]
    now = datetime.now(UTC)
    for name in good:
        reports = tmp_path / name / "live" / "_kappa"
        reports.mkdir(parents=True)
        job = example("rmi-streamingjob.yaml", ns, name, checkpoints={"location": str(tmp_path / name)})
        for sink in job["spec"]["sinks"]:
            report = ProgressReport(
                sink=sink,
                batch_id=7,
                at=now,
                input_rows_per_second=1.0,
                processed_rows_per_second=2.0,
                batch_duration_ms=100,
                state_rows=3,
                watermark=None,
            )
            (reports / report_name(sink)).write_text(report.model_dump_json())
        create(plane, job)
    create(plane, example("rmi-streamingjob.yaml", ns, "stuck", checkpoints={"location": "s3://lake/ck/stuck"}))
    eventually(lambda: len(items(plane, "SparkApplication", ns)) == 21, "every job's application", timeout=60)
    for name in [*good, "stuck"]:
        running(plane, ns, name)

    def unknown() -> dict[str, Any] | None:
        s = status(plane, SJ, ns, "stuck")
        return s if conditions(s).get("ProgressUnknown") == "True" else None

    stuck = eventually(unknown, "ProgressUnknown on the stuck job", timeout=6 * LIVE_PROGRESS_INTERVAL + 30)
    (cond,) = [c for c in stuck["conditions"] if c["type"] == "ProgressUnknown"]
    assert cond["reason"] == "ReportUnreadable" and "objectStore" in cond["message"], cond
    for name in good:
        s = eventually(lambda n=name: status(plane, SJ, ns, n).get("progress"), f"{name}'s progress", timeout=30)
        assert s[0]["batchId"] == 7
        assert "ProgressUnknown" not in conditions(status(plane, SJ, ns, name))
    # no retry storm: over three intervals, at most one ask per interval (and one in flight),
    # each of at most the two attempts of the bounded retry (no externalLocation: the snapshot
    # timer reads nothing here)
    asked, window = silent_store.accepted, 3
    time.sleep(window * LIVE_PROGRESS_INTERVAL)
    assert silent_store.accepted - asked <= (window + 1) * 2, silent_store.accepted - asked
    answer = plane.admin.get(f"/api/v1/namespaces/{ns}/events")
    warned = [
        e
        for e in plane.admin.ok(answer, "events")["items"]
        if e["reason"] == "ReportUnreadable" and e["involvedObject"]["name"] == "stuck"
    ]
    assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
