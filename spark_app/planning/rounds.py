"""Admission rounds: one micro-batch may take several lockstep rounds under the drift bound.

Pure. A round is what the alignment rule admits at one global watermark G: every member's
splits with ``lower <= G + maxDrift``. Today's batch is one round, and at low density each
round carries a few thousand rows while a micro-batch costs ~1 s whatever it carries. Merging
rounds into one batch changes neither the output nor the lateness a pipeline needs: Spark's
watermark comes from the newest event time seen, which after a batch of rounds 1..R is what
it is after round R run alone, and every row of later batches is at or after ``G_R``, the
global watermark round R was bounded by (each member completed rounds 1..R-1 within the
batch). So the lateness requirement stays maxDrift + the largest split span. Only the rows in
state during one batch grow, and ``budget_rows`` bounds them.

Who plans. Spark asks the sources of one query for their offsets one after the other, in the
same order every batch, so the first source asked in a run (the *planner*) is first in every
batch of it. The planner replays the rounds on its query-mates' *lookaheads* (what each could
admit next, which each leaves when it decides) and the group's watermark outside the query
(members of other queries and jobs do not move within this batch), and records the plan. The
others apply it in the same batch: they must admit every split below the plan's ``floor`` (the
plan relied on it) and may admit up to its ``bound``. A plan is used only by members that have
not applied one since the planner's last decision, and the planner plans rounds only when
every mate has applied the previous plan and left a lookahead; otherwise the batch is one
round, as before. A mate whose lookahead turns out stale (a restarted query) still honours the
floor, beyond its read limits if it must: the floor is what keeps rows from being late.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from spark_app.planning.admission import Admission, Limits, admit
from spark_app.planning.splits import Split


@dataclass(frozen=True, slots=True)
class Lookahead:
    """A member's next splits as its planner sees them: what it could admit in one batch under
    its read limits (no drift bound), up to the first split past the budget."""

    position: int
    lowers: tuple[int, ...]
    rows: tuple[int, ...]
    complete: bool
    """The member has no splits beyond these (it finishes once it admits them)."""


def lookahead(splits: Sequence[Split], position: int, limits: Limits, budget_rows: int) -> Lookahead:
    reach = admit(splits, position, None, limits).end
    lowers: list[int] = []
    rows: list[int] = []
    total = 0
    for s in splits[position:reach]:
        lowers.append(s.lower)
        rows.append(s.rows)
        total += s.rows
        if total > budget_rows:
            break
    return Lookahead(position, tuple(lowers), tuple(rows), position + len(lowers) == len(splits))


@dataclass(frozen=True, slots=True)
class RoundPlan:
    bound: int | None
    """The largest split lower bound any member of the query admits in this batch (None: no
    bound, every member finished)."""
    floor: int | None
    """Every member admits each of its splits with ``lower < floor`` in this batch: G of the
    last round, which the bound stands on."""
    rounds: int
    rows: int
    """Rows the rounds admit, from the lookaheads."""


def plan_rounds(lookaheads: Mapping[str, Lookahead], outside: int | None, drift_us: int, budget_rows: int) -> RoundPlan:
    """Replay rounds on the query's lookaheads while their rows stay within ``budget_rows``.

    ``outside``: the group's watermark over members outside this query (None: there are none;
    ``HELD``: one has not reported), fixed for the batch. Round 1 is always taken (it is what
    a batch of one round admits). A further round is taken only when every member completed
    the previous one inside its lookahead (not cut by a read limit or the horizon), so each
    member really can admit everything the plan relies on, and only while G moves."""
    pos = dict.fromkeys(lookaheads, 0)

    def next_lower(m: str) -> int | None:
        la = lookaheads[m]
        return la.lowers[pos[m]] if pos[m] < len(la.lowers) else None

    def global_watermark() -> int | None:
        lows = [w for m in lookaheads if (w := next_lower(m)) is not None]
        if outside is not None:
            lows.append(outside)
        return min(lows) if lows else None

    g = global_watermark()
    plan = RoundPlan(None if g is None else g + drift_us, g, 1, 0)
    used = rounds = 0
    while True:
        bound = None if g is None else g + drift_us
        after = dict(pos)
        rows = 0
        complete = True
        for m, la in lookaheads.items():
            i = after[m]
            while i < len(la.lowers) and (bound is None or la.lowers[i] <= bound):
                rows += la.rows[i]
                i += 1
            after[m] = i
            complete = complete and (i < len(la.lowers) or la.complete)
        if rounds and used + rows > budget_rows:
            return plan
        used += rows
        rounds += 1
        pos = after
        plan = RoundPlan(bound, g, rounds, used)
        if not complete or bound is None:
            return plan
        g_next = global_watermark()
        if g_next is None or (g is not None and g_next <= g):  # all done, or G cannot move
            return plan
        g = g_next


def honor_floor(splits: Sequence[Split], decision: Admission, floor: int | None) -> Admission:
    """``decision`` extended, past read limits if need be, to every split below ``floor``."""
    if floor is None:
        return decision
    end = decision.end
    while end < len(splits) and splits[end].lower < floor:
        end += 1
    return decision if end == decision.end else replace(decision, end=end, throttled=False)


# --- whose turn: the state a query's sources share ----------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    plan: RoundPlan | None
    """The plan this member applies (None: one round, the live bound alone)."""
    planner: bool
    assumed: int | None = None
    """Where the plan assumed this member starts (a follower; for the stale-lookahead check)."""


def _frozen(d: Mapping[str, object]) -> Mapping:  # type: ignore[type-arg]
    return d if isinstance(d, MappingProxyType) else MappingProxyType(dict(d))


@dataclass(frozen=True, slots=True)
class RoundsState:
    """One query run's shared record: the planner, its last plan and who applied it, and each
    member's lookahead from where it stopped."""

    planner: str | None = None
    seq: int = 0
    plan: RoundPlan | None = None
    assumed: Mapping[str, int] = field(default_factory=dict)
    applied: Mapping[str, int] = field(default_factory=dict)
    lookaheads: Mapping[str, Lookahead] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("assumed", "applied", "lookaheads"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))


