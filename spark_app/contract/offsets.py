"""Source offsets: small deterministic JSON that Spark stores in ``offsets/<batch>``.

A backfill offset is a position in the split plan of one fixed snapshot, plus the plan's
fingerprint (a restart with different split settings must fail, not read other data).
A live offset is a position in the splits *added by* one snapshot of the table's history:
``complete`` once all of that snapshot was admitted. Both are pure values: the same offsets
give the same batches after a restart. Snapshot ids (64-bit) travel as strings so no JSON
reader on the way can round them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from spark_app.contract.errors import PlanChangedError

VERSION = 1


@dataclass(frozen=True, slots=True)
class BackfillOffset:
    snapshot_id: int
    position: int
    plan: str
    splits: int | None = None
    """Splits in the plan: a query that ends with ``position < splits`` did not read its window."""
    source: str | None = None
    """The source's name, so a report on an incomplete read can name it."""

    @property
    def complete(self) -> bool:
        return self.splits is None or self.position >= self.splits

    def to_dict(self) -> dict[str, Any]:
        d = {"v": VERSION, "kind": "backfill", **asdict(self), "snapshot_id": str(self.snapshot_id)}
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackfillOffset:
        _check(d, "backfill")
        splits = d.get("splits")
        return cls(
            snapshot_id=int(d["snapshot_id"]),
            position=int(d["position"]),
            plan=str(d["plan"]),
            splits=None if splits is None else int(splits),
            source=d.get("source"),
        )


@dataclass(frozen=True, slots=True)
class LiveOffset:
    snapshot_id: int | None
    """The snapshot being read; None before the table has any snapshot."""
    position: int
    """Splits of that snapshot already admitted."""
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        sid = None if self.snapshot_id is None else str(self.snapshot_id)
        return {"v": VERSION, "kind": "live", **asdict(self), "snapshot_id": sid}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LiveOffset:
        _check(d, "live")
        sid = d["snapshot_id"]
        return cls(
            snapshot_id=None if sid is None else int(sid),
            position=int(d["position"]),
            complete=bool(d["complete"]),
        )


def _check(d: dict[str, Any], kind: str) -> None:
    if d.get("v") != VERSION or d.get("kind") != kind:
        raise PlanChangedError(
            f"the checkpoint holds a {d.get('kind', 'unknown')} offset (v{d.get('v')}) but this run reads "
            f"the source as {kind} (v{VERSION}): start a backfill or a mode change with a fresh "
            "checkpoint location"
        )
