"""``alignment.mode: bounded``: a backfill as the batch job a user would write, with the job's
own pipeline. Each source is handed to the pipeline as one bounded DataFrame of the rows the
streaming read would deliver over the whole run (``frame.iceberg_batch_frame``: the same files
of one snapshot, the same window, warm-up and drain, filter and columns), and each sink's
output is written into the backfill's branch as one batch, committed once by its batch id
under a query id kept in the checkpoint: a run killed mid-write resumes, a run killed after
its commit skips it. No state store, no micro-batches, no coordination.

A batch query gives the output the streaming run gives only where Spark's batch semantics
are its streaming ones. Stateless steps, stream-static joins and inner stream-stream joins
(range joins included) are: an inner join emits each match as it is found, and a batch join
finds the same matches (a streaming run drops none as late when the lateness guard passes;
a bounded run drops none at all). A windowed or session aggregation is, once the streaming
run's open/written rule is applied (``Closing``): the streaming run writes the results whose
end its final watermark (the newest event time of each watermarked source column, less the
delay, the least of them) has passed and holds the rest, and reads on while those that start
in the window are open and the history goes on; a bounded run computes that watermark from
the same rows, writes the same results, counts the same open ones and reads on as far.
Operators whose results depend on when the watermark passed (outer joins, arbitrary state with
timers, de-duplication within the watermark, chained aggregations) are not, and a bounded run
refuses them, naming the operator; so do processing-time functions (``current_timestamp``).

``alignment.mode: auto`` (the default) chooses bounded where all of this holds and no row
arrived behind the live watermark (``choose``), aligned otherwise, and says why. That last
proof reads the rows' two time columns where the manifests cannot clear them; for the sources
the first (Iceberg) sink reads, the bounded write observes them on the rows it reads anyway
and checks before its commit (``Proof``): late rows found there remove its files and the run
goes on aligned (``LateRowsFound``), so the proof costs the run no pass of its own."""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_app.contract.alignment import ModeChoice
from spark_app.contract.config import IcebergSink, JobConfig, ParquetSink
from spark_app.contract.durations import format_duration
from spark_app.contract.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_app.apps.result import RunResult
    from spark_app.sources.frames import Pipeline
    from spark_app.window.edges import Edges

log = logging.getLogger(__name__)

STATE_FILE = "bounded.json"
"""In the backfill's checkpoint location: the snapshot each source reads and each sink's query
id, written before any data is (a restarted run reads the same rows, commits under the same id)."""

_REFUSED: tuple[tuple[str, str], ...] = (
    (r"\bDeduplicateWithinWatermark\b", "dropDuplicatesWithinWatermark (its state ends with the watermark)"),
    (r"\bDeduplicate\b", "dropDuplicates on a stream (its state ends with the watermark)"),
    (r"FlatMapGroups(InPandas)?WithState\b", "arbitrary state (applyInPandasWithState / flatMapGroupsWithState)"),
    (r"TransformWithState", "transformWithState (state with timers)"),
    (r"\b(current_timestamp|current_date|now|localtimestamp)\(", "a processing-time function"),
)
_JOIN = re.compile(r"\bJoin (\w+)")
_STREAMING_LEAF = re.compile(r"\bStreaming\w*Relation")
_TREE = " :+-"
"""The characters of Spark's tree drawing (``:- `` a first child, ``+- `` the last)."""


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip(_TREE))


def joins(plan: str) -> list[tuple[str, bool]]:
    """Each join of an analyzed plan (its ``treeString``), and whether both its sides read a
    stream. A stream joined with a static frame (a lookup, ``spark_app.lookups``) emits each
    row when it arrives, matched or not, as a batch join does; only a join of two streams
    holds unmatched rows until the watermark passes."""
    lines = plan.splitlines()
    out = []
    for at, line in enumerate(lines):
        found = _JOIN.search(line)
        if found is None or found.start() != _depth(line):
            continue
        depth, sub = _depth(line), []
        for below in lines[at + 1 :]:
            if _depth(below) <= depth:
                break
            sub.append(below)
        starts = [i for i, below in enumerate(sub) if _depth(below) == depth + 3]
        sides = [sub[a:b] for a, b in zip(starts, [*starts[1:], len(sub)], strict=True)]
        streaming = [any(_STREAMING_LEAF.search(x) for x in side) for side in sides]
        out.append((found.group(1), len(streaming) == 2 and all(streaming)))
    return out