def take_turn(
    state: RoundsState,
    member: str,
    mates: Sequence[str],
    own: Lookahead,
    outside: int | None,
    drift_us: int,
    budget_rows: int,
) -> tuple[RoundsState, Turn]:
    """``member`` decides: the planner plans (rounds only when every mate is ready), a
    follower takes the plan of this batch once. ``mates``: every member of the query."""
    if state.planner is None:
        state = replace(state, planner=member)
    if member == state.planner:
        others = [m for m in mates if m != member]
        ready = budget_rows > 0 and all(m in state.lookaheads and state.applied.get(m) == state.seq for m in others)
        views = {member: own, **{m: state.lookaheads[m] for m in others}} if ready else {}
        plan = plan_rounds(views, outside, drift_us, budget_rows) if ready else None
        seq = state.seq + 1
        return (
            replace(
                state,
                seq=seq,
                plan=plan,
                assumed={m: la.position for m, la in views.items()},
                applied={**state.applied, member: seq},
            ),
            Turn(plan, planner=True),
        )
    if state.applied.get(member, 0) >= state.seq:  # asked twice in one batch: no plan to apply
        return state, Turn(None, planner=False)
    state = replace(state, applied={**state.applied, member: state.seq})
    return state, Turn(state.plan, planner=False, assumed=state.assumed.get(member))


def leave_lookahead(state: RoundsState, member: str, la: Lookahead) -> RoundsState:
    return replace(state, lookaheads={**state.lookaheads, member: la})


def combined_bound(live: int | None, plan: RoundPlan | None) -> int | None:
    """The larger of the live drift bound and the plan's (None is no bound)."""
    if plan is None or plan.rounds <= 1:
        return live
    if live is None or plan.bound is None:
        return None
    return max(live, plan.bound)
