"""The coordinator's rules as pure functions over immutable group state.

A group's global watermark is the min over its unfinished, non-idle members, ``HELD`` while a
declared member has not reported (a late starter must not find the others far ahead), None
once every member finished. A member may admit splits whose lower bound is at most
``global + maxDrift`` (``drift_bound``). Watermarks only go forward; going back is a rewind and
must say so (``reset=True``), or a restarted member replaying old offsets would silently drag
the group back.

No I/O and no clock: callers pass ``now_us``, which is what makes idleness (a member whose
watermark has not advanced for ``idle_timeout_us``) testable. ``Coordinator`` is the thin
mutable shell the service holds; it is not thread-safe (the service serializes calls).

Names and watermarks are checked here too (names.py), not only on the wire: the store and
the operator build specs directly, and a bad name must not reach a URL, a label or a file.

Members may also report what they have read (cumulative bytes and file opens of the splits
they admitted): kept per member with a rate over the last one to two ``RATE_WINDOW_US``, for the
read-rate metrics and the progress a Backfill's status shows. They never affect alignment.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import NamedTuple

from kappa_operator.coordinator.messages import (
    GroupSpec,
    Report,
    UnknownGroupError,
    UnknownMemberError,
    WatermarkRegressionError,
)
from spark_app.contract.alignment import HELD, GroupView, drift_bound, query_of

Event = tuple[str, str]


"""``(kind, member)``: kind is registered, reset, finished, idle or active."""


RATE_WINDOW_US = 60_000_000


"""A member's read rate is measured over the last one to two of these (a minute or two)."""


class ReadSample(NamedTuple):
    at_us: int
    bytes: int
    files: int


@dataclass(frozen=True, slots=True)
class ReadStats:
    """A member's cumulative reads and two earlier samples to measure its rate from: ``mark``
    (one to two windows old once the member has run that long) and ``next_mark``, which
    becomes the mark when it is a window old. Constant size however often a member reports."""

    bytes: int
    files: int
    at_us: int
    mark: ReadSample
    next_mark: ReadSample


@dataclass(frozen=True, slots=True)
class MemberState:
    watermark: int | None
    """Last reported watermark, kept after finishing for diagnosis; None only if the member
    finished before ever reporting one."""
    finished: bool
    last_report_us: int
    last_advance_us: int
    """When the watermark last went up (or first arrived): the clock idleness runs on."""
    reports: int
    reads: ReadStats | None = None
    """What the member read, when it reports it (Spark sides older than the read cap do not)."""


def _frozen(members: Mapping[str, MemberState]) -> Mapping[str, MemberState]:
    if isinstance(members, MappingProxyType):  # already ours (every GroupState wraps a private copy)
        return members
    return MappingProxyType(dict(members))


@dataclass(frozen=True, slots=True)
class GroupState:
    spec: GroupSpec
    members: Mapping[str, MemberState] = field(default_factory=dict)
    """Only members that reported; a declared member absent here holds the group."""
    declared_us: int = 0
    idle: frozenset[str] = frozenset()
    """Idle members as of the last report, to turn idleness (a matter of time) into events."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", _frozen(self.members))

    @property
    def roster(self) -> tuple[str, ...]:
        """Declared members in declared order, then self-registered ones in arrival order."""
        if not self.spec.self_register:  # undeclared members are refused: nothing to add
            return self.spec.members
        declared = set(self.spec.members)
        return self.spec.members + tuple(m for m in self.members if m not in declared)


@dataclass(frozen=True, slots=True)
class Answer:
    group: str
    global_watermark: int | None
    bound: int | None
    """Largest split lower bound a member may admit; None: no limit (all finished)."""
    held: bool
    """A declared member has not reported yet (or nobody has joined a self-register group)."""
    missing: tuple[str, ...]
    idle: tuple[str, ...]
    finished: bool
    """Every member finished."""
    member_watermark: int | None = None
    """The reporter's watermark (None when it finished, or for a view)."""
    holders: tuple[str, ...] = ()
    """Who sets the global watermark: the missing members while held, else those at the minimum.
    A source throttled to nothing waits only when no holder runs in its own query."""
    outside: int | None = field(default=HELD, compare=False)
    """The same minimum over the members outside the reporter's query (None: there are none;
    ``HELD`` while held, or for a view): what the query's admission rounds cannot move. Not
    compared: it depends on who asks."""

    def group_view(self) -> GroupView:
        """The answer as the Spark side's ``WatermarkProvider`` returns it."""
        return GroupView(self.global_watermark, self.missing, self.holders, self.outside)


