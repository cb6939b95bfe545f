"""The planners of the kappa-iceberg source: backfill (aligned history) and live (incremental).

Spark's stream (``dev.kappa.source.KappaMicroBatchStream``, in the JVM) asks them, through
``bridge.PlannerBridge``, for every offset and every batch's tasks; they run in the driver's
own Python process and read only metadata, never rows. Each keeps only caches that can be
recomputed from its spec and the offsets: a restart from the checkpoint plans the same splits
and produces the same batches. Every admission decision
goes to the trace (when configured) so it can be audited. A backfill's read-rate cap
(``readRate``) then takes the prefix of the admitted splits its token bucket pays for.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
)

from spark_app.alignment.http import HttpWatermarkProvider
from spark_app.alignment.local import LocalWatermarkProvider
from spark_app.alignment.reads import ReadLedger, job_of, ledger_file
from spark_app.alignment.round_record import QueryRounds
from spark_app.catalogs import load_table
from spark_app.contract.alignment import GroupView, ReadCount, WatermarkProvider, held_outside, query_of
from spark_app.contract.errors import (
    IncompleteBackfillError,
    NonAppendSnapshotError,
    PlanChangedError,
    SnapshotExpiredError,
)
from spark_app.contract.offsets import BackfillOffset, LiveOffset
from spark_app.contract.trace import trace
from spark_app.planning.admission import Admission, Limits, admit, source_watermark
from spark_app.planning.read_rate import Cost, FileLayout, RateCut, read_cost
from spark_app.planning.rounds import Turn, combined_bound, honor_floor, lookahead
from spark_app.planning.splits import Split, pack_tasks, plan_fingerprint, plan_splits
from spark_app.sinks.iceberg.history import expired_before
from spark_app.sources.iceberg import scan
from spark_app.sources.iceberg.byte_ranges import bounds_of, file_reads, task_pieces
from spark_app.sources.iceberg.spec import SourceSpec, micros

log = logging.getLogger("kappa.iceberg")

MISSING_MEMBER_LIMIT_S = 1800.0
"""A backfill held this long by a declared member that never reported fails, naming it."""
READ_WAIT_LOG_S = 30.0
"""A source waiting for read-rate tokens says so this often."""


def default_state_file(group: str, checkpoint: str) -> str:
    """Zero set-up: one state file per (group, checkpoint) under the system temp dir."""
    key = hashlib.sha1(f"{group}\0{checkpoint}".encode()).hexdigest()[:16]
    return str(Path(tempfile.gettempdir()) / "kappa-alignment" / f"{group}-{key}.json")


def backfill_plan(table: Table, spec: SourceSpec, snapshot_id: int) -> list[Split]:
    """The ordered splits of the window in one snapshot (shared by the reader and the guard).

    Wide files (late events) are cut into time slices first, unless the mode is unordered:
    slicing only tightens the ordering bound, which unordered reading does not have."""
    return backfill_plan_and_layouts(table, spec, snapshot_id)[0]


def backfill_plan_and_layouts(
    table: Table, spec: SourceSpec, snapshot_id: int, bounds: tuple[int, int] | None = None
) -> tuple[list[Split], dict[str, FileLayout]]:
    """``backfill_plan``, and each planned file's size and row-group offsets (what reading a
    time slice of it costs, for the read-rate cap)."""
    from spark_app.sources.iceberg.slices import slice_wide_files

    scan.require_snapshot(table, snapshot_id, "the snapshot this backfill reads")
    window = spec.window
    assert window is not None, "a backfill source needs the window"
    bounds = bounds or (micros(window.read_start), micros(window.read_end))
    files = scan.files_in_window(table, snapshot_id, spec.ordering_column, bounds, spec.source.filter)
    if spec.alignment.mode != "unordered":
        files = slice_wide_files(table.io, files, spec.ordering_column, spec.source.split, bounds)
    splits = plan_splits(files, spec.source.split, bounds)
    trace(
        spec.trace_path,
        "plan",
        source=spec.name,
        member=spec.member,
        snapshot_id=str(snapshot_id),
        files=len(files),
        paths=[f.path for f in files],
        sliced=sum(f.slices is not None for f in files),
        splits=len(splits),
        rows=sum(s.rows for s in splits),
        max_span_us=max((s.span for s in splits), default=0),
    )
    return splits, {f.path: (f.size_bytes, f.row_group_offsets) for f in files}


class _IcebergReader(ABC):
    """What both readers share: the table, the read limits and the tasks of a batch."""

    def __init__(self, spec: SourceSpec) -> None:
        self.spec = spec
        self._table: Table | None = None
        self._layouts: dict[str, FileLayout] = {}

    @property
    def table(self) -> Table:
        if self._table is None:
            self._table = load_table(self.spec.catalog_name, self.spec.catalog, self.spec.source.table)
        return self._table

    def refresh(self) -> Table:
        self._table = None
        return self.table

    # -- limits -------------------------------------------------------------------------
    def getDefaultReadLimit(self) -> ReadLimit:
        rl = self.spec.source.read_limit
        if rl.max_files:
            return ReadMaxFiles(rl.max_files)
        if rl.max_rows:
            return ReadMaxRows(rl.max_rows)
        if rl.max_bytes:
            return ReadMaxBytes(rl.max_bytes)
        return ReadAllAvailable()

    def limits(self, limit: ReadLimit | None) -> Limits:
        """The engine's limit wins; ReadAllAvailable means the trigger wants everything."""
        if limit is None or isinstance(limit, ReadAllAvailable):
            return Limits.unlimited()
        rl = self.spec.source.read_limit
        return Limits(
            max_files=limit.max_files if isinstance(limit, ReadMaxFiles) else rl.max_files,
            max_rows=limit.max_rows if isinstance(limit, ReadMaxRows) else rl.max_rows,
            max_bytes=limit.max_bytes if isinstance(limit, ReadMaxBytes) else rl.max_bytes,
        )

    # -- reading ------------------------------------------------------------------------
    @abstractmethod
    def task_splits(self, start: dict, end: dict) -> list[list[Split]]:
        """The splits of the batch [start, end), packed into tasks by ``pack_tasks``."""

    def tasks(self, start: dict, end: dict) -> list[list[dict[str, Any]]]:
        """The batch's tasks as the JVM reader takes them: each piece a byte range of whole row
        groups with its time slice."""
        tasks = self.task_splits(start, end)
        if self.spec.trace_path:
            for task in tasks:
                for path, groups, ranges in file_reads(task):
                    trace(
                        self.spec.trace_path, "open", source=self.spec.name, path=path, row_groups=groups, slices=ranges
                    )
        later = self.later(start)
        return [task_pieces(t, self._layouts, self.clip, later) for t in tasks]

    def clip(self, split: Split) -> tuple[int, int] | None:
        return None

    def later(self, start: dict) -> Callable[[str], list[tuple[int, int]]]:
        """The time slices of a file that reads from this batch on take (none: no read keeps
        rows for another)."""
        return lambda _: []

    def packed(self, splits: Sequence[Split]) -> list[list[Split]]:
        return pack_tasks(splits, self.spec.parallelism, self.spec.source.split.task_target_bytes)

    def commit(self, end: dict) -> None:  # noqa: B027 - nothing to release: offsets are positions in a plan
        """Spark committed up to ``end``: the planners keep no per-batch state to drop."""

    def stop(self) -> None:  # noqa: B027 - the planners hold no connections of their own
        """The query stopped."""


