"""The operator's periodic looks at its objects (a job's progress, a backfill's group, a rewind's
waiting phase): one loop per look, over a kopf index, instead of a kopf timer per object.

Why not kopf's timers: for every object of a kind with a timer, kopf keeps the object's latest
full body (``managedFields``, kubectl's last-applied copy, its own diff-base) and one task per
timer, for as long as the object exists. At 5,000 objects that was 243 MB of bodies and 7,500
tasks, and each task's bookkeeping was most of the operator's CPU once every object had settled
(issue 62). Here each kind's watch keeps one trimmed copy per object in an index (what the looks
read: metadata without ``managedFields`` or the big annotations, spec, status without kopf's
own; kept as compact JSON, ``kube.packed``), and a loop per look runs what is due, at most
``RUNNING`` at a time.

The timing is kopf's: an object's first look ``initial_delay`` after it (re)qualifies, the next
``interval`` after a look ends (never two at once for one object), a ``TemporaryError``'s
delay instead when one is raised, nothing once ``when`` stops holding or the object is being
deleted (a look in flight is told through ``stopped``). Objects found at start are spread over
one interval, so a restarted operator does not look at 5,000 objects in the same second.

A deletion handler calls ``wait_idle`` first: a look of the object still in flight finishes
before the object's children are removed (kopf did not wait for a sync timer either)."""

from __future__ import annotations

import asyncio
import functools
import heapq
import inspect
import logging
import random
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import kopf

from kappa_operator.kube.events import KOPF_OBJECTS, object_ref
from kappa_operator.kube.packed import packed, unpacked
from kappa_operator.models.common import GROUP, VERSION

Key = tuple[str, str]
"""(namespace, name)."""

RUNNING = 16
"""Looks of one kind in flight at once: each is a few ms of CPU and at most a few bounded reads,
so more would only queue on the GIL and the API server."""

COALESCE_S = 0.1
"""How long a woken loop lets other changes gather before its pass: a look is at most this late."""

FAILED_DELAY = 60.0
"""After an error that is not kopf's (``reported`` turns the handlers' own into kopf's): kopf's
default backoff."""

HEAVY_ANNOTATIONS = frozenset(
    {"kubectl.kubernetes.io/last-applied-configuration", "kopf.zalando.org/last-handled-configuration"}
)
"""Copies of the whole spec kept in annotations: nothing a look reads, as large as the spec."""


def trimmed(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a look reads of an object: the parts it is decided on, without the copies and the
    bookkeeping that make up most of a body's size. The nested dicts are the watch event's own."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if annotations and not HEAVY_ANNOTATIONS.isdisjoint(annotations):
        meta["annotations"] = {k: v for k, v in annotations.items() if k not in HEAVY_ANNOTATIONS}
    out: dict[str, Any] = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": meta}
    if body.get("spec") is not None:
        out["spec"] = body["spec"]
    status = body.get("status")
    if status is not None:
        out["status"] = {k: v for k, v in status.items() if k != "kopf"} if "kopf" in status else status
    return out


def deleting(body: Mapping[str, Any]) -> bool:
    return bool((body.get("metadata") or {}).get("deletionTimestamp"))


# --- when each object's next look is due: pure, the clock passed in --------------------------


@dataclass
class Schedule:
    """The due times of one look's objects. An object is *followed* while its look applies
    (``when`` holds, not being deleted); a followed object is due once, runs, and is due again
    ``interval`` after its run ended (or after a retry's delay)."""

    interval: float
    initial_delay: float = 0.0
    due: dict[Hashable, float] = field(default_factory=dict)
    running: set[Hashable] = field(default_factory=set)
    retries: dict[Hashable, int] = field(default_factory=dict)
    _heap: list[tuple[float, int, Hashable]] = field(default_factory=list)
    _seq: int = 0

    def seen(self, key: Hashable, followed: bool, now: float, spread: float = 0.0) -> None:
        """The object as its latest event shows it. A newly followed one is first due after the
        initial delay (plus ``spread``: objects found at start); one no longer followed is
        dropped (a run in flight ends on its own, and is not scheduled again)."""
        if not followed:
            self.due.pop(key, None)
            self.retries.pop(key, None)
            return
        if key in self.due or key in self.running:
            return
        self._at(key, now + self.initial_delay + spread)

    def take(self, now: float, limit: int) -> list[Hashable]:
        """Up to ``limit`` due objects, oldest due first, now marked running."""
        out: list[Hashable] = []
        while self._heap and len(out) < limit and self._heap[0][0] <= now:
            at, _, key = heapq.heappop(self._heap)
            if self.due.get(key) != at or key in self.running:
                continue  # dropped, or rescheduled since
            del self.due[key]
            self.running.add(key)
            out.append(key)
        return out

    def finished(self, key: Hashable, now: float, followed: bool, retry_after: float | None) -> None:
        """A run ended: due again after ``interval`` (or ``retry_after``, a failure to retry),
        if the object is still followed."""
        self.running.discard(key)
        if retry_after is None:
            self.retries.pop(key, None)
        else:
            self.retries[key] = self.retries.get(key, 0) + 1
        if not followed:
            self.retries.pop(key, None)
            return
        self._at(key, now + (self.interval if retry_after is None else retry_after))

    def next_due(self) -> float | None:
        while self._heap and self.due.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)  # stale entries: dropped or rescheduled objects
        return self._heap[0][0] if self._heap else None

    def _at(self, key: Hashable, at: float) -> None:
        self.due[key] = at
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, key))