def _is_idle(spec: GroupSpec, m: MemberState, now_us: int) -> bool:
    return spec.idle_timeout_us is not None and not m.finished and now_us - m.last_advance_us >= spec.idle_timeout_us


def _idle_members(state: GroupState, now_us: int) -> tuple[str, ...]:
    if state.spec.idle_timeout_us is None:
        return ()
    return tuple(
        name for name in state.roster if (m := state.members.get(name)) is not None and _is_idle(state.spec, m, now_us)
    )


def _answer(state: GroupState, now_us: int, member_watermark: int | None, reporter: str | None = None) -> Answer:
    roster = state.roster
    missing = tuple(m for m in state.spec.members if m not in state.members)
    idle = _idle_members(state, now_us)
    live = {name: m.watermark for name, m in state.members.items() if not m.finished and m.watermark is not None}
    held = bool(missing) or not roster
    global_watermark: int | None
    holders: tuple[str, ...] = missing
    outside: int | None = HELD
    if held:
        global_watermark = HELD
    elif not live:
        global_watermark = outside = None
    else:
        # all idle: the min over them, so nobody races ahead without limit
        active = {name: w for name, w in live.items() if name not in idle} or live
        global_watermark = min(active.values())
        holders = tuple(name for name, w in active.items() if w == global_watermark)
        if reporter is not None:
            query = query_of(reporter)
            outside = min((w for name, w in active.items() if query_of(name) != query), default=None)
    return Answer(
        group=state.spec.name,
        global_watermark=global_watermark,
        bound=drift_bound(global_watermark, state.spec.max_drift_us),
        held=held,
        missing=missing,
        idle=idle,
        finished=not held and not live,
        member_watermark=member_watermark,
        holders=holders,
        outside=outside,
    )


def view(state: GroupState, now_us: int) -> Answer:
    """The group as a reader sees it at ``now_us``; changes nothing."""
    return _answer(state, now_us, None)


def declare(state: GroupState | None, spec: GroupSpec, now_us: int) -> GroupState:
    """Create a group, or update it (the operator re-declares from the CRs after a restart).

    Members that remain keep their state; removed ones lose it. Self-registered members
    survive only while the group still accepts self-registration."""
    if state is None:
        return GroupState(spec=spec, declared_us=now_us)
    if state.spec.name != spec.name:
        raise ValueError(f"cannot re-declare group {state.spec.name!r} as {spec.name!r}")
    declared = set(spec.members)
    members = {name: m for name, m in state.members.items() if name in declared or spec.self_register}
    return GroupState(spec=spec, members=members, declared_us=state.declared_us, idle=state.idle & members.keys())


def joined(existing: GroupSpec | None, mine: GroupSpec) -> GroupSpec:
    """A backfill joins a group others may share: its members are added, nobody else's removed.

    The drift bound is the tightest asked for, so no member runs further ahead than any
    backfill in the group allows."""
    if existing is None:
        return mine
    members = existing.members + tuple(m for m in mine.members if m not in existing.members)
    return existing.model_copy(
        update={"members": members, "max_drift_us": min(existing.max_drift_us, mine.max_drift_us)}
    )


def left(existing: GroupSpec, members: tuple[str, ...]) -> GroupSpec | None:
    """A finished or deleted backfill leaves: its members go; None when nobody is left."""
    rest = tuple(m for m in existing.members if m not in members)
    if not rest and not existing.self_register:
        return None
    return existing.model_copy(update={"members": rest})


