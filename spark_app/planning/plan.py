"""A Backfill's plan, before it runs: what it will read and do, from Iceberg metadata and the
pipeline's analyzed plan, never by reading its rows.

Every number comes from the code the run itself uses, so the plan predicts the run instead of
approximating it: the splits are ``backfill_plan`` (the source's planner: manifests, column
statistics, and, like the run, the ordering column of files wider than ``split.sliceSpan``,
cut into time slices); the watermark delay, state horizon, drain and warm-up verdict are
``window.edges.resolve`` on the pipeline built over the sources (a SparkSession analyses it; no
Spark job runs); the lateness verdict is ``check_lateness`` with the guard's inputs; batches,
disorder and peak state are the admission rules replayed on the splits (``forecast``).

Without a SparkSession (``spark=None``) the plan is driver-only: the delay is
``alignment.lateness`` (else ``pipelineArgs.lateness``), the horizon what the pipeline declares
(``state_horizon(**pipelineArgs)``), and the report says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from spark_app.apps.mode_choice import as_set
from spark_app.contract.alignment import ModeChoice
from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration, parse_duration
from spark_app.contract.errors import ConfigError, KappaError, SnapshotExpiredError, WarmupError
from spark_app.contract.reports.plan import PlanReport, SourcePlan
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.jvm.calls import analyzed_plan, leaf_ids
from spark_app.planning import forecast
from spark_app.planning.admission import Limits
from spark_app.planning.split_spans import fit_sources
from spark_app.planning.splits import DataFileInfo, Split, is_wide, max_span
from spark_app.sources.iceberg.spec import micros
from spark_app.window.horizon import StateHorizon, WarmupVerdict, check_warmup, drain
from spark_app.window.lateness import check_lateness, spark_interval

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("kappa.plan")

US = 1_000_000


@dataclass(frozen=True)
class Shape:
    """What the plan needs of the pipeline, and where it came from."""

    delay: timedelta | None
    horizon: StateHorizon
    drain: timedelta
    order: dict[str, tuple[str, ...]]
    """Per sink, the sources its query reads, in the order Spark asks them for offsets."""
    stateful: bool
    warmup: WarmupVerdict | None
    """None: not checked yet (driver-only: checked against the tables later)."""
    notices: tuple[str, ...] = ()
    from_query_plan: bool = True
    bounded_refusal: str | None = None
    """Why ``alignment.mode: bounded`` would refuse this pipeline (``spark_app.apps.bounded``)."""
    choice: ModeChoice | None = None
    """The mode the run would run in and why (None: driver-only, no query plan to choose by)."""
    horizon_known: bool = True
    """False: driver-only, and the pipeline declares no ``state_horizon()``; its look-back is
    in the query plan only (a range join's bound, a window's length), so the plan says
    "unknown" rather than 0."""


@dataclass(frozen=True)
class SourceData:
    """One read source as the run's planner sees it."""

    name: str
    table: str
    snapshot_id: int | None
    files: tuple[DataFileInfo, ...]
    """The data files whose statistics may intersect the read range (before slicing)."""
    splits: tuple[Split, ...]
    limits: Limits
    ordering_column: str
    sliced: int


# --- the pipeline ----------------------------------------------------------------------


def source_order(frames: dict[str, DataFrame], output: DataFrame) -> tuple[str, ...]:
    """The sources ``output`` reads, in its plan's leaf order: the order in which Spark's
    micro-batch loop asks them for offsets (for up to four sources; beyond, Spark's own map
    order, which this cannot know)."""
    own = {name: ids[0] for name, frame in frames.items() if (ids := leaf_ids(frame))}
    order: list[str] = []
    for leaf in leaf_ids(output):
        order += [name for name, ids in own.items() if ids and ids <= leaf and name not in order]
    return tuple(order)


