"""What ``run`` returns to its caller in this process (``RunResult``): the queries' progress,
the edges, the lateness verdict, the reads, the mode chosen. The aligned run (``apps.run``) and
the bounded one (``apps.bounded``) both build it; the report a backfill's driver leaves for the
operator is built from it (``contract.reports.run``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spark_app.alignment.reads import MemberReads
from spark_app.contract.alignment import ModeChoice
from spark_app.contract.durations import format_duration
from spark_app.contract.row_counts import delivered_rows, reused_rows, scanned_rows
from spark_app.external_calls import ExternalCallsReport
from spark_app.sources.iceberg.spec import micros
from spark_app.window.edges import Edges
from spark_app.window.lateness import LatenessVerdict


@dataclass
class RunResult:
    """What ``run`` returns to its caller in this process: the queries' progress, the edges,
    the lateness verdict, the reads. Not the report a backfill's driver leaves in
    ``_kappa/run-report.json`` for the operator (``reports.run.RunReport``, built from it)."""

    name: str
    mode: str
    seconds: float
    progress: list[dict[str, Any]] = field(default_factory=list)
    lateness: LatenessVerdict | None = None
    edges: Edges | None = None
    """A backfill's resolved edges: sources read, warm-up verdict, drain, finality."""
    externalized: dict[str, list[int]] = field(default_factory=dict)
    """A live job's checkpoint snapshots its driver took, per sink (batch ids)."""
    reads: dict[str, MemberReads] = field(default_factory=dict)
    """A backfill's admitted bytes and files per member (``job/sink/source``), this run."""
    read_cap: tuple[float | None, float | None] = (None, None)
    """The run's read-rate cap (bytes/s, files/s); None: uncapped."""
    extended_to: tuple[int, ...] = ()
    """Where a backfill read on past ``end + drain`` (µs; ``DrainExtensions``)."""
    edges_end: datetime | None = None
    """The window's end (to say how far the extensions went)."""
    external_calls: ExternalCallsReport | None = None
    """What the pipeline's external calls did under the run's limit (None: no limit)."""
    notices: list[str] = field(default_factory=list)
    """A live job's first start: what it found lost before it read (``records_gone``)."""
    mode_choice: ModeChoice | None = None
    """A backfill's mode and why (``alignment.mode: auto`` chooses)."""

    @property
    def read_past_end(self) -> timedelta | None:
        """How far past the window's end the backfill read: the drain, or its last extension."""
        if self.edges is None:
            return None
        if not self.extended_to:
            return self.edges.drain
        end = self.edges_end
        return None if end is None else timedelta(microseconds=self.extended_to[-1] - micros(end))

    @property
    def final(self) -> bool:
        """False when the history did not reach far enough past the end to close every result."""
        return self.edges is None or self.edges.final

    def for_query(self, sink: str) -> list[dict[str, Any]]:
        return [p for p in self.progress if p.get("name") == f"{self.name}-{sink}"]

    @property
    def input_rows(self) -> int:
        return sum(delivered_rows(p) for p in self.progress)

    @property
    def scanned_rows(self) -> int:
        """Rows the sources decoded to deliver ``input_rows`` (``telemetry.scanned_rows``)."""
        return scanned_rows(self.progress)

    @property
    def reused_rows(self) -> int:
        """Rows delivered from a file's earlier read instead of decoding it again."""
        return reused_rows(self.progress)

    @property
    def batches(self) -> int:
        return sum(1 for p in self.progress if p.get("numInputRows", 0) > 0)

    @property
    def dropped_by_watermark(self) -> int:
        return sum(op.get("numRowsDroppedByWatermark", 0) for p in self.progress for op in p.get("stateOperators", []))

    @property
    def peak_state_rows(self) -> int:
        return max(
            (sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])) for p in self.progress), default=0
        )

    def read_summary(self) -> dict[str, Any]:
        """What the run read (admitted splits' bytes and files, as Iceberg sizes them) and at
        what average rate over the run's wall time, next to its cap."""
        nbytes = sum(r.bytes for r in self.reads.values())
        nfiles = sum(r.files for r in self.reads.values())
        cap_bytes, cap_files = self.read_cap
        capped = cap_bytes is not None or cap_files is not None
        return {
            "read_bytes": nbytes,
            "read_files": nfiles,
            "read_bytes_per_s": round(nbytes / self.seconds, 1) if self.seconds else None,
            "read_files_per_s": round(nfiles / self.seconds, 3) if self.seconds else None,
            "read_cap": {"bytes_per_s": cap_bytes, "files_per_s": cap_files} if capped else None,
            "read_wait_s": round(sum(r.waited_s for r in self.reads.values()), 2),
            "read_by_source": {m: {"bytes": r.bytes, "files": r.files} for m, r in sorted(self.reads.items())},
        }

    def summary(self) -> dict[str, Any]:
        wms = [p["eventTime"]["watermark"] for p in self.progress if p.get("eventTime", {}).get("watermark")]
        return {
            "name": self.name,
            "mode": self.mode,
            "seconds": round(self.seconds, 2),
            "batches": self.batches,
            "input_rows": self.input_rows,
            "scanned_rows": self.scanned_rows,
            "reused_rows": self.reused_rows,
            "rows_per_s": round(self.input_rows / self.seconds, 1) if self.seconds else None,
            "dropped_by_watermark": self.dropped_by_watermark,
            "peak_state_rows": self.peak_state_rows,
            "first_watermark": wms[0] if wms else None,
            "last_watermark": wms[-1] if wms else None,
            "lateness_guard": self.lateness.message if self.lateness else None,
            "final": self.final,
            "drain": None if self.edges is None else format_duration(self.edges.drain),
            "read_past_end": None if (past := self.read_past_end) is None else format_duration(past),
            "state_horizon": None if self.edges is None else self.edges.horizon.describe(),
            "notices": [*([] if self.edges is None else self.edges.notices), *self.notices],
            **(self.read_summary() if self.mode == "backfill" else {}),
            **(
                {}
                if self.mode_choice is None
                else {"alignment_mode": self.mode_choice.mode, "alignment_mode_reason": self.mode_choice.reason}
            ),
        }