_AGGREGATE = re.compile(r"(?<![\w.])Aggregate \[")
_END = re.compile(r"\b\w+#\d+(?:-T\d+ms)?\.end AS (\w+)#\d+")  # -T<delay>ms: a watermarked column


def end_column(plan: str) -> str | None:
    """The output column holding a window's or session's end (``w.end AS window_end``): what
    the watermark is compared with to tell a written result from one still open."""
    found = _END.findall(plan)
    return found[-1] if len(set(found)) == 1 else None


def refusal(plans: dict[str, str]) -> str | None:
    """Why a bounded run would not write what the aligned run writes, naming the sink and
    the operator in its analyzed plan; None: it would write the same rows. One windowed or
    session aggregation per sink, with its end in the output, is the same: the aligned run
    writes the results whose end the final watermark has passed, and so does a bounded run
    (``Closing``); a group-by without a window end, or aggregations chained, is not."""
    for sink, plan in sorted(plans.items()):
        for pattern, what in _REFUSED:
            if re.search(pattern, plan):
                return f"sink {sink}'s pipeline has {what}"
        outer = next((kind for kind, both in joins(plan) if kind not in ("Inner", "Cross") and both), None)
        if outer is not None:
            return (
                f"sink {sink}'s pipeline has a {outer} join of two streams (its unmatched rows wait for the watermark)"
            )
        aggregates = len(_AGGREGATE.findall(plan))
        if aggregates > 1:
            return f"sink {sink}'s pipeline has {aggregates} aggregations chained (each emits on the watermark)"
        if aggregates == 1 and end_column(plan) is None:
            return (
                f"sink {sink}'s pipeline has an aggregation whose window or session end is not in its output "
                "(the watermark decides which of its results are written)"
            )
    return None


@dataclass(frozen=True)
class WatermarkInput:
    """A ``withWatermark`` on a source's own column: the final watermark is that column's
    newest value over the rows read, minus the delay."""

    source: str
    column: str
    delay_ms: int


