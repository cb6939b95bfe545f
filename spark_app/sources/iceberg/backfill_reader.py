"""The Iceberg source of a Backfill: a window's history, planned into splits once, admitted
in event-time order under its alignment group's bound (the coordinator's, or the planner's
rounds), cut to the read-rate cap, and read by byte range."""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pyspark.sql.streaming.datasource import (
    ReadLimit,
)

from spark_app.alignment.http import HttpWatermarkProvider
from spark_app.alignment.local import LocalWatermarkProvider
from spark_app.alignment.reads import ReadLedger, job_of, ledger_file
from spark_app.alignment.round_record import QueryRounds
from spark_app.contract.alignment import GroupView, ReadCount, WatermarkProvider, query_of, waits_for_group
from spark_app.contract.errors import (
    IncompleteBackfillError,
    PlanChangedError,
    SnapshotExpiredError,
)
from spark_app.contract.offsets import BackfillOffset
from spark_app.contract.trace import trace
from spark_app.planning.admission import Admission, Limits, admit, source_watermark
from spark_app.planning.read_rate import Cost, RateCut, read_cost
from spark_app.planning.rounds import Turn, combined_bound, honor_floor, lookahead
from spark_app.planning.splits import Split, plan_fingerprint
from spark_app.sources.iceberg.byte_ranges import bounds_of
from spark_app.sources.iceberg.spec import SourceSpec
from spark_app.sources.iceberg.stream import IcebergReader, backfill_plan_and_layouts

log = logging.getLogger(__name__)


MISSING_MEMBER_LIMIT_S = 1800.0


"""A backfill held this long by a declared member that never reported fails, naming it."""


READ_WAIT_LOG_S = 30.0


"""A source waiting for read-rate tokens says so this often."""


class BackfillReader(IcebergReader):
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
        if not self.spec.watermark_file:
            return None
        return ReadLedger(ledger_file(self.spec.watermark_file, job_of(self.spec.member)))

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
                assert self.spec.watermark_file, "the runtime sets watermark_file for aligned sources"
                self._provider = LocalWatermarkProvider(self.spec.watermark_file, self.spec.members)
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
                or position >= len(splits)
                or not getattr(self, "_available_now", False)
                or not waits_for_group(view, self.spec.member)
            ):
                return decision, view, bound
            # Held by a member of another query, or a stale view: our start offset would end this query.
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
                    "the coordinator (unreachable: its last view kept)" if view.stale else ", ".join(view.holders),
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
