"""The read ledger of one run: its read-rate buckets and what each member admitted.

Spark runs every streaming Python source in its own process on the driver, so the bucket a
run's sources share cannot live in module state: like the local alignment state it is a JSON
file under a lock (``locked_state``), next to that state and named after the job. The runtime
starts it (``start``: the cap from the JobConfig, full buckets, zero counts) before any query
runs; a source finds it by the same name. No ledger file (a reader built outside the runtime)
means no cap and no counts. The decisions are pure (``spark_app.planning.read_rate``); this
module only loads and stores them. One ledger per run: every query and source of the JobConfig
draws from the same buckets, since the cap protects the object store, not one query.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_app.alignment.local import locked_state
from spark_app.planning.read_rate import PATIENCE_S, Cost, Fit, ReadBudget, TokenBucket, fit


def ledger_file(watermark_file: str, job: str) -> Path:
    """``<alignment state>.<job>.reads.json``: per run, even when runs share a state dir."""
    p = Path(watermark_file)
    return p.with_name(f"{p.stem}.{job}.reads.json")


def job_of(member: str) -> str:
    """The job of a member id (``job/sink/source``)."""
    return member.split("/", 1)[0]


@dataclass(frozen=True, slots=True)
class MemberReads:
    """What one member admitted in this run, and how long it waited for tokens."""

    bytes: int = 0
    files: int = 0
    waited_s: float = 0.0
    first: float | None = None
    last: float | None = None
    """Clock of its first and last admission (the run's monotonic clock)."""


def _bucket(raw: Any) -> TokenBucket | None:
    return None if raw is None else TokenBucket(*raw)


def _raw(b: TokenBucket | None) -> list[float] | None:
    return None if b is None else [b.rate, b.capacity, b.tokens, b.at]


class ReadLedger:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def start(self, bytes_per_s: float | None, files_per_s: float | None, now: float) -> None:
        """A fresh run: full buckets for the cap (None: uncapped), no reads yet."""
        budget = ReadBudget.of(bytes_per_s, files_per_s, now)
        with locked_state(self.path) as state:
            state.clear()
            state.update(bytes=_raw(budget.bytes), files=_raw(budget.files), started=now, members={})

    def admit(self, member: str, costs: Sequence[Cost], now: float, waited_s: float = 0.0) -> Fit | None:
        """Take tokens for the longest prefix of ``costs`` that fits now, and count it for
        ``member`` (with the time it waited). None: no ledger, so no cap."""
        if not self.path.exists():
            return None
        with locked_state(self.path) as state:
            budget = ReadBudget(_bucket(state.get("bytes")), _bucket(state.get("files")))
            decision = fit(costs, budget, now, patient=waited_s >= PATIENCE_S)
            state["bytes"], state["files"] = _raw(decision.budget.bytes), _raw(decision.budget.files)
            if decision.count:
                old = self._member(state, member)
                state.setdefault("members", {})[member] = [
                    old.bytes + decision.cost[0],
                    old.files + decision.cost[1],
                    old.waited_s + waited_s,
                    now if old.first is None else old.first,
                    now,
                ]
            return decision

    @staticmethod
    def _member(state: dict[str, Any], member: str) -> MemberReads:
        raw = state.get("members", {}).get(member)
        return MemberReads() if raw is None else MemberReads(*raw)

    def _snapshot(self) -> dict[str, Any]:
        """The state as last written (replaced atomically, so whole), without taking the lock."""
        try:
            loaded: dict[str, Any] = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        return loaded

    def members(self) -> dict[str, MemberReads]:
        """Every member's reads in this run (empty without a ledger)."""
        state = self._snapshot()
        return {m: self._member(state, m) for m in state.get("members", {})}

    def cap(self) -> tuple[float | None, float | None]:
        """(bytes/s, files/s) this run is capped at."""
        state = self._snapshot()
        b, f = _bucket(state.get("bytes")), _bucket(state.get("files"))
        return (None if b is None else b.rate), (None if f is None else f.rate)