@dataclass(frozen=True)
class Closing:
    """How a sink's results close (an aggregation that emits on the watermark): its end
    column, and the watermarks whose least is the final one."""

    end_column: str
    watermarks: tuple[WatermarkInput, ...]

    def final_watermark_us(self, newest_us: dict[tuple[str, str], int | None]) -> int | None:
        """Spark's global watermark after the last batch (policy min, over the operators that
        saw rows; event times in ms): results whose end is at or before it were written."""
        marks = [
            (newest // 1000 - w.delay_ms) * 1000
            for w in self.watermarks
            if (newest := newest_us.get((w.source, w.column))) is not None
        ]
        return max(min(marks), 0) if marks else None


def closings(outputs: dict[str, Any], frames: dict[str, dict[str, Any]]) -> dict[str, Closing | str]:
    """Per sink whose plan emits on the watermark: its ``Closing``, or why it has none (a
    watermark not on a source's own column: its newest value is not the history's)."""
    from spark_app.jvm.calls import analyzed_plan, watermarks
    from spark_app.window.horizon import emits_on_watermark

    out: dict[str, Closing | str] = {}
    for sink, df in outputs.items():
        plan = analyzed_plan(df)
        end = end_column(plan)
        if not emits_on_watermark(plan) or end is None:
            continue
        own = {analyzed_plan(frame): name for name, frame in frames[sink].items()}
        found: list[WatermarkInput] = []
        for mark in watermarks(df):
            source = own.get(mark.child)
            if source is None:
                out[sink] = f"sink {sink}'s watermark is not on a source's own column (set alignment.mode aligned)"
                break
            found.append(WatermarkInput(source, mark.column, mark.delay_ms))
        else:
            out[sink] = Closing(end, tuple(found)) if found else f"sink {sink}'s aggregation has no watermark"
    return out


ARRIVAL_COLUMN = "__metadata__.ingestion_ts"
"""When an archived row arrived (the archive's convention, ``sources/kafka.py``): with the
event time it says which rows live read behind its watermark."""

MODE_FILE = "mode.json"
"""In the backfill's checkpoint location: the mode ``auto`` chose, written before any write,
so a restarted run goes on in it whatever the history holds by then."""


@dataclass(frozen=True)
class LateArrivals:
    """Rows of one source that may have arrived behind the live job's watermark."""

    source: str
    rows: int
    worst: timedelta
    """The largest ingestion time - event time among them."""


def spec_reason(cfg: JobConfig) -> str | None:
    """What in the spec (not the pipeline) a bounded run cannot do as the streaming run does."""
    if cfg.read_rate is not None:
        return "readRate caps a streaming read (a bounded run reads the window in one batch query)"
    if cfg.alignment.allow_late_drops:
        return "allowLateDrops: the aligned run may drop rows as late, a batch query drops none"
    for name, sink in sorted(cfg.sinks.items()):
        if not isinstance(sink, IcebergSink | ParquetSink):
            return f"sink {name} is {sink.kind} (a bounded run writes Iceberg and Parquet sinks only)"
        if sink.output_mode != "append":
            return f"sink {name} has outputMode {sink.output_mode} (its intermediate results are streaming ones)"
    return None


def plan_reason(plans: dict[str, str], closes: dict[str, Closing | str]) -> str | None:
    """Why the sinks' plans do not give the aligned run's output as one batch query."""
    return refusal(plans) or next((c for _, c in sorted(closes.items()) if isinstance(c, str)), None)


def as_set(requested: str) -> ModeChoice | None:
    """An explicit ``alignment.mode`` is obeyed as set; None: ``auto``, which chooses."""
    return None if requested == "auto" else ModeChoice(requested, requested, "set in the spec (alignment.mode)")


def choose(
    cfg: JobConfig,
    plans: dict[str, str],
    late: list[LateArrivals],
    unknown: list[str],
    closes: dict[str, Closing | str] | None = None,
) -> ModeChoice:
    """``alignment.mode``: an explicit mode as set; ``auto``: bounded when its output is provably
    the aligned run's (the spec, every operator of every sink's plan, and no row that arrived
    behind the live watermark), aligned otherwise, with the reason either way. ``unknown``: the
    sources without an arrival column (which of their rows live dropped cannot be told).
    ``closes``: the sinks whose results close on the watermark (``closings``)."""
    explicit = as_set(cfg.alignment.mode)
    if explicit is not None:
        return explicit
    closes = closes or {}
    why = spec_reason(cfg) or plan_reason(plans, closes)
    if why is not None:
        return ModeChoice("auto", "aligned", f"not bounded: {why}")
    if late:
        return late_choice(late)
    windows = ", windows and sessions written once the final watermark passed their end" if closes else ""
    said = (
        f"every operator's batch result is its streaming one (stateless steps, stream-static and inner joins{windows})"
    )
    if unknown:
        said += (
            f"; {', '.join(unknown)} has no {ARRIVAL_COLUMN}, so rows live dropped as late cannot be told "
            "(the aligned run keeps them too)"
        )
    else:
        said += ", and no row arrived behind the live watermark"
    return ModeChoice("auto", "bounded", said)


def late_choice(late: list[LateArrivals]) -> ModeChoice:
    """``auto``'s choice where rows arrived behind the live watermark: aligned, saying how many."""
    first = late[0]
    return ModeChoice(
        "auto",
        "aligned",
        f"not bounded: {sum(x.rows for x in late):,} row(s) arrived behind the live watermark (source "
        f"{first.source}: ingestion up to {format_duration(first.worst)} after event time); live dropped "
        "them as late, which a batch query cannot reproduce",
    )


def late_bound(spans: list[tuple[int, int, int, int]], delay_us: int) -> bool:
    """Whether files' statistics prove that no row arrived behind the live watermark.
    ``spans``: per file (lowest event, highest event, lowest arrival, highest arrival), µs.
    Live's watermark when a row arrives is at most the newest event seen by then minus the
    delay, and an event seen by then is at most its arrival plus the largest skew (event time
    after arrival); so a row is kept when arrival - event <= delay - skew."""
    if not spans:
        return True
    lag = max(hi_in - lo_ev for lo_ev, _, _, hi_in in spans)
    skew = max(0, max(hi_ev - lo_in for _, hi_ev, lo_in, _ in spans))
    return lag + skew <= delay_us


_WATERMARK_COLUMN = re.compile(r"EventTimeWatermark [^,\n]*, (\w+)#")


@dataclass(frozen=True)
class LatenessProbe:
    """How one source's rows are proven not late, row by row (``late_bound``'s rule): the
    largest arrival - event time among the rows read against the watermark delay less the
    largest skew (event time after arrival). Its two maxima are one aggregate over the rows:
    a pass of its own (``measured``), or observed on the bounded run's write (``metrics``),
    which then proves it before its commit at no cost of its own."""

    source: str
    event: str
    limit_us: int

    def lag(self) -> Any:
        from pyspark.sql import functions as F

        return F.unix_micros(F.col(ARRIVAL_COLUMN)) - F.unix_micros(F.col(self.event))

    def metrics(self) -> list[Any]:
        from pyspark.sql import functions as F

        return [F.max(self.lag()).alias("worst_lag_us"), F.max(-self.lag()).alias("worst_lead_us")]

    def late(self, frame: Any, worst: int | None, lead: int | None) -> LateArrivals | None:
        """The late rows of ``frame``, given its two maxima (counted only when some may be)."""
        if worst is None:  # no row read
            return None
        bound = self.limit_us - max(0, int(lead or 0))
        rows = frame.where(self.lag() > bound).count() if worst > bound else 0
        return LateArrivals(self.source, rows, timedelta(microseconds=int(worst))) if rows else None

    def measured(self, frame: Any) -> LateArrivals | None:
        worst, lead = frame.select(*self.metrics()).first() or (None, None)
        return self.late(frame, worst, lead)


def late_arrivals(
    spark: SparkSession,
    cfg: JobConfig,
    plans: dict[str, str],
    used: dict[str, tuple[str, ...]],
    delay: timedelta | None,
    observed: frozenset[str] = frozenset(),
) -> tuple[list[LateArrivals], list[str], dict[str, LatenessProbe]]:
    """The rows of each read source that may have arrived behind the live watermark, the
    sources that cannot say (no arrival column), and the probes of those of ``observed`` left
    to the write to prove. The manifests' statistics prove most windows clean without a row read
    (``late_bound``); a source they do not clear is counted exactly with one aggregate over
    its two time columns, unless the write observes it (``LatenessProbe``)."""
    from spark_app.sources.iceberg.frame import field_ids_read

    late: list[LateArrivals] = []
    unknown: list[str] = []
    proving: dict[str, LatenessProbe] = {}
    for name, found in _probes(spark, cfg, plans, used, delay, observed).items():
        if isinstance(found, str):
            unknown.append(name)
        elif name in observed:
            proving[name] = found
        else:
            with field_ids_read(spark):
                counted = found.measured(_proof_frame(spark, cfg, used, name))
            if counted is not None:
                late.append(counted)
    return late, unknown, proving


def lateness_probes(
    spark: SparkSession, cfg: JobConfig, plans: dict[str, str], edges: Edges, names: tuple[str, ...]
) -> dict[str, LatenessProbe]:
    """The probes of ``names`` (a choice's ``proving``, read back by a restarted run), for the
    write to observe."""
    found = _probes(spark, cfg, plans, edges.used, edges.delay, frozenset(names), only=frozenset(names))
    return {name: probe for name, probe in found.items() if isinstance(probe, LatenessProbe)}


def _probes(
    spark: SparkSession,
    cfg: JobConfig,
    plans: dict[str, str],
    used: dict[str, tuple[str, ...]],
    delay: timedelta | None,
    observed: frozenset[str],
    only: frozenset[str] | None = None,
) -> dict[str, LatenessProbe | str]:
    """Per read source that needs its rows to be proven: its probe, or "unknown" (no arrival
    column, or no watermarked column of the plan). Absent: proven already (no watermark, an
    empty table, or its manifests' statistics; not asked of an ``observed`` source, whose proof
    costs the write nothing)."""
    if delay is None or cfg.window is None:  # no watermark: live drops nothing as late
        return {}
    events = sorted({c for p in plans.values() for c in _WATERMARK_COLUMN.findall(p)})
    out: dict[str, LatenessProbe | str] = {}
    for name in sorted({n for names in used.values() for n in names}):
        if only is not None and name not in only:
            continue
        found = _probe(spark, cfg, used, name, events, int(delay.total_seconds() * 1e6), name not in observed)
        if found is not None:
            out[name] = found
    return out


def _proof_frame(spark: SparkSession, cfg: JobConfig, used: dict[str, tuple[str, ...]], name: str) -> Any:
    """The bounded frame of a source, as a sink reading it reads it (the write's own, cached)."""
    from spark_app.catalogs import load_table
    from spark_app.contract.config import IcebergBackfillSource
    from spark_app.sources.frames import source_spec, task_slots
    from spark_app.sources.iceberg.frame import iceberg_batch_frame
    from spark_app.window.history import snapshot_of

    src = cfg.sources[name]
    assert isinstance(src, IcebergBackfillSource)
    sink = next(sink for sink, names in sorted(used.items(), reverse=True) if name in names)
    sid = snapshot_of(load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table), src)
    assert sid is not None, "an empty table needs no proof"
    return iceberg_batch_frame(spark, source_spec(cfg, sink, name, task_slots(spark), ()), sid)