# --- the looks that exist: registered at import (and the progress look at start) --------------


@dataclass(frozen=True)
class Look:
    """One periodic look at each object of a kind, as a kopf timer declared it."""

    plural: str
    fn: Callable[..., Any]
    interval: float
    initial_delay: float = 0.0
    when: Callable[[Mapping[str, Any]], bool] | None = None

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", repr(self.fn))

    def follows(self, body: Mapping[str, Any] | None) -> bool:
        return body is not None and not deleting(body) and (self.when is None or bool(self.when(body)))


LOOKS: list[Look] = []


def every(
    plural: str, interval: float, initial_delay: float = 0.0, when: Callable[[Mapping[str, Any]], bool] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` as a look at each object of ``plural`` (kwargs as kopf gives a timer:
    ``body``, ``stopped``, ``retry``, the indexes). ``when`` gets the trimmed body."""
    if interval <= 0:
        raise ValueError(f"a look's interval must be > 0 s, got {interval}")

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        LOOKS.append(Look(plural, fn, interval, initial_delay, when))
        return fn

    return register


# --- the kinds' indexes: kopf keeps them from the watches it runs anyway -----------------------


def _indexed(plural: str) -> Callable[..., Any]:
    async def index(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, bytes]:
        current = FOLLOWING
        if current is not None:
            current.changed(plural, (namespace, name))
        return {(namespace, name): packed(trimmed(body))}

    index.__name__ = index.__qualname__ = f"followed_{plural}"
    # async: no I/O; a sync index would run in kopf's thread pool behind the blocking handlers
    return kopf.index(GROUP, VERSION, plural)(index)


PLURALS = ("streamingjobs", "backfills", "rewinds")
INDEXES = {plural: _indexed(plural) for plural in PLURALS}


def _about(body: Mapping[str, Any]) -> logging.LoggerAdapter[logging.Logger]:
    """kopf's per-object logger, as its timers logged a failure: the line becomes a Warning Event
    on the object too (``kube.events.KopfLogEvents``), beside what ``reported`` shows."""
    return logging.LoggerAdapter(logging.getLogger(KOPF_OBJECTS), {"k8s_ref": object_ref(body)})


# --- the loops ---------------------------------------------------------------------------------


class Stopped:
    """A look's ``stopped`` (kopf's ``DaemonStopped``: ``wait()`` and truthiness): set when its
    object is being deleted or gone, or the operator stops."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> bool:
        return await self._event.wait()


@dataclass
class _Run:
    stopped: Stopped
    done: threading.Event


class LookLoop:
    """One look over one kind's index: wakes when an object changes or a look is due."""

    def __init__(
        self,
        look: Look,
        index: Mapping[Key, Iterable[bytes]],
        executor: Executor | None,
        indexes: Mapping[str, Any],
        clock: Callable[[], float],
        running: int = RUNNING,
    ) -> None:
        self.look, self.index, self.executor, self.indexes = look, index, executor, dict(indexes)
        self.schedule = Schedule(look.interval, look.initial_delay)
        self.clock, self.limit = clock, running
        self.started = clock()
        self.pending: set[Key] = set(self._keys())
        self.runs: dict[Key, _Run] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self.uids: dict[Key, str | None] = {}

    def _keys(self) -> list[Key]:
        return list(self.index.keys())

    def body(self, key: Key) -> dict[str, Any] | None:
        store = self.index.get(key)
        copy = next(iter(store), None) if store else None
        return None if copy is None else unpacked(copy)

    def changed(self, key: Key) -> None:
        self.pending.add(key)
        self.wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        while True:
            self.wake.clear()
            now = self.clock()
            self._observe(now)
            for key in self.schedule.take(now, self.limit - len(self.runs)):
                self._start(key)
            if timer is not None:
                timer.cancel()
                timer = None
            # all slots taken: a run's end wakes the loop (a due time already past would spin it)
            at = self.schedule.next_due() if len(self.runs) < self.limit else None
            if at is not None:
                timer = loop.call_later(max(0.0, at - self.clock()), self.wake.set)
            await self.wake.wait()
            # a burst of events (1,000 objects created at once) is one pass, not one per event
            await asyncio.sleep(COALESCE_S)

    def _observe(self, now: float) -> None:
        # spread over one interval what a (re)started operator finds in its first listing
        spread_window = max(self.look.interval, 10.0)
        keys, self.pending = self.pending, set()
        for key in keys:
            body = self.body(key)
            followed = self.look.follows(body)
            uid = None if body is None else body["metadata"].get("uid")
            if key in self.uids and self.uids[key] != uid:  # deleted and created again: a new object
                self.schedule.seen(key, False, now)
            self.uids[key] = uid
            if body is None:
                self.uids.pop(key, None)
            if not followed and key in self.runs and (body is None or deleting(body)):
                self.runs[key].stopped.set()
            spread = random.uniform(0, self.look.interval) if now - self.started < spread_window else 0.0
            self.schedule.seen(key, followed, now, spread)

    def _start(self, key: Key) -> None:
        body = self.body(key)
        if not self.look.follows(body):
            self.schedule.finished(key, self.clock(), False, None)
            return
        assert body is not None
        run = _Run(Stopped(), threading.Event())
        self.runs[key] = run
        task = asyncio.create_task(self._one(key, body, run), name=f"{self.look.name} {key[0]}/{key[1]}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, key: Key, body: dict[str, Any], run: _Run) -> None:
        retry_after: float | None = None
        kwargs = {**self.indexes, "body": body, "stopped": run.stopped, "retry": self.schedule.retries.get(key, 0)}
        try:
            if inspect.iscoroutinefunction(self.look.fn):
                await self.look.fn(**kwargs)
            else:
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(self.executor, functools.partial(self.look.fn, **kwargs))
        except asyncio.CancelledError:
            raise
        except kopf.TemporaryError as exc:
            retry_after = float(exc.delay) if exc.delay is not None else self.look.interval
            _about(body).error("Look %r failed temporarily: %s", self.look.name, exc)
        except kopf.PermanentError as exc:  # looked at again next interval, as kopf does
            _about(body).error("Look %r failed permanently: %s", self.look.name, exc)
        except Exception as exc:
            retry_after = FAILED_DELAY
            msg = f"{type(exc).__name__}: {exc}"
            _about(body).error("Look %r failed; again in %.0f s: %s", self.look.name, FAILED_DELAY, msg)
        finally:
            self.runs.pop(key, None)
            run.done.set()
        self.schedule.finished(key, self.clock(), self.look.follows(self.body(key)), retry_after)
        self.wake.set()

    def in_flight(self, key: Key) -> _Run | None:
        return self.runs.get(key)

    def stop(self) -> None:
        for run in list(self.runs.values()):
            run.stopped.set()


class Following:
    """The loops of one operator run: started by kopf's startup, stopped by its cleanup."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.event_loop = loop
        self.loops: dict[str, list[LookLoop]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, loops: Iterable[LookLoop]) -> None:
        for look_loop in loops:
            self.loops.setdefault(look_loop.look.plural, []).append(look_loop)
            self.tasks.append(asyncio.create_task(look_loop.run(), name=f"look {look_loop.look.name}"))

    def changed(self, plural: str, key: Key) -> None:
        for look_loop in self.loops.get(plural, ()):
            look_loop.changed(key)

    async def stop(self, grace: float = 5.0) -> None:
        for task in self.tasks:
            task.cancel()
        looks = [t for loops in self.loops.values() for look_loop in loops for t in look_loop.tasks]
        for loops in self.loops.values():
            for look_loop in loops:
                look_loop.stop()
        if looks:  # async looks end at ``stopped``; a sync one in a thread ends by itself
            await asyncio.wait(looks, timeout=grace)
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def wait_idle(self, plural: str, key: Key, timeout: float) -> bool:
        """From a handler's thread: tell the object's looks in flight to stop, and wait for them."""
        runs = [r for look_loop in self.loops.get(plural, ()) if (r := look_loop.in_flight(key)) is not None]
        for run in runs:
            self.event_loop.call_soon_threadsafe(run.stopped.set)
        return all(run.done.wait(timeout) for run in runs)


FOLLOWING: Following | None = None


@kopf.on.startup()
async def start_following(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
    global FOLLOWING
    indexes = {k: v for k, v in kwargs.items() if isinstance(v, kopf.Index)}
    loop = asyncio.get_running_loop()
    FOLLOWING = Following(loop)
    FOLLOWING.start(
        LookLoop(look, indexes[f"followed_{look.plural}"], settings.execution.executor, indexes, loop.time)
        for look in LOOKS
    )


@kopf.on.cleanup()
async def stop_following(**_: Any) -> None:
    global FOLLOWING
    current, FOLLOWING = FOLLOWING, None
    if current is not None:
        await current.stop()


WAIT_IDLE_S = 10.0


def wait_idle(plural: str, namespace: str, name: str) -> None:
    """Called first by a deletion handler: the object's looks in flight are stopped and waited
    for; still running after ``WAIT_IDLE_S`` (a read stuck on storage): the deletion is retried
    in a second rather than run beside them."""
    current = FOLLOWING
    if current is not None and not current.wait_idle(plural, (namespace, name), WAIT_IDLE_S):
        raise kopf.TemporaryError(f"a look at {plural} {namespace}/{name} is still running", delay=1)
