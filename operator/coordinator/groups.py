"""Alignment groups as the operator manages them: a Backfill joins its group when its
application is submitted and leaves it when it finishes or is deleted.

One interface (``Groups``) so handlers do not care whether the coordinator is embedded in
the operator process (the default: the chart runs one process) or reached over HTTP."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

from kappa_operator.coordinator.core import joined, left
from kappa_operator.coordinator.messages import GroupSpec, UnknownGroupError
from kappa_operator.coordinator.server import Service


@dataclass(frozen=True)
class GroupProgress:
    """What `kubectl get bf` shows of a group: its global watermark and the largest lag, and
    what the backfill's members read (None until they report reads: an older Spark side)."""

    global_watermark_us: int | None
    """None while held (a member has not reported) or once every member finished."""
    lag_us: int | None
    finished: bool
    read_bytes: int | None = None
    """Bytes of data files (or row groups) the backfill's admitted splits read so far, summed
    over its members; a restarted backfill continues from its checkpoint's position."""
    read_files: int | None = None
    read_bytes_per_s: float | None = None
    """Its current read rate: over the last one to two minutes, 0 once its members finished;
    None until a member reported twice."""
    read_files_per_s: float | None = None
    waiting_for: tuple[str, ...] = ()
    """While held: the members the coordinator has no report of (after a restart or a
    failover, every member holds until all have reported again)."""


class Groups(Protocol):
    def join(self, spec: GroupSpec) -> bool:
        """Declare ``spec``'s members in the group; True when the group was not there (new, or
        gone with a coordinator that restarted or lost its leadership)."""
        ...

    def leave(self, group: str, owner: str) -> None:
        """Remove the members ``owner`` (a backfill's name: ids are ``owner/sink/source``) joined with."""
        ...

    def progress(self, group: str, owner: str) -> GroupProgress | None:
        """None: no such group (not declared yet, or already left)."""
        ...


class EmbeddedGroups:
    """Groups of the coordinator ``Service`` running in this process."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._lock = threading.Lock()  # kopf runs sync handlers in a thread pool

    def join(self, spec: GroupSpec) -> bool:
        with self._lock:
            core = self.service.core
            existing = core.groups().get(spec.name)
            core.declare(joined(existing.spec if existing else None, spec), _now())
            self.service.persist()
            return existing is None

    def leave(self, group: str, owner: str) -> None:
        with self._lock:
            core = self.service.core
            existing = core.groups().get(group)
            if existing is None:
                return
            rest = left(existing.spec, owned(existing.spec.members, owner))
            if rest is None:
                core.delete(group)
            else:
                core.declare(rest, _now())
            self.service.persist()

    def progress(self, group: str, owner: str) -> GroupProgress | None:
        core, now = self.service.core, _now()
        try:
            answer = core.view(group, now)
        except UnknownGroupError:
            return None
        mine = owned(core.state(group).roster, owner)
        lags = [lag for m in mine if (lag := core.lag_us(group, m, now)) is not None]
        gw = None if answer.held or answer.finished else answer.global_watermark
        waiting = tuple(answer.missing) if answer.held else ()
        reads = core.reads(group, mine, now)
        if reads is None:
            return GroupProgress(gw, max(lags, default=None), answer.finished, waiting_for=waiting)
        return GroupProgress(
            gw,
            max(lags, default=None),
            answer.finished,
            waiting_for=waiting,
            read_bytes=reads.bytes,
            read_files=reads.files,
            read_bytes_per_s=reads.bytes_per_s,
            read_files_per_s=reads.files_per_s,
        )


def owned(members: tuple[str, ...], owner: str) -> tuple[str, ...]:
    return tuple(m for m in members if m.startswith(f"{owner}/"))


def _now() -> int:
    return time.time_ns() // 1000
