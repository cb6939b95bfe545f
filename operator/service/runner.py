"""``kappa operator``: kopf with the watermark coordinator embedded in the same process.

Embedded because the operator is who declares and removes alignment groups for the
backfills it launches: one process, one Deployment, nothing to keep in sync. Spark drivers
reach the coordinator through the chart's Service (``--coordinator-url``)."""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kopf

from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.handlers.context import configure, ctx
from kappa_operator.kube import api as kube_api
from kappa_operator.kube import patch_refusals
from kappa_operator.kube.api import api_client
from kappa_operator.kube.diffbase import LeanStatusDiffBase
from kappa_operator.kube.events import route_kopf_logs
from kappa_operator.leadership.decide import DEFAULT_TIMING, Timing
from kappa_operator.leadership.elector import LeaderElector
from kappa_operator.leadership.lease import LeaderLabel, LeaseLock
from kappa_operator.reconcile.backfill_queue import QueueLimits
from kappa_operator.service.heap import trim_heap
from kappa_operator.service.metrics import OperatorMetrics

log = logging.getLogger("kappa.operator")


@dataclass(frozen=True)
class LeaderElection:
    """Which Lease the replicas share and who this one is (the chart: the pod's name, from the
    downward API, so the Lease and the audit log name the pod)."""

    namespace: str
    identity: str
    lease: str = "kappa-operator"
    pod: str | None = None
    """This replica's pod, which carries the leader label while it leads (None: not in a pod)."""
    timing: Timing = DEFAULT_TIMING


DECLARING_S = 60.0
"""How long after it starts leading the coordinator answers an unknown group with 503 (ask
again) rather than 404: kopf resumes every object in that time, and each running Backfill's
handler declares its group again."""

LOST_EXIT = 3
"""The exit status of a leader that lost its Lease: the kubelet restarts the container, which
comes back as a follower."""