def _probe(
    spark: SparkSession,
    cfg: JobConfig,
    used: dict[str, tuple[str, ...]],
    name: str,
    events: list[str],
    limit_us: int,
    manifests: bool,
) -> LatenessProbe | str | None:
    """One source's probe (None: nothing of it can be late; "unknown": it cannot say)."""
    from spark_app.catalogs import load_table
    from spark_app.contract.config import IcebergBackfillSource
    from spark_app.sources.iceberg import scan
    from spark_app.sources.iceberg.stream import micros
    from spark_app.window.history import snapshot_of

    src = cfg.sources[name]
    assert isinstance(src, IcebergBackfillSource) and cfg.window is not None
    table = load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table)
    top = {f.name for f in table.schema().fields}
    event = next((c for c in events if c in top), None)
    sid = snapshot_of(table, src)
    if event is None:
        return "unknown"
    if sid is None:  # an empty table: nothing arrived at all
        return None
    try:
        table.schema().find_field(ARRIVAL_COLUMN)
    except ValueError:
        return "unknown"
    if manifests:
        window = (micros(cfg.window.read_start), micros(cfg.window.read_end))
        order = cfg.ordering_column(name)
        spans = scan.column_bounds(table, sid, order, window, src.filter, (event, ARRIVAL_COLUMN))
        if spans is not None and all(None not in s for s in spans) and late_bound(spans, limit_us):  # type: ignore[arg-type]
            return None
    if "__metadata__" not in _proof_frame(spark, cfg, used, name).columns:
        return "unknown"
    return LatenessProbe(name, event, limit_us)


