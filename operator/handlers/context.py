"""What the handlers share in one operator process: the API server connection, the
coordinator's groups, the token drivers authenticate with, and metrics.

``configure`` is called once by ``kappa operator`` (or a test) before kopf starts."""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import kopf

from kappa_operator.cluster import Cluster
from kappa_operator.coordinator.groups import Groups
from kappa_operator.metrics import OperatorMetrics
from kappa_operator.models.common import CRModel, manifest_fields
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.streaming_job import Event

log = logging.getLogger("kappa.operator")
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=CRModel)

DEFAULT_TOKEN_SECRET = "kappa-coordinator-token"
FAULT_ENV = "KAPPA_OPERATOR_FAULT"
"""Tests: ``exit-after-create-app`` kills the process right after a SparkApplication is created
and before anything is recorded (an operator restart mid-reconcile)."""


@dataclass
class Context:
    host: str | None = None
    """API server URL (tests, emulators); None: in-cluster config, else the kubeconfig."""
    groups: Groups | None = None
    """The coordinator's groups; None: backfills run without a coordinator (unordered only)."""
    coordinator_url: str | None = None
    """How Spark drivers reach the coordinator."""
    token: str | None = None
    """The coordinator's bearer token, copied into a Secret in each backfill's namespace."""
    token_secret: str = DEFAULT_TOKEN_SECRET
    metrics: OperatorMetrics | None = None
    _cluster: Cluster | None = None

    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster.connect(self.host)
        return self._cluster


CONTEXT = Context()


def configure(host: str | None = None, **settings: Any) -> Context:
    """Replace the shared context (``kappa operator`` once; tests per test)."""
    global CONTEXT
    CONTEXT = Context(host=host, **settings)
    if CONTEXT.metrics is None:
        CONTEXT.metrics = OperatorMetrics()
    return CONTEXT


def ctx() -> Context:
    return CONTEXT


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    if CONTEXT.host is not None:
        return kopf.ConnectionInfo(server=CONTEXT.host, insecure=True)
    return kopf.login_via_client(**kwargs)


def counted(kind: str) -> Callable[[F], F]:
    """Count a handler's runs and failures (kopf retries the failures)."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            metrics = CONTEXT.metrics
            if metrics is not None:
                metrics.reconciles.labels(kind).inc()
            try:
                return fn(*args, **kwargs)
            except Exception:
                if metrics is not None:
                    metrics.errors.labels(kind).inc()
                raise

        return run  # type: ignore[return-value]

    return wrap


def parse(model: type[M], body: kopf.Body | dict[str, Any]) -> M:
    """A resource as its model; a manifest the models refuse is a permanent error (no retries)."""
    try:
        return model.model_validate(manifest_fields(dict(body)))
    except ValueError as exc:
        raise kopf.PermanentError(f"invalid {model.__name__}: {exc}") from exc


def referenced_job(namespace: str, name: str) -> StreamingJob | None:
    """The StreamingJob a Backfill or Rewind names (``jobRef``), or None while it does not exist."""
    body = CONTEXT.cluster().get_resource("streamingjobs", namespace, name)
    return None if body is None else parse(StreamingJob, body)


def observe(kind: str, body: kopf.Body | dict[str, Any], status: dict[str, Any]) -> None:
    if CONTEXT.metrics is None or not status.get("phase"):
        return
    meta = body["metadata"]
    ratio = status.get("progressRatio")
    CONTEXT.metrics.resources.observe(kind, meta["namespace"], meta["name"], status["phase"], ratio)


def forget(kind: str, body: kopf.Body | dict[str, Any]) -> None:
    if CONTEXT.metrics is not None:
        CONTEXT.metrics.resources.forget(kind, body["metadata"]["namespace"], body["metadata"]["name"])


def post_events(body: kopf.Body | dict[str, Any], events: tuple[Event, ...]) -> None:
    for e in events:
        kopf.event(body, type=e.type, reason=e.reason, message=e.message)


def crash_point(name: str) -> None:
    """Die here when the fault is armed (a test of restart mid-reconcile)."""
    if os.environ.get(FAULT_ENV) == name:
        log.error("fault %s: exiting", name)
        os._exit(137)


_BUSY: set[tuple[str, ...]] = set()
_BUSY_LOCK = threading.Lock()


@contextmanager
def exclusive(*key: str) -> Iterator[bool]:
    """Whether this thread may go ahead with ``key`` (e.g. a publish or a rewind of one object):
    kopf runs an object's event handlers and its timers concurrently, and two restores into one
    directory, or two publishes of one branch, must not overlap. The operator runs as one
    process (standalone), so an in-process guard is enough."""
    with _BUSY_LOCK:
        if key in _BUSY:
            yield False
            return
        _BUSY.add(key)
    try:
        yield True
    finally:
        with _BUSY_LOCK:
            _BUSY.discard(key)