def shape_from_query_plan(spark: SparkSession, cfg: JobConfig) -> Shape:
    """Build the pipeline over the sources (no data read, no job run) and resolve its edges as
    the runtime does. A too-short warm-up is a verdict here, not an exception."""
    from spark_app.apps.mode_choice import chosen, plan_reason
    from spark_app.apps.pipeline_code import make_importable
    from spark_app.apps.query_shape import closings
    from spark_app.contract.errors import user_message
    from spark_app.sources.frames import load_pipeline, outputs_for
    from spark_app.window.edges import resolve

    make_importable(cfg.python_path, spark)
    pipeline = load_pipeline(cfg.pipeline)
    frames: dict[str, dict[str, DataFrame]] = {}
    try:
        outputs = outputs_for(spark, cfg, pipeline, frames=frames)
        plans = {sink: analyzed_plan(df) for sink, df in outputs.items()}
    except KappaError:
        raise
    except Exception as exc:  # the pipeline's own code, or a source's schema, failed in Spark
        raise ConfigError(
            f"pipeline {cfg.pipeline} does not build on the sources' schemas: {user_message(exc)}; fix the pipeline "
            "(or the sources' columns) so the job itself can start"
        ) from None
    assert cfg.window is not None
    try:
        edges = resolve(cfg, frames, outputs)
        warm = WarmupVerdict(True, edges.warmup_message)
        notices = edges.notices
    except WarmupError as exc:
        lenient = cfg.window.model_copy(update={"allow_short_warmup": True})
        edges = resolve(cfg.model_copy(update={"window": lenient}), frames, outputs)
        warm = WarmupVerdict(False, str(exc))
        notices = tuple(n for n in edges.notices if n != f"allowShortWarmup: {exc}")
    order = {
        sink: tuple(n for n in source_order(frames[sink], df) if n in edges.used[sink]) for sink, df in outputs.items()
    }
    closes = closings(outputs, frames)
    return Shape(
        delay=edges.delay,
        horizon=edges.horizon,
        drain=edges.drain,
        order=order,
        stateful=any(forecast.stateful(p) for p in plans.values()),
        warmup=warm,
        notices=notices,
        bounded_refusal=plan_reason(plans, closes) if cfg.alignment.mode == "bounded" else None,
        choice=chosen(spark, cfg, plans, edges, closes)[0],
    )


UNKNOWN_LOOKBACK = (
    "the pipeline declares no state_horizon(), and its joins' and windows' bounds are in its query plan: "
    "plan with Spark (without --no-spark) to read them"
)


def declared_delay(cfg: JobConfig) -> tuple[timedelta | None, str]:
    """Driver-only: the watermark delay from ``alignment.lateness``, else ``pipelineArgs.lateness``."""
    if cfg.alignment.lateness is not None:
        return cfg.alignment.lateness, "alignment.lateness"
    raw = cfg.pipeline_args.get("lateness")
    if raw is None:
        return None, "none declared"
    text = str(raw)
    delay = spark_interval(text)
    if not delay:
        try:
            delay = parse_duration(raw)
        except ValueError:
            raise ConfigError(
                f"pipelineArgs.lateness {raw!r} is not a duration; set alignment.lateness (e.g. 30m) for a "
                "driver-only plan, or plan with a SparkSession to read it from the query plan"
            ) from None
    return delay, "pipelineArgs.lateness"


def shape_from_declarations(cfg: JobConfig) -> Shape:
    """Driver-only: what the config and the pipeline module declare, no query plan."""
    from spark_app.apps.pipeline_code import make_importable
    from spark_app.sources.frames import load_pipeline
    from spark_app.window.edges import declared_horizon, declares_horizon

    assert cfg.window is not None
    make_importable(cfg.python_path)  # the driver's half: no executors to ship to
    load_pipeline(cfg.pipeline)  # a pipeline that does not import is refused as the run would refuse it
    delay, where = declared_delay(cfg)
    horizon = declared_horizon(cfg.pipeline, cfg.pipeline_args)
    known = declares_horizon(cfg.pipeline)
    window = cfg.window
    drained = window.drain if window.drain is not None else drain(delay, horizon, horizon.lookahead > timedelta(0))
    declared = delay is not None or horizon != StateHorizon()
    note = (
        f"planned driver-only (no SparkSession, no query plan): watermark delay from {where}"
        f"{'' if delay is None else ' ' + format_duration(delay)}, "
        + (
            f"state horizon from {cfg.pipeline}'s state_horizon() ({horizon.describe()})"
            if known
            else f"look-back unknown ({UNKNOWN_LOOKBACK})"
        )
        + f", drain {format_duration(drained)}, state "
        f"{'assumed' if declared else 'not assumed (nothing declared)'}; the run reads these from the query plan, "
        "so plan with Spark for the guard's exact verdict"
    )
    return Shape(
        delay=delay,
        horizon=horizon,
        drain=drained,
        order={sink: tuple(cfg.sources) for sink in cfg.sinks},
        stateful=declared,
        warmup=None,
        notices=(note,),
        from_query_plan=False,
        horizon_known=known,
    )