def observable(cfg: JobConfig, edges: Edges) -> frozenset[str]:
    """The sources a bounded run's write can prove before any commit: those its first sink
    reads, when that sink is Iceberg (its files wait for the commit; a Parquet sink's files
    are its output as soon as they are written)."""
    first = next(iter(cfg.sinks))
    return frozenset(edges.used.get(first, ())) if isinstance(cfg.sinks[first], IcebergSink) else frozenset()


def chosen(
    spark: SparkSession,
    cfg: JobConfig,
    plans: dict[str, str],
    edges: Edges,
    closes: dict[str, Closing | str],
    observed: frozenset[str] = frozenset(),
) -> tuple[ModeChoice, dict[str, LatenessProbe]]:
    """``choose`` with what it needs found (the late arrivals only when nothing else decided),
    and the probes a bounded choice leaves to its write; ``observed``: sources whose proof a
    bounded run's write makes (its choice's ``proving``)."""
    if cfg.alignment.mode != "auto" or spec_reason(cfg) or plan_reason(plans, closes):
        return choose(cfg, plans, [], [], closes), {}
    late, unknown, proving = late_arrivals(spark, cfg, plans, edges.used, edges.delay, observed)
    choice = choose(cfg, plans, late, unknown, closes)
    if choice.mode != "bounded":
        return choice, {}
    return replace(choice, proving=tuple(sorted(proving))), proving


