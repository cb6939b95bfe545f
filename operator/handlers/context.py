"""What the handlers share in one operator process: the API server connection, the
coordinator's groups, the token drivers authenticate with, and metrics.

``configure`` is called once by ``kappa operator`` (or a test) before kopf starts."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import kopf

from kappa_operator.coordinator.groups import Groups
from kappa_operator.kube.api import Cluster, ForeignObjectError
from kappa_operator.kube.events import EventRecorder
from kappa_operator.models.common import CRModel, manifest_fields
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.backfill_queue import QueueLimits
from kappa_operator.reconcile.events import Event
from kappa_operator.reconcile.failures import RETRY_DELAY, Failure, changes_nothing, failure_status, with_recovery
from kappa_operator.reconcile.phases import app_state, driver_pod, now_rfc3339, with_last_words
from kappa_operator.service.metrics import OperatorMetrics, backfill_times
from spark_app.contract.storage import S3Options

log = logging.getLogger("kappa.operator")
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=CRModel)

READ_TIMEOUTS = S3Options(connect_timeout=3.0, request_timeout=10.0, max_attempts=2)
"""How long the operator waits on a job's store when it reads the few-KB reports its drivers
leave under ``_kappa/``: an unreachable bucket costs that job a few seconds, never the others."""

READERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kappa-reports")
"""The threads that read the jobs' reports: apart from the handlers' (kopf's pool) and from
asyncio's default, so a slow store never holds up a decision, a deletion or another job."""


T = TypeVar("T")


async def until_stopped(stopped: Any, fn: Callable[[], T]) -> tuple[bool, T | None]:
    """``fn()`` on the readers' threads, unless the look is stopped first (the object is being
    deleted, or the operator exits): a deleted object's deletion handler waits for its looks in
    flight (``followers.wait_idle``), and a read stuck on storage must not hold it (issue 39)."""
    reading = asyncio.get_running_loop().run_in_executor(READERS, fn)
    if stopped is None:
        return False, await reading
    stop = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({reading, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
    if not reading.done():
        reading.add_done_callback(_discard)  # the thread ends by itself (bounded timeouts)
        return True, None
    return False, reading.result()


def _discard(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()  # read, so asyncio does not log "exception was never retrieved"


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
    """The coordinator's admin token: each backfill's credential is derived from it, scoped to
    its alignment group (``coordinator.scopes``)."""
    metrics: OperatorMetrics | None = None
    namespaces: tuple[str, ...] = ()
    """The namespaces watched (empty: the whole cluster): where the queue counts backfills."""
    queue_limits: QueueLimits = field(default_factory=QueueLimits)
    """backfills.maxConcurrent and maxConcurrentPerNamespace."""
    replica: str | None = None
    """Which of the operator's replicas this is (its Lease identity, the pod's name), named in
    what it says after taking over; None: the only one."""
    lost_nodes: Mapping[str, Iterable[str]] = field(default_factory=dict)
    """Nodes that are not Ready, by name, with since when (kopf's index of the Nodes' watch,
    ``handlers.nodes``): empty while every node answers, the usual case, where nothing more
    is read."""
    cordoned_nodes: Mapping[str, Iterable[bool]] = field(default_factory=dict)
    """Nodes marked unschedulable (a drain's first step), by name (``handlers.nodes``): empty
    but during a drain, when a StreamingJob's driver on one moves (``reconcile.node_drain``)."""
    _cluster: Cluster | None = None
    _events: EventRecorder | None = None

    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster.connect(self.host)
        return self._cluster

    def events(self) -> EventRecorder:
        """The one recorder of this operator's Events (its cache is what aggregates them)."""
        if self._events is None:
            self._events = EventRecorder(self.cluster)
        return self._events


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


def with_driver_words(app: dict[str, Any] | None, namespace: str, recorded: str | None) -> dict[str, Any] | None:
    """A failed application with its driver's last words (its pod's termination message) in
    its error message; any other as it is. Read once per failed state: ``recorded``, the state
    the owner's status already holds, is the same while it backs off or stays Failed (the
    timer's every look would otherwise read the pod)."""
    pod = driver_pod(app)
    if pod is None or app_state(app) == recorded:
        return app
    return with_last_words(app, ctx().cluster().driver_last_words(namespace, pod))


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    if CONTEXT.host is not None:
        return kopf.ConnectionInfo(server=CONTEXT.host, insecure=True)
    return kopf.login_via_client(**kwargs)


def counted(kind: str) -> Callable[[F], F]:
    """Count a handler's runs and failures (kopf retries the failures)."""

    def tally(failed: bool) -> None:
        metrics = CONTEXT.metrics
        if metrics is not None:
            (metrics.errors if failed else metrics.reconciles).labels(kind).inc()

    def wrap(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                tally(False)
                try:
                    return await fn(*args, **kwargs)
                except Exception:
                    tally(True)
                    raise

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            tally(False)
            try:
                return fn(*args, **kwargs)
            except Exception:
                tally(True)
                raise

        return run  # type: ignore[return-value]

    return wrap


PLURALS = {"StreamingJob": "streamingjobs", "Backfill": "backfills", "Rewind": "rewinds"}


def reported(kind: str) -> Callable[[F], F]:
    """``counted``, and a failure shown on the object (``reconcile.failures``): status message,
    a condition and a Warning Event, with the attempt number for the ones kopf retries. A
    name conflict and other transient errors are retried after a delay; a refused spec is not."""

    def wrap(fn: F) -> F:
        counted_fn = counted(kind)(fn)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await counted_fn(*args, **kwargs)
                except Exception as exc:
                    # the API calls that show it block: never on the event loop kopf runs on
                    await asyncio.to_thread(_failed, kind, kwargs, exc)

            return run_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return counted_fn(*args, **kwargs)
            except Exception as exc:
                _failed(kind, kwargs, exc)

        return run  # type: ignore[return-value]

    return wrap


def _failed(kind: str, kwargs: dict[str, Any], exc: Exception) -> NoReturn:
    """Show ``exc`` on the object, then raise what tells kopf whether and when to retry."""
    body, attempt = kwargs.get("body"), int(kwargs.get("retry") or 0) + 1
    if isinstance(exc, kopf.PermanentError):
        _show(kind, body, Failure("InvalidSpec", str(exc), attempt))
        raise exc
    if isinstance(exc, kopf.TemporaryError):
        raise exc
    reason = "NameConflict" if isinstance(exc, ForeignObjectError) else "RetryingAfterError"
    text = str(exc) if reason == "NameConflict" else f"{type(exc).__name__}: {exc}"
    failure = Failure(reason, text, attempt)
    _show(kind, body, failure)
    raise kopf.TemporaryError(failure.message, delay=RETRY_DELAY[reason]) from exc


def shown(kind: str, body: Any, exc: Exception) -> None:
    """A failure of a handler kopf does not retry (an event of a child): shown on the owner."""
    try:
        _failed(kind, {"body": body}, exc)
    except Exception:
        log.debug("shown on %s %s", kind, body["metadata"].get("name"))


def _show(kind: str, body: Any, failure: Failure) -> None:
    if body is None:
        return
    meta = body["metadata"]
    where = f"{kind} {meta.get('namespace')}/{meta.get('name')}"
    log.warning("%s: %s: %s", where, failure.reason, failure.message)
    try:
        cluster = CONTEXT.cluster()
        # the status as it is now (the handler may have written since kopf's copy was taken)
        fresh = cluster.get_resource(PLURALS[kind], meta["namespace"], meta["name"]) or dict(body)
        fields = failure_status(kind, fresh.get("status") or {}, failure, now_rfc3339(), meta.get("generation"))
        cluster.patch_status(PLURALS[kind], meta["namespace"], meta["name"], fields)
        # the error without "attempt N": the Event's count says how often, and a repeat of
        # one error is then one Event counted up, not a new Event on every retry
        post_event(body, "Warning", failure.reason, failure.error)
    except Exception:  # the API server itself is what fails: the log line above is what is left
        log.exception("%s: could not record the failure on the object", where)


def record(kind: str, body: Any, status: dict[str, Any]) -> None:
    """Write a handler's status: the operator's one path to its resources' status (the status
    subresource), clearing an earlier failure's retry count and error once a handler succeeds.
    Never through kopf's patch: that lands after the handler returns, and could then overwrite
    what an application's event recorded meanwhile (two writers). A write that changes nothing
    is not sent."""
    written = status_to_send(body, status)
    if written is not None:
        meta = body["metadata"]
        CONTEXT.cluster().patch_status(PLURALS[kind], meta["namespace"], meta["name"], written)


def records_nothing(body: Mapping[str, Any], status: dict[str, Any]) -> bool:
    """Whether ``record`` of ``status`` on the object as ``body`` shows it would send nothing: a
    look decided on the watch's copy then needs no fresh read either."""
    return status_to_send(body, status) is None


def status_to_send(body: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
    """The status ``record`` sends for ``status`` on the object as ``body`` (an earlier failure's
    retry count cleared), or None when it would change nothing there."""
    current = dict(body.get("status") or {})
    written = with_recovery(current, status, now_rfc3339(), body["metadata"].get("generation"))
    return None if changes_nothing(current, written) else written


def parse(model: type[M], body: kopf.Body | dict[str, Any]) -> M:
    """A resource as its model; a manifest the models refuse is a permanent error (no retries).
    Overflow and type errors count too: a value the schema let through must not loop."""
    try:
        return model.model_validate(manifest_fields(dict(body)))
    except (ValueError, OverflowError, TypeError) as exc:
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
    times = backfill_times(status) if kind == "Backfill" else None
    CONTEXT.metrics.resources.observe(kind, meta["namespace"], meta["name"], status["phase"], ratio, times)


def forget(kind: str, body: kopf.Body | dict[str, Any]) -> None:
    if CONTEXT.metrics is not None:
        CONTEXT.metrics.resources.forget(kind, body["metadata"]["namespace"], body["metadata"]["name"])


def post_events(body: kopf.Body | dict[str, Any], events: tuple[Event, ...]) -> None:
    for e in events:
        post_event(body, e.type, e.reason, e.message)


def post_event(body: kopf.Body | dict[str, Any], type: str, reason: str, message: str) -> None:
    """An Event on the object (``kappa_operator.kube.events``): returns at once, written in the
    background, so a handler on kopf's event loop may call it too."""
    CONTEXT.events().event(body, type, reason, message)


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
    an object's event handlers and its periodic looks run concurrently, and two restores into one
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