class BackfillReader(_IcebergReader):
    """History of one fixed snapshot, splits admitted in order under the drift bound."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._plans: dict[int, tuple[list[Split], str]] = {}
        self._clips: dict[int, tuple[int, int]] = {}
        self._slices_by_file: dict[int, dict[str, tuple[list[int], list[tuple[int, int]]]]] = {}
        self._costs: dict[int, list[Cost]] = {}
        self._prefix: dict[int, tuple[list[int], list[int]]] = {}
        self._provider: WatermarkProvider | None = None
        self._reported = False
        self._available_now = False
        self._last_turn: Turn | None = None

    def plan(self, snapshot_id: int) -> tuple[list[Split], str]:
        """The window's splits, then those of each drain extension (``SourceSpec.extended_to``):
        a segment's splits all lie past the previous segment's, so the concatenation stays in
        order and an offset into the window's plan keeps its meaning. The fingerprint is the
        window's plan's: extending the drain is not a change of plan."""
        if snapshot_id not in self._plans:
            segments = self.spec.read_segments()
            splits, layouts = backfill_plan_and_layouts(self.table, self.spec, snapshot_id, segments[0])
            fingerprint = plan_fingerprint(splits)
            if len(segments) > 1:
                self._clips.update({id(s): segments[0] for s in splits})
            for bounds in segments[1:]:
                more, more_layouts = backfill_plan_and_layouts(self.table, self.spec, snapshot_id, bounds)
                self._clips.update({id(s): bounds for s in more})
                splits = splits + more
                layouts.update(more_layouts)
            self._layouts.update(layouts)
            self._plans[snapshot_id] = (splits, fingerprint)
            self._costs[snapshot_id] = [read_cost(split, layouts) for split in splits]
        return self._plans[snapshot_id]

    def later(self, start: dict) -> Callable[[str], list[tuple[int, int]]]:
        """The time slices of each file in the plan's splits from this batch's ``start`` on,
        cut to their segments: a read in this batch keeps the rows of the others for the later
        reads of the same file (in this batch's other reads, or in later batches)."""
        e, splits = self._offset(start)
        if e.snapshot_id not in self._slices_by_file:
            index: dict[str, tuple[list[int], list[tuple[int, int]]]] = {}
            for position, split in enumerate(splits):
                for p in split.pieces:
                    lo, hi = bounds_of(p, self.clip(split))
                    if lo is not None and hi is not None and lo < hi:
                        positions, ranges = index.setdefault(p.path, ([], []))
                        positions.append(position)
                        ranges.append((lo, hi))
            self._slices_by_file[e.snapshot_id] = index
        index = self._slices_by_file[e.snapshot_id]

        def ahead(path: str) -> list[tuple[int, int]]:
            positions, ranges = index.get(path, ([], []))
            return ranges[bisect.bisect_left(positions, e.position) :]

        return ahead

    def clip(self, split: Split) -> tuple[int, int] | None:
        """The plan segment a split belongs to, when the plan has several: its rows are kept
        to it (a file on a segment's edge is in both, each reading its side)."""
        return self._clips.get(id(split))

    def costs(self, snapshot_id: int) -> list[Cost]:
        """What reading each split of the plan costs (bytes opened, files opened)."""
        self.plan(snapshot_id)
        return self._costs[snapshot_id]

    def read_count(self, snapshot_id: int, position: int) -> ReadCount:
        """Bytes and files the reads of the splits before ``position`` open: what this member
        has read of its window, across restarts (the position comes from the checkpoint)."""
        if snapshot_id not in self._prefix:
            nbytes, nfiles = [0], [0]
            for cost_bytes, cost_files in self.costs(snapshot_id):
                nbytes.append(nbytes[-1] + cost_bytes)
                nfiles.append(nfiles[-1] + cost_files)
            self._prefix[snapshot_id] = (nbytes, nfiles)
        nbytes, nfiles = self._prefix[snapshot_id]
        return ReadCount(nbytes[position], nfiles[position])

    def ledger(self) -> ReadLedger | None:
        """The run's read budget and counts, shared by its sources' processes (the runtime
        starts it; see ``spark_app.alignment.reads``)."""
        if not self.spec.state_file:
            return None
        return ReadLedger(ledger_file(self.spec.state_file, job_of(self.spec.member)))

    def _rate_cut(self, costs: Sequence[Cost], decision: Admission) -> RateCut:
        """The prefix of what alignment admitted that the run's read budget pays for, the
        seconds waited for it, and when (on the bucket's clock) it was taken.

        When not even one split fits, this waits (sleeping until the bucket holds what the
        next split needs, never spinning) instead of admitting nothing: under AvailableNow a
        micro-batch in which no source admits anything ends the query with the window unread,
        and this source cannot know whether another one admitted. The wait is at most the
        largest split's cost over the rate. Only a prefix is ever cut, so the order of splits,
        the drift bound and the outputs are those of the uncapped run; batches are smaller."""
        candidates = costs[decision.start : decision.end]
        ledger = self.ledger()
        if not candidates or ledger is None:
            return RateCut(decision, 0.0, None)
        waited = 0.0
        while True:
            now = time.monotonic()
            fitted = ledger.admit(self.spec.member, candidates, now, waited)
            if fitted is None:  # no ledger: a reader outside the runtime, uncapped
                return RateCut(decision, 0.0, None)
            if fitted.count:
                break
            if waited == 0.0 or waited // READ_WAIT_LOG_S != (waited + fitted.wait_s) // READ_WAIT_LOG_S:
                log.info(
                    "%s waits %.1fs for read-rate tokens (next split: %d bytes, %d files)",
                    self.spec.member,
                    fitted.wait_s,
                    *candidates[0],
                )
            pause = fitted.wait_s + 0.001
            time.sleep(pause)
            waited += pause
        end = decision.start + fitted.count
        return RateCut(replace(decision, end=end, throttled=decision.throttled and end == decision.end), waited, now)

    def provider(self) -> WatermarkProvider:
        if self._provider is None:
            coord = self.spec.coordinator
            if coord is not None:
                self._provider = HttpWatermarkProvider(
                    coord.url, self.spec.group, coord.token, coord.timeout.total_seconds()
                )
            else:
                assert self.spec.state_file, "the runtime sets state_file for aligned sources"
                self._provider = LocalWatermarkProvider(self.spec.state_file, self.spec.members)
        return self._provider

    def _offset(self, d: dict) -> tuple[BackfillOffset, list[Split]]:
        off = BackfillOffset.from_dict(d)
        splits, fingerprint = self.plan(off.snapshot_id)
        if fingerprint != off.plan:
            raise PlanChangedError(
                f"source {self.spec.name}: the checkpoint was planned with other split settings, window or "
                f"filter (plan {off.plan}, now {fingerprint}); keep them unchanged to resume, or start the "
                "backfill with a fresh checkpoint location"
            )
        return off, splits

    def initialOffset(self) -> dict:
        sid = self.spec.source.snapshot_id
        if sid is None:
            current = self.table.current_snapshot()
            if current is None:
                raise SnapshotExpiredError(f"{self.spec.source.table} has no snapshot: nothing to backfill")
            sid = current.snapshot_id
        splits, fingerprint = self.plan(sid)
        return BackfillOffset(sid, 0, fingerprint, len(splits), self.spec.name).to_dict()

    def prepareForTriggerAvailableNow(self) -> None:
        """The plan is fixed at the snapshot in the offsets: later commits are never read.

        Under AvailableNow a source that returns its start offset ends the query, so a source
        throttled to nothing by a member of *another* query waits instead (see ``_decide``)."""
        self._available_now = True

    def _decide(
        self, splits: list[Split], position: int, limit: ReadLimit
    ) -> tuple[Admission, GroupView | None, int | None]:
        mode = self.spec.alignment.mode
        if mode == "unordered":
            return admit(splits, position, None, self.limits(limit)), None, None
        drift = int(self.spec.alignment.effective_drift.total_seconds() * 1_000_000)
        wm = source_watermark(splits, position)
        limits = self.limits(limit)
        turn: Turn | None = None
        pause, waited = 0.05, 0.0
        while True:
            first = not self._reported
            view = self.provider().report(self.spec.member, wm, reset=first)
            self._reported = True
            if turn is None:  # once per batch: a plan is taken once
                turn = self._turn(splits, position, limits, view, drift)
                self._last_turn = turn
            bound = combined_bound(view.bound(drift), turn.plan)
            decision = admit(splits, position, bound, limits)
            if turn.plan is not None and turn.plan.rounds > 1:
                decision = self._honor_floor(splits, decision, turn)
            if (
                decision.end > position
                or wm is None
                or not getattr(self, "_available_now", False)
                or not held_outside(view, self.spec.member)
            ):
                return decision, view, bound
            # Held by a member of another query: returning our start offset would end this query.
            if view.missing and waited >= self._hold_limit():
                raise IncompleteBackfillError(
                    f"{self.spec.member} waited {waited:.0f}s for alignment group {self.spec.group!r} members that "
                    f"never reported: {', '.join(view.missing)}. Each declared member must be read by a running "
                    "query (a configured source the pipeline does not read is not a member; another job of the "
                    "group must be running); nothing was admitted past the bound"
                )
            if waited == 0.0 or waited // 30 != (waited + pause) // 30:
                log.info(
                    "%s waits for %s (global %s, bound %s)",
                    self.spec.member,
                    ", ".join(view.holders),
                    view.global_watermark,
                    bound,
                )
            time.sleep(pause)
            waited += pause
            pause = min(pause * 2, 1.0)

    def rounds(self) -> QueryRounds | None:
        """The query's admission-round record; None when batches are one round each."""
        if self.spec.batch_row_budget <= 0 or not self.spec.rounds_file:
            return None
        return QueryRounds(self.spec.rounds_file)

    def _mates(self) -> tuple[str, ...]:
        query = query_of(self.spec.member)
        return tuple(m for m in self.spec.members if query_of(m) == query) or (self.spec.member,)

    def _turn(self, splits: list[Split], position: int, limits: Limits, view: GroupView, drift: int) -> Turn:
        rounds = self.rounds()
        if rounds is None:
            return Turn(None, planner=False)
        budget = self.spec.batch_row_budget
        own = lookahead(splits, position, limits, budget)
        return rounds.turn(self.spec.member, self._mates(), own, view.outside, drift, budget)

    def _honor_floor(self, splits: list[Split], decision: Admission, turn: Turn) -> Admission:
        """Every split below the plan's floor goes in: the planner admitted rows that would make
        them late in a later batch. Within the read limits unless the plan's view of this source
        was stale (a lookahead from before a restart)."""
        assert turn.plan is not None
        kept = honor_floor(splits, decision, turn.plan.floor)
        if kept.end > decision.end:
            log.warning(
                "%s admits splits %d..%d past its read limit to complete the batch's admission rounds (the plan "
                "assumed position %s, it is at %d)",
                self.spec.member,
                decision.end,
                kept.end,
                turn.assumed,
                decision.start,
            )
        return kept

    def _leave_lookahead(self, splits: list[Split], position: int, limit: ReadLimit) -> None:
        rounds = self.rounds()
        if rounds is not None:
            rounds.leave(self.spec.member, lookahead(splits, position, self.limits(limit), self.spec.batch_row_budget))

    def _hold_limit(self) -> float:
        """How long a member that never reported may hold this query before it fails: long
        enough for another job of the group to wait for pods, short of waiting forever."""
        return MISSING_MEMBER_LIMIT_S

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        off, splits = self._offset(start)
        mode = self.spec.alignment.mode
        wm = source_watermark(splits, off.position)
        aligned, view, bound = self._decide(splits, off.position, limit)
        decision, waited, taken_at = self._rate_cut(self.costs(off.snapshot_id), aligned)
        new_wm = source_watermark(splits, decision.end)
        before = self.read_count(off.snapshot_id, off.position)
        read = self.read_count(off.snapshot_id, decision.end)
        if mode != "unordered" and (new_wm != wm or decision.throttled or decision.end > off.position):
            self.provider().report(self.spec.member, new_wm, throttled=decision.throttled, read=read)
        if mode != "unordered":
            self._leave_lookahead(splits, decision.end, limit)
        turn = self._last_turn if mode != "unordered" else None
        plan = None if turn is None else turn.plan
        trace(
            self.spec.trace_path,
            "admission",
            source=self.spec.name,
            member=self.spec.member,
            group=self.spec.group,
            mode=mode,
            watermark=wm,
            global_watermark=None if view is None else view.global_watermark,
            outside=None if view is None else view.outside,
            missing=[] if view is None else list(view.missing),
            bound=bound,
            start=decision.start,
            end=decision.end,
            total=len(splits),
            throttled=decision.throttled,
            admitted=[[s.lower, s.upper, s.rows] for s in splits[decision.start : decision.end]],
            bytes=read.bytes - before.bytes,
            files=read.files - before.files,
            read_bytes=read.bytes,
            read_files=read.files,
            rate_limited=decision.end < aligned.end,
            read_wait_s=round(waited, 3),
            taken_at=taken_at,
            planner=turn is not None and turn.planner,
            rounds=1 if plan is None else plan.rounds,
            round_floor=None if plan is None or plan.rounds <= 1 else plan.floor,
        )
        return BackfillOffset(off.snapshot_id, decision.end, off.plan, len(splits), self.spec.name).to_dict()

    def reportLatestOffset(self) -> dict | None:
        return None

    def task_splits(self, start: dict, end: dict) -> list[list[Split]]:
        s, splits = self._offset(start)
        e, _ = self._offset(end)
        return self.packed(splits[s.position : e.position])


class LiveReader(_IcebergReader):
    """Incremental appends of the table's history, snapshot by snapshot."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._cache: dict[int, list[Split]] = {}
        self._bounded = False
        self._target: int | None = None

    def splits_of(self, snapshot_id: int) -> list[Split]:
        if snapshot_id not in self._cache:
            snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
            files = scan.files_added_by(self.table, snap, self.spec.ordering_column, self.spec.source.filter)
            self._layouts.update({f.path: (f.size_bytes, f.row_group_offsets) for f in files})
            self._cache[snapshot_id] = plan_splits(files, self.spec.source.split)
        return self._cache[snapshot_id]

    def initialOffset(self) -> dict:
        src = self.spec.source
        assert src.kind == "icebergLive"
        table = self.refresh()
        chain = scan.history(table)
        current = chain[-1].snapshot_id if chain else None
        if src.starting_snapshot_id is not None:
            if src.starting_snapshot_id not in {s.snapshot_id for s in chain}:
                raise SnapshotExpiredError(
                    f"sources.{self.spec.name}.startingSnapshotId {src.starting_snapshot_id} is not in the "
                    f"history of {src.table} (expired, or not an ancestor of the current snapshot)"
                )
            return LiveOffset(src.starting_snapshot_id, 0, False).to_dict()
        if src.starting_timestamp is not None:
            ms = micros(src.starting_timestamp) // 1000
            first = next((s for s in chain if s.timestamp_ms >= ms), None)
            if first is None:
                return LiveOffset(current, 0, True).to_dict()
            if first is chain[0]:
                self._refuse_expired_start(chain[0], f"startingTimestamp {src.starting_timestamp.isoformat()}")
            return LiveOffset(first.snapshot_id, 0, False).to_dict()
        if src.starting_position == "earliest" and chain:
            self._refuse_expired_start(chain[0], "startingPosition earliest")
            return LiveOffset(chain[0].snapshot_id, 0, False).to_dict()
        return LiveOffset(current, 0, True).to_dict()

    def _refuse_expired_start(self, oldest: Snapshot, what: str) -> None:
        """Reading from the oldest retained snapshot on would skip every row the expired ones
        added (still in the table): silent loss, so refuse and say what to do instead."""
        if expired_before(oldest):
            raise SnapshotExpiredError(
                f"sources.{self.spec.name}: {what} on {self.spec.source.table} would start at snapshot "
                f"{oldest.snapshot_id}, but the snapshots before it were expired: the rows they added are in "
                "the table and would never be read. Start from startingPosition: latest and backfill the "
                "history (a Backfill reads the table as it is), or keep more history on the writer"
            )

    def prepareForTriggerAvailableNow(self) -> None:
        current = self.refresh().current_snapshot()
        self._bounded = True
        self._target = current.snapshot_id if current else None

    def _chain_after(self, offset: LiveOffset) -> list[int]:
        """Snapshot ids from the offset's snapshot (inclusive) to the newest allowed."""
        chain = [s.snapshot_id for s in scan.history(self.table)]
        if self._bounded:
            chain = chain[: chain.index(self._target) + 1] if self._target in chain else []
        if offset.snapshot_id is None:
            return chain
        if offset.snapshot_id not in chain:
            scan.require_snapshot(self.table, offset.snapshot_id, "the last snapshot this query read")
            raise self._not_ancestor(offset.snapshot_id, "which this query read last")
        return chain[chain.index(offset.snapshot_id) :]

    def _not_ancestor(self, snapshot_id: int, what: str) -> SnapshotExpiredError:
        return SnapshotExpiredError(
            f"{self.spec.source.table}: snapshot {snapshot_id}, {what}, is no longer an ancestor of the "
            "current snapshot (the table was rolled back, or snapshots in between expired); reading on would "
            "skip or repeat data: restart from a fresh checkpoint with an explicit starting position"
        )

    def _rewrite(self, snapshot_id: int) -> bool:
        snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
        return snap.summary is not None and snap.summary.operation.value == "replace"

    def _readable(self, snapshot_id: int) -> bool:
        """Whether a snapshot adds data to read; non-appends are skipped or fail per config."""
        snap = scan.require_snapshot(self.table, snapshot_id, "a snapshot this query reads")
        op = snap.summary.operation.value if snap.summary else "append"
        if op == "append":
            return True
        if op == "replace":
            log.info("%s: snapshot %s rewrites files (replace): no new data", self.spec.name, snapshot_id)
            return False
        if self.spec.source.on_non_append == "skip":
            log.warning("%s: skipping %s snapshot %s (onNonAppend: skip)", self.spec.name, op, snapshot_id)
            trace(self.spec.trace_path, "skip", source=self.spec.name, snapshot_id=str(snapshot_id), operation=op)
            return False
        raise NonAppendSnapshotError(
            f"{self.spec.source.table}: snapshot {snapshot_id} is a {op}; a live source reads appends only. "
            f"Set sources.{self.spec.name}.onNonAppend: skip to log and skip such snapshots"
        )

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        off = LiveOffset.from_dict(start)
        self.refresh()
        chain = self._chain_after(off)
        limits = self.limits(limit)
        max_snapshots = self.spec.source.read_limit.max_snapshots
        used_files = used_rows = used_bytes = 0
        started = 0 if off.complete else 1  # a snapshot this batch continues counts as one
        current = off
        admitted: list[list[Any]] = []
        for sid in chain:
            if current.snapshot_id == sid and current.complete:
                continue
            if current.snapshot_id != sid:
                # a compaction's replace is passed over without counting: no empty batch for it
                rewrite = self._rewrite(sid)
                if max_snapshots is not None and started >= max_snapshots and not rewrite:
                    break
                started += 0 if rewrite else 1
                if not self._readable(sid):
                    current = LiveOffset(sid, 0, True)
                    continue
                current = LiveOffset(sid, 0, False)
            splits = self.splits_of(sid)
            remaining = Limits(
                max_files=None if limits.max_files is None else limits.max_files - used_files,
                max_rows=None if limits.max_rows is None else limits.max_rows - used_rows,
                max_bytes=None if limits.max_bytes is None else limits.max_bytes - used_bytes,
            )
            if (used_files or used_rows or used_bytes) and any(
                v is not None and v <= 0 for v in (remaining.max_files, remaining.max_rows, remaining.max_bytes)
            ):
                break
            decision = admit(splits, current.position, None, remaining, at_least_one=not admitted)
            taken = splits[decision.start : decision.end]
            used_files += sum(s.files for s in taken)
            used_rows += sum(s.rows for s in taken)
            used_bytes += sum(s.size_bytes for s in taken)
            admitted += [[str(sid), s.lower, s.upper, s.rows] for s in taken]
            current = LiveOffset(sid, decision.end, decision.end >= len(splits))
            if not current.complete:
                break
        if admitted or current != off:
            trace(
                self.spec.trace_path,
                "live",
                source=self.spec.name,
                start=start,
                end=current.to_dict(),
                admitted=admitted,
            )
        return current.to_dict()

    def task_splits(self, start: dict, end: dict) -> list[list[Split]]:
        s, e = LiveOffset.from_dict(start), LiveOffset.from_dict(end)
        if e.snapshot_id is None or s == e:
            return []
        chain = self._chain_upto(s, e)
        picked: list[Split] = []
        for sid in chain:
            snap = scan.require_snapshot(self.table, sid, "a snapshot of this batch")
            op = snap.summary.operation.value if snap.summary else "append"
            if op != "append":
                continue
            splits = self.splits_of(sid)
            lo = s.position if sid == s.snapshot_id else 0
            hi = e.position if sid == e.snapshot_id else len(splits)
            picked += splits[lo:hi]
        return self.packed(picked)

    def _chain_upto(self, s: LiveOffset, e: LiveOffset) -> list[int]:
        full = [snap.snapshot_id for snap in scan.history(self.table)]
        for off, what in ((e, "the end of this batch"), (s, "the start of this batch")):
            if off.snapshot_id is not None and off.snapshot_id not in full:
                scan.require_snapshot(self.table, off.snapshot_id, what)
                raise self._not_ancestor(off.snapshot_id, what)
        hi = full.index(e.snapshot_id)  # type: ignore[arg-type]
        if s.snapshot_id is None:
            return full[: hi + 1]
        chain = full[full.index(s.snapshot_id) : hi + 1]
        return chain[1:] if s.complete else chain