class LateRowsFound(Exception):
    """A bounded run's write found rows that arrived behind the live watermark, before its
    commit: the run goes on aligned (``choice``), nothing of the bounded write kept."""

    def __init__(self, choice: ModeChoice) -> None:
        super().__init__(choice.reason)
        self.choice = choice


def decided(
    spark: SparkSession, cfg: JobConfig, plans: dict[str, str], edges: Edges, closes: dict[str, Closing | str]
) -> tuple[ModeChoice, dict[str, LatenessProbe]]:
    """The run's mode: the one a previous attempt chose (``MODE_FILE``), else chosen now and
    saved before anything is written; with the probes a bounded run's write is left to prove
    (``ModeChoice.proving``). A run that wrote under an aligned checkpoint before ``auto``
    existed goes on aligned."""
    from spark_app.contract.storage import open_location

    if cfg.alignment.mode == "bounded" and (why := plan_reason(plans, closes)) is not None:
        raise ConfigError(
            f"alignment.mode bounded: {why}, whose batch result differs from what the streaming run writes; "
            "set alignment.mode to auto or aligned"
        )
    if cfg.alignment.mode != "auto":
        return choose(cfg, plans, [], []), {}
    location = open_location(cfg.checkpoint.location)
    if location.stat(MODE_FILE) is not None:
        saved = ModeChoice.from_json(location.read_bytes(MODE_FILE))
        proving = saved.proving if saved.mode == "bounded" else ()
        return saved, lateness_probes(spark, cfg, plans, edges, proving) if proving else {}
    probes: dict[str, LatenessProbe] = {}
    if any(location.stat(f"{sink}/metadata") is not None for sink in cfg.sinks):
        choice = ModeChoice("auto", "aligned", "not bounded: the run goes on from its streaming checkpoint")
    else:
        choice, probes = chosen(spark, cfg, plans, edges, closes, observable(cfg, edges))
    location.write_bytes(MODE_FILE, choice.to_json())
    pending = f" (the write proves it for {', '.join(choice.proving)} before it commits)" if choice.proving else ""
    log.info(
        "backfill %s: alignment.mode %s runs %s: %s%s", cfg.name, choice.requested, choice.mode, choice.reason, pending
    )
    return choice, probes


@dataclass(frozen=True)
class Proof:
    """What the first sink's write proves before its commit: its probes' maxima, observed on
    the rows it reads."""

    probes: dict[str, LatenessProbe]

    def check(self, read: dict[str, Any], observed: dict[str, Any]) -> None:
        """``LateRowsFound`` if a probed source's rows arrived behind the live watermark."""
        late = []
        for src, probe in sorted(self.probes.items()):
            got = observed[src].get or {}
            found = probe.late(read[src], got.get("worst_lag_us"), got.get("worst_lead_us"))
            if found is not None:
                late.append(found)
        if late:
            raise LateRowsFound(late_choice(late))


@dataclass
class BoundedState:
    """What a bounded run fixes before it writes (``STATE_FILE``)."""

    snapshots: dict[str, int] = field(default_factory=dict)
    query_ids: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps({"snapshots": self.snapshots, "queryIds": self.query_ids}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BoundedState:
        raw = json.loads(data)
        return cls({k: int(v) for k, v in raw["snapshots"].items()}, dict(raw["queryIds"]))


def fixed_state(cfg: JobConfig) -> BoundedState:
    """The run's snapshots and query ids: those a previous attempt fixed, else fixed now (each
    source's ``snapshotId``, else its table's current snapshot) and saved before any write."""
    from spark_app.catalogs import load_table
    from spark_app.contract.config import IcebergBackfillSource
    from spark_app.contract.errors import SnapshotExpiredError
    from spark_app.contract.storage import open_location

    location = open_location(cfg.checkpoint.location)
    if location.stat(STATE_FILE) is not None:
        return BoundedState.from_json(location.read_bytes(STATE_FILE))
    state = BoundedState()
    for name, src in cfg.sources.items():
        assert isinstance(src, IcebergBackfillSource)
        sid = src.snapshot_id
        if sid is None:
            current = load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table).current_snapshot()
            if current is None:
                raise SnapshotExpiredError(f"{src.table} has no snapshot: nothing to backfill")
            sid = current.snapshot_id
        state.snapshots[name] = sid
    state.query_ids = {sink: str(uuid.uuid4()) for sink in cfg.sinks}
    location.write_bytes(STATE_FILE, state.to_json())
    return state


