"""Kubernetes Events as ``kubectl describe`` and ``kubectl get events`` readers expect them:
the one way the operator posts an Event, its handlers' and kopf's own alike.

kopf's posting (switched off in ``runner.settings``) gets three things wrong for a reader:
failures are type ``Error``, which Kubernetes does not know (``--field-selector type=Warning``
misses them); the reporting component is "kopf", not the operator a user installed; and
every occurrence is a new Event object, so a handler retried every 30 s writes 120 Events an
hour about one object. Here, as client-go's ``EventCorrelator`` does:

* the type is ``Normal`` or ``Warning`` (anything else, ``Error`` included, is a Warning);
* ``source.component`` and ``reportingComponent`` are ``kappa-operator``, and
  ``reportingInstance`` the pod's name (``HOSTNAME``) when there is one;
* an Event seen before in this process (same object uid, type, reason and message) is the
  same Event object, patched with ``count`` + 1 and a new ``lastTimestamp``;
* one whose message changes on every occurrence (an attempt number, an error's details) is
  combined, as client-go does, from the ``SIMILAR_LIMIT``-th different message of one
  (object, type, reason) within ``SIMILAR_WINDOW``: these patch one Event whose message
  starts with "(combined from similar events): " and is the latest;
* the same Event again within ``DEDUP_WINDOW`` is dropped (a handler and its retry, or a
  timer and an event handler, saying one thing twice).

The decisions are pure (:class:`Correlator`, a bounded in-memory cache); the I/O
(:class:`EventRecorder`) runs on one background thread, so neither the handlers' threads nor
kopf's event loop (where kopf logs its failures) wait for the API server, and one object's
Events are written in the order they were recorded.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from kappa_operator.kube.api import Cluster

log = logging.getLogger("kappa.operator")

COMPONENT = "kappa-operator"
"""``source.component`` and ``reportingComponent``: the "From" column of ``kubectl describe``."""
MAX_ENTRIES = 4096
"""Events remembered per cache (client-go's ``maxLruCacheEntries``); the oldest go first."""
DEDUP_WINDOW = 1.0
"""Seconds within which the same Event again is dropped, not counted."""
SIMILAR_LIMIT = 10
"""The different message of one (object, type, reason) that is the first combined (client-go's
``maxEvents``)."""
SIMILAR_WINDOW = 600.0
"""Seconds those messages must fall within (client-go's ``maxIntervalInSeconds``)."""
COMBINED = "(combined from similar events): "
MESSAGE_LIMIT = 1024
"""The API server refuses longer messages for events.k8s.io and kopf cuts at this too."""
NAME_LIMIT = 253
IDLE_EXIT = 5.0
"""Seconds the background writer waits for work before it exits (started again on demand)."""


def event_type(kind: str) -> str:
    """``Normal`` stays; everything else (kopf's ``Error`` and ``Fatal``) is a ``Warning``:
    Kubernetes knows only these two, and ``kubectl get events --field-selector type=Warning``
    is how failures are looked for."""
    return "Normal" if kind == "Normal" else "Warning"


def level_type(levelno: int) -> str:
    """The Event type of a log record's level: a warning or worse is a Warning."""
    return "Warning" if levelno >= logging.WARNING else "Normal"


def cut(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """Keep the head and the tail of a long message (an error's cause is often at the end)."""
    if len(message) <= limit:
        return message
    half = (limit - 3) // 2
    return f"{message[:half]}...{message[-(limit - 3 - half) :]}"


def object_ref(body: Mapping[str, Any]) -> dict[str, str]:
    """``involvedObject`` of a resource's body (kopf's Body or a dict)."""
    meta = body.get("metadata") or {}
    ref = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
    }
    return {k: str(v) for k, v in ref.items() if v}


def _identity(ref: Mapping[str, str]) -> str:
    """Which object an Event is about: its uid (a namesake created later is another object),
    else its coordinates."""
    return ref.get("uid") or "/".join(ref.get(k, "") for k in ("apiVersion", "kind", "namespace", "name"))


# --- what to do with an occurrence (pure) -----------------------------------------------


@dataclass(frozen=True)
class Create:
    """Post a new Event named ``name`` with ``message``."""

    name: str
    message: str


@dataclass(frozen=True)
class Aggregate:
    """Patch the Event ``name`` posted before: ``count``, ``message`` (the latest, for a
    combined one) and the last time seen."""

    name: str
    count: int
    message: str


@dataclass(frozen=True)
class Drop:
    """The same Event within ``DEDUP_WINDOW``: nothing to write."""


Decision = Create | Aggregate | Drop
Key = tuple[str, str, str, str | None]
"""(object, type, reason, message); message None: the combined Event of similar ones."""


@dataclass
class _Posted:
    name: str
    count: int


class _Lru(OrderedDict[Any, Any]):
    """An OrderedDict that keeps its newest ``limit`` entries: the operator runs for months,
    over objects created and deleted, and must not remember them all."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class Correlator:
    """Decides, for each occurrence of an Event, whether it is new, a repeat of one posted
    before (patched) or a duplicate (dropped), from what this process posted. Pure: time is
    given, nothing is written; the caller does the API call and calls :meth:`forget` when a
    create failed or the Event it would patch is gone (Events expire after an hour)."""

    def __init__(
        self,
        limit: int = MAX_ENTRIES,
        dedup_window: float = DEDUP_WINDOW,
        similar_limit: int = SIMILAR_LIMIT,
        similar_window: float = SIMILAR_WINDOW,
    ) -> None:
        self.dedup_window, self.similar_limit, self.similar_window = dedup_window, similar_limit, similar_window
        self._posted: _Lru = _Lru(limit)  # Key -> _Posted
        self._last_seen: _Lru = _Lru(limit)  # exact Key -> when it last occurred
        self._similar: _Lru = _Lru(limit)  # (object, type, reason) -> (first seen, messages)
        self._last_stamp = 0

    def observe(self, ref: Mapping[str, str], kind: str, reason: str, message: str, now: float) -> Decision:
        """What to write for ``ref``'s Event at ``now`` (seconds since the epoch)."""
        obj = _identity(ref)
        exact: Key = (obj, kind, reason, message)
        last = self._last_seen.get(exact)
        if last is not None and now - last < self.dedup_window:
            return Drop()
        self._last_seen.put(exact, now)
        key, text = exact, message
        if self._combines((obj, kind, reason), message, now):
            key, text = (obj, kind, reason, None), COMBINED + message
        posted = self._posted.get(key)
        if posted is None:
            name = self._name(ref.get("name") or "object", now)
            self._posted.put(key, _Posted(name, 1))
            return Create(name, text)
        posted.count += 1
        self._posted.move_to_end(key)
        return Aggregate(posted.name, posted.count, text)

    def forget(self, name: str) -> None:
        """The Event ``name`` was not created, or is gone: the next occurrence posts anew."""
        for key in [k for k, p in self._posted.items() if p.name == name]:
            del self._posted[key]

    def _combines(self, group: tuple[str, str, str], message: str, now: float) -> bool:
        """client-go's ``EventAggregator``: True for the ``similar_limit``-th different message
        of ``group`` within ``similar_window`` of the first, and every new one after it; the
        messages seen before it keep their own Events (counted up when they recur)."""
        first, messages = self._similar.get(group, (now, frozenset()))
        if now - first > self.similar_window:
            first, messages = now, frozenset()
        if message not in messages and len(messages) < self.similar_limit - 1:
            messages = messages | {message}
        self._similar.put(group, (first, messages))
        return message not in messages

    def _name(self, involved: str, now: float) -> str:
        """client-go's ``<object>.<nanoseconds in hex>``: named by the client so that a create
        never needs ``generateName``; unique in this process even for two in one nanosecond."""
        self._last_stamp = max(int(now * 1e9), self._last_stamp + 1)
        suffix = f".{self._last_stamp:x}"
        return involved[: NAME_LIMIT - len(suffix)] + suffix


# --- writing them (the I/O edge) --------------------------------------------------------


def rfc3339(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Occurrence:
    ref: dict[str, str]
    type: str
    reason: str
    message: str
    at: float


class EventRecorder:
    """Records Events on objects: :meth:`event` returns at once, one background thread
    correlates and writes them through ``cluster`` (a callable, so a recorder made before the
    connection is not the one that connects)."""

    def __init__(
        self,
        cluster: Callable[[], Cluster],
        instance: str | None = None,
        correlator: Correlator | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster, self._clock = cluster, clock
        self.instance = instance if instance is not None else os.environ.get("HOSTNAME", "")
        self.correlator = correlator or Correlator()
        self._queue: queue.Queue[_Occurrence] = queue.Queue()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def event(self, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        """Record an Event on the resource ``body``."""
        self.record(object_ref(body), kind, reason, message)

    def record(self, ref: Mapping[str, str], kind: str, reason: str, message: str) -> None:
        """Record an Event on the object ``ref`` (an ``involvedObject``); the time is now, not
        when it is written, so that duplicates are told by when they happened."""
        if ref.get("apiVersion") == "v1" and ref.get("kind") == "Event":
            return  # an Event about an Event would be written for every one written
        self._queue.put(_Occurrence(dict(ref), event_type(kind), reason, cut(message), self._clock()))
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="kappa-events", daemon=True)
                self._worker.start()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything recorded so far is written (or given up on); False on timeout."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def _run(self) -> None:
        while True:
            try:
                occurrence = self._queue.get(timeout=IDLE_EXIT)
            except queue.Empty:
                with self._lock:  # under the lock that record() starts a writer under: none is lost
                    if self._queue.empty():
                        self._worker = None
                        return
                continue
            try:
                self._write(occurrence)
            except ApiException as exc:
                if exc.status == 403 and "being terminated" in str(exc.body):  # no RBAC gap: the namespace is going
                    log.info("not posting the event %s: its namespace is being deleted", _describe(occurrence))
                else:
                    log.warning("could not post the event %s", _describe(occurrence), exc_info=True)
            except Exception:  # Events are auxiliary: never the reason a handler fails
                log.warning("could not post the event %s", _describe(occurrence), exc_info=True)
            finally:
                self._queue.task_done()

    def _write(self, o: _Occurrence) -> None:
        decision = self.correlator.observe(o.ref, o.type, o.reason, o.message, o.at)
        if isinstance(decision, Drop):
            return
        namespace = o.ref.get("namespace") or "default"
        count = 1
        if isinstance(decision, Aggregate):
            patch = {"count": decision.count, "lastTimestamp": rfc3339(o.at), "message": decision.message}
            if self._cluster().patch_event(namespace, decision.name, patch):
                return
            count = decision.count  # expired (after an hour by default): created again, as client-go does
        try:
            self._cluster().create_event(namespace, self._body(o, decision.name, decision.message, count, namespace))
        except BaseException:
            self.correlator.forget(decision.name)  # not there: the next occurrence creates one
            raise

    def _body(self, o: _Occurrence, name: str, message: str, count: int, namespace: str) -> dict[str, Any]:
        stamp = rfc3339(o.at)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {**o.ref, "namespace": namespace},
            "type": o.type,
            "reason": o.reason,
            "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "count": count,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
        }
        if self.instance:
            body["reportingInstance"] = self.instance
        return body


def _describe(o: _Occurrence) -> str:
    return f"{o.type} {o.reason} on {o.ref.get('kind')} {o.ref.get('namespace')}/{o.ref.get('name')}: {o.message!r}"


# --- kopf's own log lines about objects ---------------------------------------------------

KOPF_OBJECTS = "kopf.objects"
"""The logger of kopf's per-object records (``kopf._core.actions.loggers``): a handler's
failure, a patch the server refused, a handler's own ``logger.warning``."""
LOGGED = "Logging"
"""The reason kopf gives the Events of its log lines (kept: users and tests look for it)."""


class KopfLogEvents(logging.Handler):
    """Turns kopf's warnings and errors about an object into Events through the recorder, as
    kopf's own ``K8sPoster`` did before its posting was switched off: a handler that raised
    is still a Warning Event on the object, not only a log line.

    A record is about an object when kopf's ``ObjectLogger`` gave it ``k8s_ref`` (the
    ``involvedObject``); ``k8s_skip`` marks the lines kopf keeps to the log."""

    def __init__(self, recorder: Callable[[], EventRecorder | None]) -> None:
        super().__init__(logging.WARNING)
        self._recorder = recorder

    def filter(self, record: logging.LogRecord) -> bool:
        ref = getattr(record, "k8s_ref", None)
        return isinstance(ref, Mapping) and not getattr(record, "k8s_skip", False) and bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            recorder = self._recorder()
            if recorder is not None:
                recorder.record(record.k8s_ref, level_type(record.levelno), LOGGED, self.format(record))  # type: ignore[attr-defined]
        except Exception:
            self.handleError(record)


def route_kopf_logs(recorder: Callable[[], EventRecorder | None]) -> KopfLogEvents:
    """Install the one :class:`KopfLogEvents` on kopf's object logger (replacing an earlier
    one: settings are made once per operator run, and tests run many)."""
    logger = logging.getLogger(KOPF_OBJECTS)
    for old in [h for h in logger.handlers if isinstance(h, KopfLogEvents)]:
        logger.removeHandler(old)
    handler = KopfLogEvents(recorder)
    logger.addHandler(handler)
    return handler
