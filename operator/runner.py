"""``kappa operator``: kopf with the watermark coordinator embedded in the same process.

Embedded because the operator is who declares and removes alignment groups for the
backfills it launches: one process, one Deployment, nothing to keep in sync. Spark drivers
reach the coordinator through the chart's Service (``--coordinator-url``)."""

from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass

import kopf

from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.handlers.context import DEFAULT_TOKEN_SECRET, configure
from kappa_operator.metrics import OperatorMetrics

log = logging.getLogger("kappa.operator")


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
    token_secret: str = DEFAULT_TOKEN_SECRET
    metrics_port: int | None = None
    health_port: int | None = None


def settings() -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.scanning.disabled = True  # CRDs come with the chart: no cluster-wide CRD watch, no such RBAC
    s.persistence.finalizer = "kappa.dev/finalizer"
    s.watching.server_timeout = 60
    s.watching.client_timeout = 90
    s.posting.level = logging.INFO
    return s


def run_operator(opts: OperatorOptions, stop_flag: threading.Event | None = None) -> None:
    host, _, port = opts.coordinator_bind.rpartition(":")
    token = opts.token or secrets.token_urlsafe(24)
    if opts.token is None:
        log.warning("no coordinator token given: generated one for this process")
    coordinator = EmbeddedCoordinator(Service(token), host or "127.0.0.1", int(port)).start()
    metrics = OperatorMetrics()
    metrics.include(coordinator.service.metrics.registry)
    configure(
        opts.server,
        groups=EmbeddedGroups(coordinator.service),
        coordinator_url=opts.coordinator_url or coordinator.url,
        token=token,
        token_secret=opts.token_secret,
        metrics=metrics,
    )
    if opts.metrics_port is not None:
        metrics.serve(opts.metrics_port)
    import kappa_operator.handlers  # noqa: F401  (registers the handlers with kopf)

    try:
        kopf.run(
            standalone=True,
            clusterwide=not opts.namespaces,
            namespaces=list(opts.namespaces),
            liveness_endpoint=None if opts.health_port is None else f"http://0.0.0.0:{opts.health_port}/healthz",
            settings=settings(),
            stop_flag=stop_flag,
        )
    finally:
        coordinator.stop()
