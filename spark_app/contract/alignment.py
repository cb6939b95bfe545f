"""The alignment group, as the coordinator and the drivers both see it: who is in a job's
group (one member per (sink, source) query input), the rule that makes a group's global
watermark (``global_view``: min over unfinished members, held by missing ones), the bound a
source admits below (``drift_bound``), and the interface a source reports through
(``WatermarkProvider``).

Spark runs every streaming Python source in its own process on the driver, so even the
sources of one query need a shared place: a state file on one driver
(``spark_app.alignment.local``) or the coordinator service over HTTP (``spark_app.alignment.http``,
served by ``kappa_operator.coordinator``). Free of Spark, so the operator declares the group a
driver will report into and computes the same view the drivers do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from spark_app.contract.config import JobConfig

HELD = -(2**62)
"""The global watermark while a declared member has not reported: below every split."""


def drift_bound(global_watermark: int | None, drift_us: int) -> int | None:
    """Upper bound of admissible lower bounds; None (no bound) once every member finished."""
    if global_watermark is None:
        return None
    return global_watermark + drift_us


@dataclass(frozen=True, slots=True)
class GroupView:
    global_watermark: int | None
    """Min over unfinished members; ``HELD`` while a declared member has not reported;
    None when every member finished."""
    missing: tuple[str, ...] = ()
    holders: tuple[str, ...] = field(default=(), compare=False)
    """Members that set the global watermark (the missing ones while held); advisory, so two
    views with the same watermark and missing members are equal whoever holds them."""
    outside: int | None = field(default=HELD, compare=False)
    """The watermark over members outside the reporter's query (None: there are none): what
    a batch's admission rounds cannot move. ``HELD`` when unknown (an older coordinator, a
    view not asked for a query), which allows no further rounds."""
    stale: bool = field(default=False, compare=False)
    """The last view the coordinator gave, kept while it is unreachable: the members' reports
    since are not in it (this query's own mates' included)."""

    def bound(self, drift_us: int) -> int | None:
        return drift_bound(self.global_watermark, drift_us)


class ReadCount(NamedTuple):
    """What a member has admitted so far: bytes and files of its window's splits up to its
    position (a function of the offset, so a restart from the checkpoint continues it)."""

    bytes: int
    files: int


class WatermarkProvider(Protocol):
    def report(
        self,
        member: str,
        watermark: int | None,
        throttled: bool = False,
        reset: bool = False,
        read: ReadCount | None = None,
    ) -> GroupView:
        """Record ``member``'s watermark (None: finished) and return the group's view.

        ``throttled``: the member's last admission was cut by the bound (metrics);
        ``reset``: accept a lower watermark than before (a restart from a checkpoint);
        ``read``: the member's cumulative admitted bytes and files (metrics, the read rate)."""
        ...


def query_of(member: str) -> str:
    """The query a member id (``job/sink/source``) reads in: ``job/sink``."""
    return member.rsplit("/", 1)[0]


def outside_watermark(members: tuple[str, ...], reported: dict[str, int | None], query: str | None) -> int | None:
    """Min over the unfinished members outside ``query``; ``HELD`` while one has not reported
    (or when no query is given); None when there are none."""
    if query is None:
        return HELD
    others = [m for m in members if query_of(m) != query]
    if any(m not in reported for m in others):
        return HELD
    live = [w for m in others if (w := reported[m]) is not None]
    return min(live) if live else None


def held_outside(view: GroupView, member: str) -> bool:
    """Whether the members holding the group (the missing ones while held, else those at the
    minimum) are all outside ``member``'s query, in another query of its job or in another
    job. Under AvailableNow a source throttled to nothing then waits instead of returning its
    start offset, which would end its query before it read its window; with a holder in its
    own query it returns, since that holder admits in the same batch (its next split is at the
    global watermark, within any bound)."""
    query = query_of(member)
    return bool(view.holders) and all(query_of(h) != query for h in view.holders)


def waits_for_group(view: GroupView, member: str) -> bool:
    """Whether a source throttled to nothing under AvailableNow waits (instead of returning its
    start offset, which ends its query before it read its window): held from outside its query
    (``held_outside``), or the view is stale. A stale view may name a mate of its own query as
    the holder although the mate has since read on: the coordinator, unreachable, has not heard
    (both operator replicas killed under a backfill, tests/node/test_node_failover.py), so the
    batch would admit nothing. Waiting lasts until the coordinator answers again, or fails the
    query at ``coordinator.timeout``."""
    return view.stale or held_outside(view, member)


def global_view(members: tuple[str, ...], reported: dict[str, int | None], query: str | None = None) -> GroupView:
    """The alignment rule in one place: min over unfinished members, held by missing ones.
    ``query``: the reporter's, for ``outside``."""
    missing = tuple(m for m in members if m not in reported)
    if missing:
        return GroupView(HELD, missing, missing)
    outside = outside_watermark(members, reported, query)
    live = {m: w for m in members if (w := reported[m]) is not None}
    if not live:
        return GroupView(None, outside=outside)
    low = min(live.values())
    return GroupView(low, (), tuple(m for m, w in live.items() if w == low), outside)


def member_id(cfg: JobConfig, sink: str, source: str) -> str:
    return f"{cfg.name}/{sink}/{source}"


def aligned_members(cfg: JobConfig) -> tuple[str, ...]:
    if cfg.mode != "backfill" or not cfg.alignment.coordinated:
        return ()
    return tuple(member_id(cfg, sink, src) for sink in cfg.sinks for src in cfg.sources)


@dataclass(frozen=True)
class ModeChoice:
    """The mode a backfill runs in, and why (``kappa plan``, the run report, status)."""

    requested: str
    mode: str
    reason: str
    proving: tuple[str, ...] = ()
    """Sources whose rows the bounded run's own write proves were not late before it commits
    (observed on the rows it reads: no pass of their own); the reason holds once it commits."""

    def to_json(self) -> bytes:
        raw: dict[str, object] = {"requested": self.requested, "mode": self.mode, "reason": self.reason}
        if self.proving:
            raw["proving"] = list(self.proving)
        return json.dumps(raw).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ModeChoice:
        raw = json.loads(data)
        proving = tuple(str(x) for x in raw.get("proving", ()))
        return cls(str(raw["requested"]), str(raw["mode"]), str(raw["reason"]), proving)