def run_bounded(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    edges: Edges,
    stop_calls: Any,
    choice: ModeChoice,
    closes: dict[str, Closing | str],
    probes: dict[str, LatenessProbe],
) -> RunResult:
    """The backfill as one batch query per sink (see the module's docstring; ``decided`` has
    checked its plans); the run report as the streaming run's, with one batch per sink.
    A sink whose results close on the watermark writes those whose end the final watermark
    has passed, and reads on past the drain while some that start in the window are open
    and the history goes on: the aligned run's rule, step for step (``window_end.next_read``).

    ``probes``: the sources (``choice.proving``) the first sink's write proves were not late,
    from what it observes on the rows it reads, before its commit; if some were, its files are
    removed, the mode file says aligned and ``LateRowsFound`` tells the caller to run aligned."""
    from spark_app.apps.result import RunResult
    from spark_app.apps.window_end import next_read, record_finality
    from spark_app.contract.reports.run import write_report as write_run_report
    from spark_app.contract.storage import open_location
    from spark_app.sources.iceberg.frame import field_ids_read
    from spark_app.window.lateness import Verdict

    assert cfg.window is not None
    state = fixed_state(cfg)
    started = time.monotonic()
    extended: tuple[int, ...] = ()
    marks: dict[str, int | None] = {}
    try:
        with field_ids_read(spark):
            while True:
                marks = {
                    name: _final_watermark(spark, cfg, state, close, extended, name)
                    for name, close in closes.items()
                    if isinstance(close, Closing)
                }
                if not marks or not edges.drain:
                    break
                still = sum(
                    _still_open(spark, cfg, pipeline, state, name, closes[name], marks[name], extended)  # type: ignore[arg-type]
                    for name in marks
                )
                edges, until = next_read(cfg, edges, extended, still, None)
                if until is None:
                    break
                extended = (*extended, until)
            proof = Proof(probes) if probes else None
            progress = [
                _write_sink(
                    spark,
                    cfg,
                    pipeline,
                    state,
                    name,
                    extended,
                    closes.get(name),
                    marks.get(name),
                    proof if at == 0 else None,
                )
                for at, name in enumerate(cfg.sinks)
            ]
    except LateRowsFound as found:  # nothing committed: the run goes on aligned, its calls still served
        open_location(cfg.checkpoint.location).write_bytes(MODE_FILE, found.choice.to_json())
        log.info("backfill %s: the bounded write found late rows, runs aligned: %s", cfg.name, found.choice.reason)
        raise
    except BaseException:
        stop_calls()
        raise
    called = stop_calls()
    record_finality(cfg, edges)
    verdict = Verdict(True, cfg.alignment.max_drift, edges.delay, "bounded: one batch query, no row is late")
    report = RunResult(cfg.name, cfg.mode, time.monotonic() - started, progress, verdict, edges)
    report.external_calls = called
    report.edges_end = cfg.window.end
    report.extended_to = extended
    choice = replace(choice, proving=())  # proven by the commit
    report.mode_choice = choice
    write_run_report(cfg, report.seconds, progress, choice)
    return report


def _frames(
    spark: SparkSession, cfg: JobConfig, state: BoundedState, sink: str, extended: tuple[int, ...]
) -> dict[str, Any]:
    """Each source as one bounded DataFrame of the rows the streaming read delivers."""
    from spark_app.sources.frames import source_spec, task_slots
    from spark_app.sources.iceberg.frame import iceberg_batch_frame

    slots = task_slots(spark)
    return {
        src: iceberg_batch_frame(spark, source_spec(cfg, sink, src, slots, (), extended), state.snapshots[src])
        for src in cfg.sources
    }


def _output(spark: SparkSession, cfg: JobConfig, pipeline: Pipeline, frames: dict[str, Any], name: str) -> Any:
    """The sink's output of the job's own pipeline over ``frames``, cut to the window."""
    from spark_app.lookups.context import job_catalogs
    from spark_app.sinks.warmup import restrict_to_window
    from spark_app.sources.iceberg.stream import micros

    assert cfg.window is not None
    with job_catalogs({n: c.properties() for n, c in cfg.catalogs.items()}):
        out = pipeline(frames, **cfg.pipeline_args)[name]
    return restrict_to_window(out, cfg.sinks[name].time_column, micros(cfg.window.start), micros(cfg.window.end))