def _next_member(group: str, old: MemberState | None, report: Report, now_us: int) -> MemberState:
    if old is None or report.reset:  # what it read stays: a restarted reader's totals continue from its offsets
        return MemberState(report.watermark, report.finished, now_us, now_us, 1, None if old is None else old.reads)
    if report.finished:  # any time, idempotent; the last watermark stays for diagnosis
        return replace(old, finished=True, last_report_us=now_us, reports=old.reports + 1)
    new = report.watermark
    assert new is not None  # Report's validator
    if old.finished:
        raise WatermarkRegressionError(
            f"group {group!r}: member {report.member!r} reported watermark {new} after finishing "
            f"(last watermark {old.watermark}); a rewind must reset the member (reset=True)"
        )
    assert old.watermark is not None  # unfinished members always have one
    if new < old.watermark:
        raise WatermarkRegressionError(
            f"group {group!r}: member {report.member!r} reported watermark {new} below its last {old.watermark}; "
            f"watermarks never go back, a rewind must reset the member (reset=True)"
        )
    advanced = new > old.watermark
    return replace(
        old,
        watermark=new,
        last_report_us=now_us,
        last_advance_us=now_us if advanced else old.last_advance_us,
        reports=old.reports + 1,
    )


def count_reads(
    old: ReadStats | None, nbytes: int, nfiles: int, now_us: int, window_us: int = RATE_WINDOW_US
) -> ReadStats:
    """Fold a member's cumulative reads in. Totals that went down come from a new reader (a
    restart that does not report ``reset``): the rate is measured afresh from them."""
    sample = ReadSample(now_us, nbytes, nfiles)
    if old is None or nbytes < old.bytes or nfiles < old.files:
        return ReadStats(nbytes, nfiles, now_us, sample, sample)
    mark, next_mark = old.mark, old.next_mark
    if now_us - next_mark.at_us >= window_us:
        mark, next_mark = next_mark, sample
    return ReadStats(nbytes, nfiles, now_us, mark, next_mark)


def read_rate(m: MemberState, now_us: int) -> tuple[float, float] | None:
    """(bytes/s, files/s) from the member's mark to ``now_us``, so a member that stopped
    reading decays towards 0; 0 once finished; None when it never reported reads or has only
    just started reporting them."""
    stats = m.reads
    if stats is None:
        return None
    if m.finished:
        return 0.0, 0.0
    elapsed_s = (now_us - stats.mark.at_us) / 1_000_000
    if stats.mark.at_us >= stats.at_us or elapsed_s <= 0:  # one sample: no rate yet
        return None
    return (stats.bytes - stats.mark.bytes) / elapsed_s, (stats.files - stats.mark.files) / elapsed_s


@dataclass(frozen=True, slots=True)
class ReadTotals:
    """What some members (one backfill's) read together, and how fast now."""

    bytes: int
    files: int
    bytes_per_s: float | None
    files_per_s: float | None
    """None until a member has reported reads twice (a rate needs two samples)."""


def read_totals(state: GroupState, members: tuple[str, ...], now_us: int) -> ReadTotals | None:
    """Sum over ``members`` that reported reads; None when none did."""
    reporting = [m for name in members if (m := state.members.get(name)) is not None and m.reads is not None]
    if not reporting:
        return None
    rates = [r for m in reporting if (r := read_rate(m, now_us)) is not None]
    return ReadTotals(
        bytes=sum(m.reads.bytes for m in reporting if m.reads is not None),
        files=sum(m.reads.files for m in reporting if m.reads is not None),
        bytes_per_s=sum(r[0] for r in rates) if rates else None,
        files_per_s=sum(r[1] for r in rates) if rates else None,
    )


def refresh(state: GroupState, now_us: int) -> tuple[GroupState, list[Event]]:
    """Recompute who is idle at ``now_us``; the events say who became idle or active again."""
    if state.spec.idle_timeout_us is None and not state.idle:
        return state, []
    idle = _idle_members(state, now_us)
    events: list[Event] = [("idle", m) for m in idle if m not in state.idle]
    events += [
        ("active", m)
        for m in state.roster
        if m in state.idle and m not in idle and (s := state.members.get(m)) is not None and not s.finished
    ]
    return replace(state, idle=frozenset(idle)), events


