"""The admission-round record the sources of one query share (``spark_app.planning.rounds``).

The sources of a query always run on one driver, each in its own process, so the record is
a JSON file under a lock (``locked_state``), one per query and run: the runtime clears it
before the query starts, so a restarted query never applies a plan or a lookahead of the run
before it. The rules are pure (``take_turn``); this module only loads and stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_app.alignment.local import locked_state
from spark_app.planning.rounds import (
    Lookahead,
    RoundPlan,
    RoundsState,
    Turn,
    leave_lookahead,
    take_turn,
)


def rounds_file(watermark_file: str, query: str) -> Path:
    """``<alignment state>.<job>.<sink>.rounds.json``, next to the group's state."""
    p = Path(watermark_file)
    return p.with_name(f"{p.stem}.{query.replace('/', '.')}.rounds.json")


def _lookahead(raw: dict[str, Any]) -> Lookahead:
    return Lookahead(int(raw["position"]), tuple(raw["lowers"]), tuple(raw["rows"]), bool(raw["complete"]))


def _plan(raw: dict[str, Any] | None) -> RoundPlan | None:
    return None if raw is None else RoundPlan(raw["bound"], raw["floor"], raw["rounds"], raw["rows"])


def load(raw: dict[str, Any]) -> RoundsState:
    return RoundsState(
        planner=raw.get("planner"),
        seq=int(raw.get("seq", 0)),
        plan=_plan(raw.get("plan")),
        assumed=raw.get("assumed", {}),
        applied=raw.get("applied", {}),
        lookaheads={m: _lookahead(la) for m, la in raw.get("lookaheads", {}).items()},
    )


def dump(state: RoundsState) -> dict[str, Any]:
    plan = state.plan
    return {
        "planner": state.planner,
        "seq": state.seq,
        "plan": None
        if plan is None
        else {"bound": plan.bound, "floor": plan.floor, "rounds": plan.rounds, "rows": plan.rows},
        "assumed": dict(state.assumed),
        "applied": dict(state.applied),
        "lookaheads": {
            m: {"position": la.position, "lowers": list(la.lowers), "rows": list(la.rows), "complete": la.complete}
            for m, la in state.lookaheads.items()
        },
    }


class QueryRounds:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def reset(self) -> None:
        """A new run of the query: no planner, no plan, no lookaheads."""
        with locked_state(self.path) as raw:
            raw.clear()

    def turn(
        self,
        member: str,
        mates: tuple[str, ...],
        own: Lookahead,
        outside: int | None,
        drift_us: int,
        budget_rows: int,
    ) -> Turn:
        with locked_state(self.path) as raw:
            state, turn = take_turn(load(raw), member, mates, own, outside, drift_us, budget_rows)
            raw.clear()
            raw.update(dump(state))
        return turn

    def leave(self, member: str, la: Lookahead) -> None:
        with locked_state(self.path) as raw:
            state = leave_lookahead(load(raw), member, la)
            raw.clear()
            raw.update(dump(state))

    def state(self) -> RoundsState:
        with locked_state(self.path) as raw:
            return load(raw)