@dataclass(frozen=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()
    """Empty: every namespace (cluster-wide)."""
    server: str | None = None
    """An API server URL without auth (emulators, tests); None: in-cluster, else the kubeconfig."""
    coordinator_bind: str = "127.0.0.1:8471"
    coordinator_url: str | None = None
    """How drivers reach the coordinator (default: http://<coordinator_bind>)."""
    token: str | None = None
    """Coordinator bearer token (None: a random one, printed in the log for local use)."""
    metrics_bind: str | None = None
    """host:port of Prometheus /metrics (None: not served; no host: 127.0.0.1)."""
    health_bind: str | None = None
    """host:port of kopf's liveness /healthz (None: not served; no host: 127.0.0.1)."""
    max_concurrent_backfills: int | None = None
    """Backfills running at once in the watched namespaces (None: no limit; the rest queue)."""
    max_concurrent_backfills_per_namespace: int | None = None
    progress_interval: float = 30.0
    """Seconds between reads of the live jobs' progress reports into status (the chart's
    ``liveJobs.progressInterval``)."""
    leader_election: LeaderElection | None = None
    """None: this process is the only operator and leads from the start."""
    objects_in_flight: int = 512
    """Objects of one kind whose events are handled at once (the chart's ``objectsInFlight``;
    ``OBJECTS_IN_FLIGHT`` by default)."""


def split_bind(bind: str) -> tuple[str, int]:
    """``host:port`` → (host, port); an IPv6 host loses its brackets, no host is 127.0.0.1."""
    host, _, port = bind.rpartition(":")
    return host.removeprefix("[").removesuffix("]") or "127.0.0.1", int(port)


def liveness_url(bind: str) -> str:
    host, port = split_bind(bind)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/healthz"


HANDLER_THREADS = 32
"""Threads for the sync handlers (the API client keeps more connections than this)."""


OBJECTS_IN_FLIGHT = OperatorOptions.objects_in_flight
"""Objects of one kind (per watched namespace) whose events are handled at once: kopf's
per-object workers."""


def settings(objects_in_flight: int = OBJECTS_IN_FLIGHT) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.scanning.disabled = True  # CRDs come with the chart: no cluster-wide CRD watch, no such RBAC
    s.persistence.finalizer = "kappa.dev/finalizer"
    s.watching.server_timeout = 60
    s.watching.client_timeout = 90
    # The operator's periodic looks are not kopf timers (``handlers.followers``), but should a
    # timer or daemon come back: kopf re-checks one that did not exit at once only every
    # cancellation_polling seconds (60 by default), which kept a third of 200 deleted Backfills
    # in Terminating a minute longer (issue 27).
    s.background.cancellation_polling = 0.5
    # The handlers are sync (their API calls block) and run in kopf's thread pool, which by
    # default has cpu+4 threads: 6 on a 2-core node, so 200 objects created at once queued
    # behind 6 blocking calls. They wait on the API server, not on a CPU.
    s.execution.max_workers = HANDLER_THREADS
    # kopf starts one worker per object with events and, by default, as many at once as there
    # are such objects: 5,000 created in a burst were ~3,000 handlers in flight, each holding
    # its body, its diff and its patch while waiting for the CPU, and the heap they fragmented
    # stayed (552 MB peak, over the chart's 512Mi limit). Bounded, the rest wait as their raw
    # events: 465 MB with 512, 431 with 128 (bench/RESULTS.md, issue 62). The bound is per kind
    # and namespace watched; a worker idle for a second gives its slot back. A worker also keeps
    # its slot while it waits out a failed handler's retry delay: as many objects failing at
    # once as the bound hold the others' events until one of them passes (docs/operations.md).
    s.queueing.worker_limit = objects_in_flight
    s.queueing.idle_timeout = 1.0
    # kopf's bookkeeping in status, not in annotations: its last-handled copy is as large as
    # the spec, and with kubectl's own copy beside it a large object passes the API server's
    # 256 KiB limit on annotations; every event would then look like a creation, and the
    # finalizer could never be removed. Status is bounded only by the object (1.5 MiB).
    # (built without deep-copying the managedFields and status it drops: kube.diffbase)
    s.persistence.diffbase_storage = LeanStatusDiffBase(field="status.kopf.lastHandled")
    s.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    # Every Event goes through kappa_operator.kube.events (type Normal or Warning, reported by
    # kappa-operator, repeats counted on one Event): kopf posts none itself. Its warnings and
    # errors about an object (a handler that raised, a patch the server refused) still become
    # Warning Events there; routine successes stay out (not one per timer tick).
    s.posting.enabled = False
    route_kopf_logs(lambda: ctx().events())
    patch_refusals.install()  # a finalizer patch the server refuses: an error, not a silent wait
    return s


class RoutineSuccess(logging.Filter):
    """Drops kopf's per-run "Timer ... succeeded." lines: at 200 objects with 5 s timers they
    are thousands of INFO lines a minute that say nothing. Failures are still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (record.levelno <= logging.INFO and msg.startswith("Timer ") and msg.endswith("succeeded."))


class _Following(BaseHTTPRequestHandler):
    """A follower's liveness: kopf, whose endpoint the probe asks once the replica leads, does
    not run yet. Alive as long as this process answers."""

    def do_GET(self) -> None:  # http.server's name
        body = json.dumps({"status": "following"}).encode()
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # probes every 20 s: not logged
        pass


def lead(
    election: LeaderElection, server: str | None, health_bind: str | None, stop_flag: threading.Event | None
) -> LeaderElector | None:
    """Wait, as a follower, until this replica holds the Lease (the elector then renews it on
    its own thread); None when stopped first.

    How kopf is held on a follower: it is not started. Everything kopf writes (finalizers, its
    progress in status) and everything the handlers write happens only in a process that holds
    the Lease; a follower serves only its liveness, its metrics and a coordinator that answers
    503. When the leader cannot renew, it exits (``LOST_EXIT``) rather than stop kopf mid-write."""
    client = api_client(server, fenced=False)  # the election's own writes: the Lease, the label
    label = LeaderLabel(client, election.namespace, election.pod) if election.pod else None
    if label is not None:
        label.drop()

    def lost() -> None:
        logging.shutdown()
        os._exit(LOST_EXIT)

    elector = LeaderElector(
        LeaseLock(client, election.namespace, election.lease, timeout=election.timing.retry_period),
        election.identity,
        on_lost=lost,
        timing=election.timing,
    )
    health = None
    if health_bind is not None:
        health = ThreadingHTTPServer(split_bind(health_bind), _Following)
        threading.Thread(target=health.serve_forever, name="kappa-follower-health", daemon=True).start()
    log.info("%s: following until the Lease %s/%s is free", election.identity, election.namespace, election.lease)
    try:
        if not elector.acquire(stop_flag):
            return None
    finally:
        if health is not None:  # kopf's own endpoint takes the port
            health.shutdown()
            health.server_close()
    if label is not None:
        try:
            label.claim()
        except Exception:
            elector.release()  # no route to this replica's coordinator: let another lead
            raise
    return elector


def run_operator(opts: OperatorOptions, stop_flag: threading.Event | None = None) -> None:
    host, port = split_bind(opts.coordinator_bind)
    token = opts.token or secrets.token_urlsafe(24)
    if opts.token is None:
        log.warning("no coordinator token given: generated one for this process")
    coordinator = EmbeddedCoordinator(Service(token, leading=opts.leader_election is None), host, port).start()
    metrics = OperatorMetrics()
    metrics.include(coordinator.service.metrics.registry)
    configure(
        opts.server,
        groups=EmbeddedGroups(coordinator.service),
        coordinator_url=opts.coordinator_url or coordinator.url,
        token=token,
        metrics=metrics,
        namespaces=tuple(opts.namespaces),
        queue_limits=QueueLimits(opts.max_concurrent_backfills, opts.max_concurrent_backfills_per_namespace),
        replica=opts.leader_election.identity if opts.leader_election else None,
    )
    if opts.metrics_bind is not None:
        metrics_host, metrics_port = split_bind(opts.metrics_bind)
        metrics.serve(metrics_port, metrics_host)
    elector = None
    if opts.leader_election is not None:
        elector = lead(opts.leader_election, opts.server, opts.health_bind, stop_flag)
        if elector is None:
            coordinator.stop()
            return
        coordinator.service.leading = True
        kube_api.fence = elector.may_write
    coordinator.service.declaring_until = time.monotonic() + DECLARING_S
    metrics.leading.set(1)
    import kappa_operator.handlers  # registers the decorated handlers with kopf

    kappa_operator.handlers.progress.follow_progress_every(opts.progress_interval)

    logging.getLogger("kopf.objects").addFilter(RoutineSuccess())

    trimmer = trim_heap()
    try:
        kopf.run(
            standalone=True,
            clusterwide=not opts.namespaces,
            namespaces=list(opts.namespaces),
            liveness_endpoint=None if opts.health_bind is None else liveness_url(opts.health_bind),
            settings=settings(opts.objects_in_flight),
            stop_flag=stop_flag,
        )
    finally:
        if trimmer is not None:
            trimmer.stop()
        coordinator.service.leading = False
        if elector is not None:  # only once kopf has stopped: nothing of this process writes after
            kube_api.fence = lambda: "this process stopped leading"
            elector.release()
        coordinator.stop()