def apply_report(state: GroupState, report: Report, now_us: int) -> tuple[GroupState, Answer, list[Event]]:
    """Fold one report into the group; return the new state, the reporter's answer and events.

    Raises ``UnknownMemberError`` for an undeclared member (unless self-register) and
    ``WatermarkRegressionError`` for a watermark going back without ``reset``; the state is
    then unchanged (the caller simply keeps the old one)."""
    spec = state.spec
    name = report.member
    events: list[Event] = []
    old = state.members.get(name)
    if old is None and name not in spec.members:
        if not spec.self_register:
            raise UnknownMemberError(f"group {spec.name!r}: {name!r} is not a member (members: {list(spec.members)})")
        events.append(("registered", name))
    new = _next_member(spec.name, old, report, now_us)
    if report.read_bytes is not None and report.read_files is not None:
        new = replace(new, reads=count_reads(new.reads, report.read_bytes, report.read_files, now_us))
    if old is not None and report.reset:
        events.append(("reset", name))
    if new.finished and (old is None or not old.finished or report.reset):
        events.append(("finished", name))
    members = dict(state.members)
    members[name] = new
    state, idle_events = refresh(replace(state, members=MappingProxyType(members)), now_us)
    answer = _answer(state, now_us, None if new.finished else new.watermark, name)
    return state, answer, events + idle_events


def lag_us(state: GroupState, member: str, now_us: int) -> int | None:
    """Member watermark minus global watermark, for metrics (negative for an idle laggard).

    None when not computable: the member has not reported or finished, or the group is held
    or finished."""
    if member not in state.roster:
        raise UnknownMemberError(f"group {state.spec.name!r}: {member!r} is not a member")
    m = state.members.get(member)
    answer = view(state, now_us)
    if m is None or m.finished or m.watermark is None or answer.held or answer.global_watermark is None:
        return None
    return m.watermark - answer.global_watermark


class Accepted(NamedTuple):
    """One accepted report, as the history keeps it."""

    now_us: int
    member: str
    watermark: int | None
    global_watermark: int | None
    bound: int | None


class Coordinator:
    """All groups in memory; every rule is delegated to the pure functions above.

    ``history``: accepted reports kept per group (a bounded deque; 0 keeps none), so tests
    and debugging can replay what bound each member got. ``on_event(group, kind, member)``
    receives transitions (registered, reset, finished, idle, active) for logging."""

    def __init__(self, history: int = 10_000, on_event: Callable[[str, str, str], None] | None = None) -> None:
        if history < 0:
            raise ValueError(f"history: must be >= 0, got {history}")
        self._groups: dict[str, GroupState] = {}
        self._history: dict[str, deque[Accepted]] = {}
        self._history_len = history
        self._on_event = on_event

    def _state(self, group: str) -> GroupState:
        try:
            return self._groups[group]
        except KeyError:
            raise UnknownGroupError(f"unknown alignment group {group!r}") from None

    def declare(self, spec: GroupSpec, now_us: int) -> GroupState:
        state = declare(self._groups.get(spec.name), spec, now_us)
        self._groups[spec.name] = state
        self._history.setdefault(spec.name, deque(maxlen=self._history_len))
        return state

    def delete(self, name: str) -> bool:
        """Forget a group; False if there was none (deletes are retried, so not an error)."""
        self._history.pop(name, None)
        return self._groups.pop(name, None) is not None

    def report(self, group: str, report: Report, now_us: int) -> Answer:
        state, answer, events = apply_report(self._state(group), report, now_us)
        self._groups[group] = state
        self._history[group].append(
            Accepted(now_us, report.member, report.watermark, answer.global_watermark, answer.bound)
        )
        if self._on_event is not None:
            for kind, member in events:
                self._on_event(group, kind, member)
        return answer

    def view(self, group: str, now_us: int) -> Answer:
        return view(self._state(group), now_us)

    def lag_us(self, group: str, member: str, now_us: int) -> int | None:
        return lag_us(self._state(group), member, now_us)

    def reads(self, group: str, members: tuple[str, ...], now_us: int) -> ReadTotals | None:
        return read_totals(self._state(group), members, now_us)

    def state(self, group: str) -> GroupState:
        return self._state(group)

    def groups(self) -> Mapping[str, GroupState]:
        """A snapshot of every group's state, by name."""
        return MappingProxyType(dict(self._groups))

    def history(self, group: str) -> tuple[Accepted, ...]:
        self._state(group)
        return tuple(self._history[group])