# --- the sources -------------------------------------------------------------------------


def plan_source(cfg: JobConfig, name: str) -> SourceData:
    """One source's files and splits, planned by the source's own planner (``backfill_plan``),
    and the read limits its reader applies per micro-batch."""

    from spark_app.catalogs import load_table
    from spark_app.sources.frames import source_spec
    from spark_app.sources.iceberg import scan
    from spark_app.sources.iceberg.backfill_reader import BackfillReader
    from spark_app.sources.iceberg.schema import ordering_field
    from spark_app.sources.iceberg.stream import backfill_plan

    src = cfg.sources[name]
    assert isinstance(src, IcebergBackfillSource) and cfg.window is not None
    spec = source_spec(cfg, next(iter(cfg.sinks)), name, 1)
    table = load_table(spec.catalog_name, spec.catalog, src.table)
    ordering_field(table.schema(), spec.ordering_column, src.table)
    current = table.current_snapshot()
    sid = src.snapshot_id if src.snapshot_id is not None else (current.snapshot_id if current else None)
    if sid is None:
        raise SnapshotExpiredError(
            f"{src.table} has no snapshot: nothing to backfill, and the run would fail at start; write its history "
            "first, or leave the source out of the StreamingJob"
        )
    bounds = (micros(cfg.window.read_start), micros(cfg.window.read_end))
    files = scan.files_in_window(table, sid, spec.ordering_column, bounds, src.filter)
    splits = backfill_plan(table, spec, sid)
    reader = BackfillReader(spec)
    sliced = 0 if not cfg.alignment.coordinated else sum(is_wide(f, src.split, bounds) for f in files)
    return SourceData(
        name=name,
        table=src.table,
        snapshot_id=sid,
        files=tuple(files),
        splits=tuple(splits),
        limits=reader.limits(reader.getDefaultReadLimit()),
        ordering_column=spec.ordering_column,
        sliced=sliced,
    )


def history_before(cfg: JobConfig, names: list[str], lookback: timedelta) -> bool:
    """Driver-only warm-up check: data between ``start - lookback`` and the read start."""
    from spark_app.catalogs import load_table
    from spark_app.sources.iceberg import scan

    assert cfg.window is not None
    lo, hi = cfg.window.start - lookback, cfg.window.read_start
    if lo >= hi:
        return False
    for name in names:
        src = cfg.sources[name]
        assert isinstance(src, IcebergBackfillSource)
        table = load_table(src.catalog, cfg.catalogs[src.catalog].properties(), src.table)
        current = table.current_snapshot()
        sid = src.snapshot_id if src.snapshot_id is not None else (current.snapshot_id if current else None)
        if sid is not None and scan.files_in_window(
            table, sid, cfg.ordering_column(name), (micros(lo), micros(hi)), src.filter
        ):
            return True
    return False


# --- the report --------------------------------------------------------------------------


def source_plan(data: SourceData, cfg: JobConfig, out_of_order_us: int) -> SourcePlan:
    assert cfg.window is not None
    read = {p.path for s in data.splits for p in s.pieces}
    lo, hi = micros(cfg.window.start), micros(cfg.window.end)
    missing = sum(1 for f in data.files if f.lower is None or f.upper is None)
    warnings = []
    if missing:
        warnings.append(forecast.statistics_warning(missing, len(data.files), data.table, data.ordering_column))
    warnings += forecast.split_warnings(data.splits, data.table)
    if not data.splits:
        warnings.append(
            f"no data file of {data.table} holds rows between {cfg.window.read_start.isoformat()} and "
            f"{cfg.window.read_end.isoformat()} (window with warm-up and drain): this source reads nothing"
        )
    return SourcePlan(
        source=data.name,
        table=data.table,
        snapshot_id=data.snapshot_id,
        files=len(read),
        bytes=sum(f.size_bytes for f in data.files if f.path in read),
        rows=sum(s.rows for s in data.splits),
        rows_in_window=round(sum(forecast.rows_within(s, lo, hi) for s in data.splits)),
        splits=len(data.splits),
        max_split_span_s=max_span(data.splits) / US,
        out_of_order_s=out_of_order_us / US,
        has_statistics=missing == 0,
        warnings=warnings,
        sliced_files=data.sliced,
    )


