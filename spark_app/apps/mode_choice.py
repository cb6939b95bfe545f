"""``alignment.mode: auto`` (the default) chooses bounded where all of this holds and no row
arrived behind the live watermark (``choose``), aligned otherwise, and says why. That last
proof reads the rows' two time columns where the manifests cannot clear them; for the sources
the first (Iceberg) sink reads, the bounded write observes them on the rows it reads anyway
and checks before its commit (``Proof``): late rows found there remove its files and the run
goes on aligned (``LateRowsFound``), so the proof costs the run no pass of its own.

The choice is written in the checkpoint (``MODE_FILE``) once made: a restarted driver runs as the
first one chose."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from spark_app.apps.query_shape import Closing, refusal
from spark_app.contract.alignment import ModeChoice
from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration
from spark_app.contract.errors import ConfigError
from spark_app.contract.sinks import IcebergSink, ParquetSink

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_app.window.edges import Edges

log = logging.getLogger(__name__)


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
    from spark_app.contract.sources import IcebergBackfillSource
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
    from spark_app.contract.sources import IcebergBackfillSource
    from spark_app.sources.iceberg import scan
    from spark_app.sources.iceberg.spec import micros
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