def _final_watermark(
    spark: SparkSession, cfg: JobConfig, state: BoundedState, close: Closing, extended: tuple[int, ...], name: str
) -> int | None:
    """The watermark the aligned run of sink ``name`` ends with, from the newest event time
    each watermarked column holds among the rows read (one aggregate over that column)."""
    from pyspark.sql import functions as F

    frames = _frames(spark, cfg, state, name, extended)
    newest: dict[tuple[str, str], int | None] = {}
    for w in close.watermarks:
        if (w.source, w.column) not in newest:
            value = frames[w.source].agg(F.max(F.unix_micros(F.col(w.column)))).first()
            newest[(w.source, w.column)] = None if value is None or value[0] is None else int(value[0])
    return close.final_watermark_us(newest)


def _still_open(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    state: BoundedState,
    name: str,
    close: Closing,
    watermark_us: int | None,
    extended: tuple[int, ...],
) -> int:
    """Results that start in the window and the final watermark has not passed: those the
    aligned run holds in state when it stops reading (``window.edges.open_results``)."""
    from spark_app.sinks.warmup import restrict_closed

    out = _output(spark, cfg, pipeline, _frames(spark, cfg, state, name, extended), name)
    return int(restrict_closed(out, close.end_column, watermark_us, still_open=True).count())


def _write_sink(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    state: BoundedState,
    name: str,
    extended: tuple[int, ...],
    close: Closing | str | None,
    watermark_us: int | None,
    proof: Proof | None = None,
) -> dict:
    """One sink's batch query, run and written; its progress entry (one batch, the rows each
    source handed the pipeline, as the streaming run's observed metrics count them). With a
    ``proof``, the same observation carries its probes' maxima, checked before the commit."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_app.sinks.iceberg.writer import IcebergBatchWriter
    from spark_app.sinks.warmup import restrict_closed

    sink = cfg.sinks[name]
    probes = proof.probes if proof is not None else {}
    observed = {src: Observation(f"{name}:{src}") for src in cfg.sources}
    read = _frames(spark, cfg, state, name, extended)
    frames = {
        src: df.observe(
            observed[src], F.count(F.lit(1)).alias("rows"), *(probes[src].metrics() if src in probes else ())
        )
        for src, df in read.items()
    }
    out = _output(spark, cfg, pipeline, frames, name)
    if isinstance(close, Closing):  # what the aligned run has written when it stops
        out = restrict_closed(out, close.end_column, watermark_us)
    began = time.monotonic()
    if isinstance(sink, IcebergSink):
        checkpoint = f"{cfg.checkpoint.location.rstrip('/')}/{name}"
        writer = IcebergBatchWriter(
            cfg.name, name, sink, cfg.catalogs[sink.catalog], cfg.sink_branch(name), checkpoint, cfg.trace_path,
            query_id=state.query_ids[name],
            before_commit=None if proof is None else lambda: proof.check(read, observed),
        )  # fmt: skip
        writer(out, 0)
    else:  # the backfill's own path (the operator gives it one): a rerun writes it again
        assert isinstance(sink, ParquetSink)
        files = out.write.mode("overwrite")
        files = files.partitionBy(*sink.partition_by) if sink.partition_by else files
        files.parquet(sink.path)
    rows = {src: int((o.get or {}).get("rows") or 0) for src, o in observed.items()}
    ms = int((time.monotonic() - began) * 1000)
    log.info("bounded: sink %s written in one batch (%d rows read, %d ms)", name, sum(rows.values()), ms)
    progress: dict[str, Any] = {
        "id": state.query_ids[name],
        "name": f"{cfg.name}-{name}",
        "batchId": 0,
        "numInputRows": sum(rows.values()),
        "durationMs": {"triggerExecution": ms, "addBatch": ms},
        "rowsBySource": rows,
    }
    if watermark_us is not None:  # as a streaming progress says it (its run summary's last watermark)
        at = datetime.fromtimestamp(watermark_us / 1e6, tz=UTC)
        progress["eventTime"] = {"watermark": at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"}
    return progress