def failed(cfg: JobConfig, tag: str | None, error: str) -> PlanReport:
    """A plan that could not be made: the error names the source or field and the fix."""
    a = cfg.alignment
    drift = a.effective_drift.total_seconds()
    return PlanReport(
        backfill=tag,
        state="Failed",
        error=error,
        mode=a.mode,
        max_drift_s=drift,
        lateness_required_s=drift,
        pipeline_lateness_s=None if a.lateness is None else a.lateness.total_seconds(),
        lateness_ok=False,
        lateness_message=f"not planned: {error}",
        max_drift_fitting_s=None,
        expected_batches=0,
        peak_state_rows=0,
        state_horizon_s=None,
        recommended_warmup_s=None,
        rows_total=0,
        bytes_total=0,
        planned_at=datetime.now(UTC),
    )


def decide_backfill(cfg: JobConfig, spark: SparkSession | None, tag: str | None = None) -> PlanReport:
    """The plan of a backfill JobConfig (mode backfill, sources icebergBackfill). ``spark``:
    read the pipeline's delay and horizon from its analyzed plan (None: driver-only). A refusal
    (a missing table or column, a pipeline that does not build, a table without snapshot) is a
    Failed report naming it; anything else raises."""
    if cfg.mode != "backfill" or cfg.window is None:
        raise ConfigError(f"job {cfg.name}: a plan needs a backfill config (mode: backfill, a window)")
    cfg = cfg.model_copy(update={"trace_path": None})  # planning is not part of the run's audit trail
    try:
        return _plan(cfg, spark, tag)
    except KappaError as exc:
        log.warning("plan of %s failed: %s", cfg.name, exc)
        return failed(cfg, tag, str(exc))


def _plan(cfg: JobConfig, spark: SparkSession | None, tag: str | None) -> PlanReport:
    assert cfg.window is not None
    shape = shape_from_query_plan(spark, cfg) if spark is not None else shape_from_declarations(cfg)
    cfg = cfg.model_copy(update={"window": cfg.window.model_copy(update={"drain": shape.drain})})
    cfg = fit_sources(cfg, cfg.alignment.lateness or shape.delay)
    names = [n for n in cfg.sources if any(n in srcs for srcs in shape.order.values())]
    sources: dict[str, SourceData] = {}
    for name in names:
        try:
            sources[name] = plan_source(cfg, name)
        except KappaError as exc:
            raise type(exc)(f"source {name}: {exc}") from None
    if spark is None:  # with Spark, window.edges.resolve checked it, as the run does
        from spark_app.window.history import covered as history_covered

        covered = history_covered(cfg, names)
        if covered.refusal is not None:
            raise ConfigError(covered.refusal)
        shape = replace(shape, notices=(*shape.notices, *covered.notices))
    warmup = shape.warmup
    if warmup is None and not shape.horizon_known:
        warmup = WarmupVerdict(True, f"not checked: the look-back is unknown ({UNKNOWN_LOOKBACK})")
    if warmup is None:
        assert cfg.window is not None
        w = cfg.window
        before = shape.horizon.lookback > w.warmup and history_before(cfg, names, shape.horizon.lookback)
        warmup = check_warmup(w.warmup, shape.horizon, before, w.allow_short_warmup)
    return report(cfg, tag, shape, warmup, sources)


def members_of(cfg: JobConfig, shape: Shape, sources: dict[str, SourceData]) -> list[forecast.Member]:
    from spark_app.contract.alignment import member_id

    return [
        forecast.Member(member_id(cfg, sink, name), sink, name, sources[name].splits, sources[name].limits)
        for sink, names in shape.order.items()
        for name in names
    ]


def undecided(requested: str) -> ModeChoice:
    """A plan without the query plan (driver-only): an explicit mode as set; ``auto`` planned
    as aligned, which it is unless the run proves bounded."""
    return as_set(requested) or ModeChoice(
        "auto", "aligned", "planned as aligned: auto chooses from the query plan at start (plan with Spark to see it)"
    )


def report(
    cfg: JobConfig, tag: str | None, shape: Shape, warmup: WarmupVerdict, sources: dict[str, SourceData]
) -> PlanReport:
    """Assemble the report from what was planned (pure)."""
    a = cfg.alignment
    choice = shape.choice or undecided(a.mode)
    mode = choice.mode
    members = members_of(cfg, shape, sources)
    sim = forecast.simulate(members, mode, a.effective_drift, cfg.round_budget)
    disorder = forecast.out_of_order(sim, members)
    span = timedelta(microseconds=max((max_span(d.splits) for d in sources.values()), default=0))
    verdict = check_lateness(shape.delay, a.effective_drift, span, mode, a.allow_late_drops)
    fitting = forecast.max_drift_fitting(shape.delay, span, mode)
    lookback = shape.horizon.lookback if shape.stateful else timedelta(0)
    # bounded: no state store (its one batch's joins and shuffles are Spark's batch ones)
    peak = 0 if mode == "bounded" else forecast.peak_state(sim, members, shape.delay, lookback, shape.stateful)
    plans = [source_plan(d, cfg, disorder.get(n, 0)) for n, d in sources.items()]
    warnings = list(shape.notices)
    if not warmup.ok:
        warnings.append(f"the run would be refused at start: {warmup.message}")
    if shape.bounded_refusal is not None:
        warnings.append(
            f"the run would be refused at start: alignment.mode bounded: {shape.bounded_refusal}; use aligned"
        )
    if not any(d.splits for d in sources.values()):
        assert cfg.window is not None
        warnings.append(
            f"empty window: no source holds data between {cfg.window.read_start.isoformat()} and "
            f"{cfg.window.read_end.isoformat()}; the backfill would read nothing (check window and the tables)"
        )
    if shape.delay is not None and mode in ("aligned", "strict") and shape.delay < verdict.required:
        warnings.append(forecast.lateness_warning(verdict.required, shape.delay, a.effective_drift, fitting))
    if shape.stateful and shape.delay is None:
        warnings.append(
            "the pipeline keeps state but has no event-time watermark: its state grows with every row read "
            f"(the estimate {peak:,} is every row); add withWatermark to bound it"
        )
    if mode == "unordered" and shape.stateful and sim.batches:
        warnings.append(
            "mode unordered admits the whole window at once: a stateful pipeline holds it all in state "
            f"({peak:,} rows estimated); use mode aligned to bound state"
        )
    if sim.stalled:
        warnings.append(
            f"the simulated admission stops before the end of {', '.join(sim.stalled)}: the run would end "
            "incomplete (a query whose sources all wait on another query's members ends under availableNow)"
        )
    if cfg.read_rate is not None:
        warnings.append(
            "readRate caps how fast splits are admitted: micro-batches are smaller and more than planned, and the "
            "run slower (the plan ignores the cap)"
        )
    horizon = shape.delay + lookback if shape.delay is not None and shape.stateful and shape.horizon_known else None
    return PlanReport(
        backfill=tag,
        state="Planned",
        sources=plans,
        mode=mode,
        mode_reason=choice.reason,
        max_drift_s=a.effective_drift.total_seconds(),
        lateness_required_s=verdict.required.total_seconds(),
        pipeline_lateness_s=None if shape.delay is None else shape.delay.total_seconds(),
        lateness_ok=verdict.ok,
        lateness_message=verdict.message,
        max_drift_fitting_s=None if fitting is None else fitting.total_seconds(),
        expected_batches=forecast.data_batches(sim, members),
        peak_state_rows=peak,
        state_horizon_s=None if horizon is None else horizon.total_seconds(),
        recommended_warmup_s=shape.horizon.lookback.total_seconds() if shape.horizon_known else None,
        rows_total=sum(p.rows for p in plans),
        bytes_total=sum(p.bytes for p in plans),
        warnings=warnings,
        planned_at=datetime.now(UTC),
        drain_s=shape.drain.total_seconds(),
        warmup_ok=warmup.ok,
        warmup_message=warmup.message,
        horizon=shape.horizon.describe() if shape.horizon_known else f"unknown: {UNKNOWN_LOOKBACK}",
        from_query_plan=shape.from_query_plan,
    )
