"""The three walkers of `kappa run`: each asks the operator's pure planner what to do, carries
the plan out on this machine and records the status the planner produced, in the order the
operator's handlers do (status before the I/O it announces).

* StreamingJob: ``plan_streaming_job`` (a job paused by a Rewind or suspended is not run), the
  rendered live JobConfig on local Spark, then its checkpoint externalized. Locally every
  committed batch of the run is externalized, where the operator copies the newest one every
  ``spec.checkpoints.interval``: a run of a minute would otherwise leave one restore point.
* Backfill: ``plan_backfill`` -> alignment group declared in an embedded coordinator -> the
  rendered backfill JobConfig run to its end -> the application's end fed back to
  ``plan_backfill`` (Publishing / Succeeded / Failed) -> ``publish_backfill`` -> ``published``.
* Rewind: ``plan_rewind`` phase by phase; Pause is recorded (nothing of the job runs here),
  Restore / ResetSinks are the operator's own I/O (``kappa_operator.rewind``), Resume runs the
  job once from the restored checkpoint, downstream Rewinds are written out as manifests.

Spark is behind :class:`Engine` so the walkers are tested without a JVM.
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import yaml
from rich.console import Console

from kappa_operator import rewind as io
from kappa_operator.checkpoints import layout
from kappa_operator.checkpoints.errors import IncompleteCheckpointError
from kappa_operator.checkpoints.snapshots import apply_retention, externalize, list_snapshots
from kappa_operator.checkpoints.storage import open_location
from kappa_operator.coordinator.groups import EmbeddedGroups
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.local.display import Display
from kappa_operator.local.manifests import Manifests, load
from kappa_operator.local.objects import LocalObjects, R
from kappa_operator.local.overrides import RunOptions, localize, parse_spark_conf, retarget, runtime_config
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.common import as_timedelta, instant
from kappa_operator.models.rewind import PHASES, Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.publish import publish_backfill
from kappa_operator.reconcile.backfill import NONCE, BackfillPlan, alignment_group, plan_backfill, progress_status
from kappa_operator.reconcile.backfill import published as after_publish
from kappa_operator.reconcile.checkpoints import Point, checkpoint_status
from kappa_operator.reconcile.phases import now_rfc3339
from kappa_operator.reconcile.rewind import (
    TERMINAL,
    Observed,
    Pause,
    ResetSinks,
    Restore,
    Resume,
    RewindDownstream,
    after_reset,
    downstream_of,
    paused_by,
    plan_rewind,
    step_failed,
)
from kappa_operator.reconcile.streaming_job import plan_streaming_job
from kappa_operator.render.jobconfig import (
    CHECKPOINT_ANNOTATION,
    PAUSED_ANNOTATION,
    backfill_config,
    backfill_group,
    config_hash,
    live_checkpoint,
    streaming_job_config,
)
from spark_app.config import JobConfig
from spark_app.errors import KappaError
from spark_app.runtime import RunReport, user_message
from spark_app.telemetry import read_trace

log = logging.getLogger("kappa.run")


class Engine(Protocol):
    """Runs a JobConfig to its end: local Spark, or a fake in unit tests."""

    def run(self, cfg: JobConfig) -> RunReport: ...

    def activity(self) -> str | None:
        """One line on the running queries, for the spinner (None: nothing to say)."""
        ...


class SparkEngine:
    """One SparkSession per process (an existing one is reused: tests, a Rewind's resume)."""

    def __init__(self) -> None:
        self.spark: Any = None
        self._rows: dict[tuple[str, int], int] = {}

    def run(self, cfg: JobConfig) -> RunReport:
        from spark_app.runtime import build_session, run

        if self.spark is None:
            self.spark = build_session(cfg)
            self.spark.sparkContext.setLogLevel("ERROR")
        self._rows = {}
        return run(cfg, self.spark)

    def activity(self) -> str | None:
        if self.spark is None:
            return None
        parts = []
        for q in self.spark.streams.active:
            p = q.lastProgress
            if p is None:
                continue
            d = p if isinstance(p, dict) else json.loads(p.json)
            name = str(d.get("name"))
            self._rows[(name, int(d["batchId"]))] = int(d.get("numInputRows", 0))
            rows = sum(n for (q_name, _), n in self._rows.items() if q_name == name)
            wm = (d.get("eventTime") or {}).get("watermark") or "-"
            wm = "-" if wm.startswith("1970-01-01T00:00:00") else wm  # Spark's "no watermark yet"
            parts.append(f"{name}: batch {d['batchId']}, {rows} rows read, watermark {wm}")
        return "; ".join(parts) or None


@dataclass
class Local:
    """One invocation's world."""

    opts: RunOptions
    show: Display
    objects: LocalObjects
    engine: Engine

    def record(self, obj: R, status: dict[str, Any], quiet: bool = False) -> R:
        """Write a status as the operator would patch it, and show the transition."""
        obj = self.objects.patch_status(obj, status)
        if not quiet:
            current = obj.status.model_dump(by_alias=True, exclude_none=True) if obj.status else {}
            self.show.phase(obj.kind, obj.metadata.namespace, obj.metadata.name, current)
        return obj


def application(state: str, message: str, annotations: dict[str, str]) -> dict[str, Any]:
    """What the Spark operator would report of a local run (the planners read this)."""
    return {
        "metadata": {"annotations": annotations},
        "status": {"applicationState": {"state": state, "errorMessage": message}},
    }


def _status(obj: StreamingJob | Backfill | Rewind) -> dict[str, Any]:
    return obj.status.model_dump(by_alias=True, exclude_none=True) if obj.status else {}


# --- StreamingJob ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobRun:
    job: StreamingJob
    state: str
    """COMPLETED or FAILED as an application would end; "" when it was not run."""
    message: str
    report: RunReport | None = None
    snapshot_error: str | None = None
    """Externalizing the checkpoint failed (no new restore points)."""

    @property
    def app(self) -> dict[str, Any] | None:
        return application(self.state, self.message, {}) if self.state else None


def run_job(local: Local, job: StreamingJob) -> JobRun:
    show, opts = local.show, local.opts
    job = local.objects.apply(job)
    plan = plan_streaming_job(job, None, now_rfc3339())
    if plan.create_app is None:  # paused by a Rewind, or suspended: the operator runs nothing
        job = local.record(job, plan.status)
        return JobRun(job, "", str(plan.status.get("message")))
    job = local.record(job, plan.status)
    rendered = streaming_job_config(job)
    digest = config_hash(rendered)
    cfg, notes = runtime_config(rendered, opts)
    show.notes("local run", notes)
    hashed = {"kappa.dev/config-hash": digest}
    running = application("RUNNING", f"running locally from {cfg.checkpoint.location}", hashed)
    job = local.record(job, plan_streaming_job(job, running, now_rfc3339()).status)
    report, state, message = None, "COMPLETED", "ran locally to the end of what was there (availableNow)"
    text = f"{job.metadata.name}: live from {cfg.checkpoint.location}" + (" (Ctrl-C stops)" if opts.follow else "")
    try:
        with show.ticking(text, local.engine.activity):
            report = local.engine.run(cfg)
    except KeyboardInterrupt:
        message = "stopped by Ctrl-C"
    except Exception as exc:  # Spark raises its own types; the operator would see a FAILED application
        log.debug("run of %s failed", cfg.name, exc_info=True)
        state, message = "FAILED", user_message(exc)
    fields: dict[str, Any] = {}
    snapshot_error = None
    if job.spec.checkpoints.external_location:
        try:
            fields = snapshot_job(local, job)
        except KappaError as exc:  # the operator logs it and tries again on its timer
            snapshot_error = str(exc)
            show.error(f"externalizing the checkpoint: {exc}")
    if state == "FAILED":
        _failure_hint(local, message)
    ended = application(state, message, hashed)
    job = local.record(job, {**plan_streaming_job(job, ended, now_rfc3339()).status, **fields})
    if report is not None:
        show.runs(f"{job.metadata.name}: live, locally", [(job.metadata.name, report)])
        latest = [n for n, s in cfg.sources.items() if getattr(s, "starting_position", None) == "latest"]
        if report.input_rows == 0 and latest:
            show.note(
                f"nothing read: {', '.join(latest)} start at startingPosition latest (a new query reads only what "
                "is appended after it starts); --starting-position earliest replays what the tables hold"
            )
    return JobRun(job, state, message, report, snapshot_error)


def _failure_hint(local: Local, message: str) -> None:
    if local.opts.local is not None and "does not exist in catalog" in message:
        where = local.opts.local / "catalogs"
        local.show.note(f"with --local the tables live in the SQLite catalogs under {where}: create them there")


def snapshot_job(local: Local, job: StreamingJob) -> dict[str, Any]:
    """Externalize every committed batch not externalized yet (and recheck the newest), apply
    retention; the status fields the operator records (``reconcile.checkpoints``)."""
    spec = job.spec.checkpoints
    assert spec.external_location is not None
    now = datetime.now(UTC)
    max_age = as_timedelta(spec.retention.max_age) if spec.retention.max_age else None
    points: list[Point] = []
    for sink in job.spec.sinks:
        live = open_location(f"{live_checkpoint(job).rstrip('/')}/{sink}")
        external = open_location(f"{spec.external_location.rstrip('/')}/{sink}")
        listing = live.list_files()
        committed = layout.committed_batches(listing) if layout.METADATA in listing else []
        have = {m.batch_id for m in list_snapshots(external, verify=False)}
        # the newest batch both hold is re-checked (same offsets, or TimelineConflictError), then the new ones
        check = [n for n in committed if n in have][-1:]
        taken = []
        for n in check + [n for n in committed if n > max(have, default=-1)]:
            try:
                if externalize(live, external, batch_id=n, now=now) is not None:  # None: that very batch is there
                    taken.append(n)
            except IncompleteCheckpointError:
                continue  # Spark purged it (beyond minBatchesToRetain)
        if taken:
            local.show.note(f"externalized {sink} batches {_ranges(taken)} to {external.uri}")
        apply_retention(external, spec.retention.count, max_age, now)
        points += [Point(sink, m.batch_id, m.committed_at, m.watermark_ms) for m in list_snapshots(external)]
    fields = checkpoint_status(points, now)
    if fields["checkpoints"]:
        local.show.points(f"{job.metadata.name}: newest restore points (status.checkpoints)", fields["checkpoints"])
    return fields


def _ranges(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else str(ids[0])


# --- Backfill ----------------------------------------------------------------------------------


def run_backfill(local: Local, bf: Backfill, job: StreamingJob) -> int:
    show = local.show
    if local.opts.fresh:
        local.objects.forget(bf)
    bf = local.objects.apply(bf)
    token = secrets.token_urlsafe(16)
    with EmbeddedCoordinator(Service(token)) as coordinator:
        groups = EmbeddedGroups(coordinator.service)

        def act(plan: BackfillPlan, current: Backfill) -> Backfill:
            if plan.join_group is not None:
                groups.join(plan.join_group)  # before the driver reports into it
            if plan.leave_group is not None:
                groups.leave(plan.leave_group.name, current.metadata.name)
            return local.record(current, plan.status)

        plan = plan_backfill(bf, job, None, coordinator.url, now_rfc3339())
        if plan.create_app is None and not plan.publish:
            bf = act(plan, bf)
            return _backfill_done_before(local, bf)
        if plan.create_app is not None:
            bf = act(plan, bf)
            bf, app = _run_backfill(local, bf, job, coordinator.url, token, groups)
            plan = plan_backfill(bf, job, app, coordinator.url, now_rfc3339())
            bf = act(plan, bf)
        if plan.publish:  # Publishing is recorded: a run interrupted here publishes next time
            cfg = backfill_config(bf, job, None)
            with show.ticking(f"validating {cfg.sink_branch(next(iter(cfg.sinks)))} against main and publishing", _no):
                outcome = publish_backfill(bf, cfg)
            bf = act(after_publish(bf, outcome, alignment_group(cfg), now_rfc3339()), bf)
    if bf.status and bf.status.published:
        show.published(list(bf.status.published))
    show.status("Backfill", bf.metadata.name, _status(bf))
    return 0 if bf.status is not None and bf.status.phase == "Succeeded" else 1


def _no() -> str | None:
    return None


def _backfill_done_before(local: Local, bf: Backfill) -> int:
    """The planner kept a finished Backfill as it was (as the operator does)."""
    status = _status(bf)
    phase = status.get("phase")
    where = local.objects.path(bf)
    if phase == "Succeeded":
        local.show.note(f"already Succeeded (recorded in {where}); --fresh runs it again as a new Backfill")
        local.show.status("Backfill", bf.metadata.name, status)
        return 0
    if status.get("conditions") and status["conditions"][-1].get("reason") == "InvalidSpec":
        return 2
    local.show.note(
        f"Failed earlier (recorded in {where}): bump spec.restartNonce to resume it from its checkpoint and branch, "
        "as on the cluster, or run with --fresh for a new Backfill"
    )
    return 1


def _run_backfill(
    local: Local, bf: Backfill, job: StreamingJob, url: str, token: str, groups: EmbeddedGroups
) -> tuple[Backfill, dict[str, Any]]:
    """Run the rendered backfill; the application as it would have ended."""
    show = local.show
    trace = local.objects.root / "traces" / f"backfill-{bf.metadata.name}-{(bf.metadata.uid or 'local')[:8]}.jsonl"
    trace.parent.mkdir(parents=True, exist_ok=True)
    cfg, notes = runtime_config(backfill_config(bf, job, url), local.opts, token=token, trace_path=str(trace))
    show.notes(
        "local run", notes + ([f"alignment through the embedded coordinator at {url}"] if cfg.coordinator else [])
    )
    group, owner = backfill_group(bf), bf.metadata.name
    current = bf

    def tick() -> str | None:
        nonlocal current
        seen = groups.progress(group, owner)
        if seen is None or seen.global_watermark_us is None:
            return local.engine.activity()
        fields = progress_status(current, seen.global_watermark_us, seen.lag_us, datetime.now(UTC))
        current = local.objects.patch_status(current, fields)  # as the operator's follow timer
        return (
            f"{owner}: {fields['progress']} of the window, global watermark {fields['globalWatermark']}, "
            f"lag {fields['alignmentLag'] or '-'}, ETA {fields['eta'] or '-'}"
        )

    state, message, report = "COMPLETED", "", None
    w = bf.spec.window
    try:
        with show.ticking(f"{owner}: backfilling {w.start} .. {w.end} from Iceberg history", tick):
            report = local.engine.run(cfg)
    except KeyboardInterrupt:
        state, message = "FAILED", "interrupted by Ctrl-C"
    except Exception as exc:  # the operator would see a FAILED application with this message
        log.debug("backfill %s failed", cfg.name, exc_info=True)
        state, message = "FAILED", user_message(exc)
        _failure_hint(local, message)
    if report is not None:
        show.runs(f"{owner}: backfill, locally", [(owner, report)])
        decisions = read_trace(trace, "admission") if trace.exists() else []
        throttled = sum(1 for d in decisions if d.get("throttled"))
        show.print(f"{throttled}/{len(decisions)} admission decisions throttled by alignment")
        if report.lateness is not None:
            show.print(f"guard: {report.lateness.message}")
    bf = local.objects.apply(bf)  # with the progress the ticker recorded
    return bf, application(state, message, {NONCE: str(bf.spec.restart_nonce)})


# --- Rewind ------------------------------------------------------------------------------------


def forget_rewind(local: Local, rw: Rewind, job: StreamingJob) -> None:
    """What deleting a Rewind does: its record goes, and a job it left paused is unpaused."""
    job = local.objects.apply(job)
    if job.metadata.annotations.get(PAUSED_ANNOTATION) == paused_by(rw):
        local.objects.annotate(job, {PAUSED_ANNOTATION: None})
        local.show.note(f"{job.metadata.name} unpaused (it was paused by this Rewind)")
    local.objects.forget(rw)


def run_rewind(local: Local, rw: Rewind, job: StreamingJob, others: tuple[StreamingJob, ...]) -> int:
    show, objects = local.show, local.objects
    rw, note = retarget(rw, local.opts)
    if note:
        show.notes("override", [note, "the manifest is unchanged"])
    before = (objects.record(rw) or {}).get("status") or {}
    if local.opts.fresh:
        forget_rewind(local, rw, job)
    elif before.get("phase") == "Failed" and not before.get("restores"):
        show.note("the earlier attempt failed before changing anything: running it again as a new Rewind")
        forget_rewind(local, rw, job)
    rw, job = objects.apply(rw), objects.apply(job)
    if rw.status is not None and rw.status.phase in TERMINAL:
        show.note(f"already {rw.status.phase} (recorded in {objects.path(rw)}); --fresh runs it again as a new Rewind")
        show.status("Rewind", rw.metadata.name, _status(rw))
        return 0 if rw.status.phase == "Succeeded" else 1
    resumed: JobRun | None = None
    for _ in range(2 * len(PHASES)):
        phase = rw.status.phase if rw.status and rw.status.phase else "Pending"
        seen = Observed(
            job=job,
            app=resumed.app if resumed is not None else None,  # nothing of the job runs here until Resume
            chosen=io.choose_points(rw, job) if phase == "Pending" else (),
            downstream=downstream_of(job, list(others)) if phase == "ResettingSinks" and rw.spec.downstream else (),
        )
        plan = plan_rewind(rw, seen, now_rfc3339())
        rw = local.record(rw, plan.status)
        if plan.status.get("phase") in TERMINAL:
            break
        try:
            extra, job, ran = _carry_out(local, rw, job, plan.commands)
        except KappaError as exc:  # permanent: the operator records Failed and stops
            rw = local.record(rw, step_failed(rw, str(plan.status.get("phase")), str(exc), now_rfc3339()).status)
            break
        resumed = ran or resumed
        if plan.next_phase is not None:
            done = f"{plan.status.get('phase')} done"
            rw = local.record(rw, {**extra, "phase": plan.next_phase, "message": done}, quiet=True)
        elif extra:
            rw = local.record(rw, extra, quiet=True)
        elif not plan.commands and rw.status is not None and rw.status.phase == phase:
            break  # waiting on something that will not happen here
    return _rewind_result(local, rw, job, resumed)


def _carry_out(
    local: Local, rw: Rewind, job: StreamingJob, commands: tuple[Any, ...]
) -> tuple[dict[str, Any], StreamingJob, JobRun | None]:
    """The commands of one step, as ``handlers.rewind._carry_out`` does them on a cluster."""
    show, objects = local.show, local.objects
    extra: dict[str, Any] = {}
    ran = None
    for command in commands:
        match command:
            case Pause(by=by):
                job = objects.annotate(job, {PAUSED_ANNOTATION: by})
                show.note(f"{job.metadata.name}: {PAUSED_ANNOTATION}={by} recorded; nothing of it runs here to stop")
            case Restore(restores=restores, location=location):
                io.restore_points(job, restores, location)
                show.note(f"restored {', '.join(f'{r.sink} batch {r.batch_id}' for r in restores)} into {location}")
            case ResetSinks(restores=restores):
                removed = io.reset_sinks(job, restores)
                extra.update(after_reset(rw, removed, extra.get("downstream", [])))
                for sink, (table, files) in removed.items():
                    what = f"{table}: removed {files} data file(s)" if table else "not an Iceberg sink: nothing to undo"
                    show.note(f"reset {sink}: {what} written after the restored batch")
            case RewindDownstream(manifests=manifests):
                extra["downstream"] = [m["metadata"]["name"] for m in manifests]
                for m in manifests:
                    path = objects.root / "created" / f"{m['metadata']['name']}.yaml"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(yaml.safe_dump(m, sort_keys=False))
                    job_name = m["spec"]["jobRef"]["name"]
                    show.note(f"created Rewind {m['metadata']['name']} of {job_name}: kappa run {path} (not run here)")
            case Resume(location=location):
                job = objects.annotate(job, {CHECKPOINT_ANNOTATION: location, PAUSED_ANNOTATION: None})
                show.note(f"{job.metadata.name}: {CHECKPOINT_ANNOTATION}={location}; running it once from there")
                ran = run_job(local, job)
                job = ran.job
    return extra, job, ran


def _rewind_result(local: Local, rw: Rewind, job: StreamingJob, resumed: JobRun | None) -> int:
    show, status = local.show, _status(rw)
    if rw.status is not None and rw.status.restores and rw.status.phase == "Succeeded":
        show.restores(list(rw.status.restores), rw.status.checkpoint_location)
    if status.get("conditions") and status["conditions"][-1].get("reason") == "NoRestorablePoint":
        _restore_hint(local, rw, job)
    show.status("Rewind", rw.metadata.name, status)
    if status.get("phase") != "Succeeded":
        return 1
    if resumed is not None and resumed.state != "COMPLETED":
        show.error(f"the Rewind succeeded but the resumed run of {job.metadata.name} failed: {resumed.message}")
        return 1
    return 0


def _restore_hint(local: Local, rw: Rewind, job: StreamingJob) -> None:
    """Which points there are; and why a target time from production finds none locally."""
    snapshots = [(sink, m) for sink in job.spec.sinks for m in io.snapshots_of(job, sink)]
    if not snapshots:
        return
    points = checkpoint_status(
        [Point(sink, m.batch_id, m.committed_at, m.watermark_ms) for sink, m in snapshots], datetime.now(UTC)
    )["checkpoints"]
    local.show.points(
        f"{job.metadata.name}: newest restorable points in {job.spec.checkpoints.external_location}", points
    )
    target = rw.spec.target.time
    if target is not None and instant(target) <= min(m.committed_at for _, m in snapshots):
        local.show.print(
            f"Snapshots record the wall-clock time Spark committed each batch, and this machine's run committed all of "
            f"them after {target}: a target time from the production timeline precedes them all. Pick a point of "
            "this run with --target-batch N (or --target-time T); the manifest stays as it is."
        )


# --- entry -------------------------------------------------------------------------------------


def run_manifests(found: Manifests, opts: RunOptions, show: Display, engine: Engine) -> int:
    """Run what ``found`` holds; the exit code (0 done, 1 the run failed, 2 refused before running)."""
    target, job, others = found.target, found.job, found.others
    refused = _refuse(target, opts)
    if refused:
        show.error(refused)
        return 2
    if opts.local is not None:
        job, rows = localize(job, opts.local)
        others = tuple(localize(o, opts.local)[0] for o in others)
        show.mapping(str(opts.local), rows)
        (opts.local / "catalogs").mkdir(parents=True, exist_ok=True)  # SQLite creates files, not directories
    else:
        _remote_hints(show, job)
    local = Local(opts, show, LocalObjects(opts.state_dir), engine)
    if not isinstance(target, StreamingJob):
        show.note(f"{target.kind} {target.metadata.name} of StreamingJob {job.metadata.name} ({found.job_from})")
    show.note(f"local records (uid, annotations, status) in {local.objects.root}")
    try:
        if isinstance(target, StreamingJob):
            if opts.fresh:
                local.objects.forget(job)
            ran = run_job(local, job)
            show.status("StreamingJob", job.metadata.name, _status(ran.job))
            return 0 if ran.state == "COMPLETED" and ran.snapshot_error is None else 1
        if isinstance(target, Backfill):
            return run_backfill(local, target, job)
        return run_rewind(local, target, job, others)
    except ValueError as exc:  # an override the models refuse (e.g. --target-time)
        show.error(str(exc))
        return 2
    except KappaError as exc:
        show.error(str(exc))
        return 1


def _refuse(target: StreamingJob | Backfill | Rewind, opts: RunOptions) -> str | None:
    """Flags that do not apply to this kind (refused, not silently ignored), or out of range."""
    if opts.snapshots_per_batch is not None and opts.snapshots_per_batch < 1:
        return f"--snapshots-per-batch must be at least 1, got {opts.snapshots_per_batch}"
    if not isinstance(target, Rewind) and (opts.target_batch is not None or opts.target_time is not None):
        return f"--target-batch / --target-time are for a Rewind; this is a {target.kind}"
    if isinstance(target, Backfill):
        if opts.follow:
            return "--follow is for a StreamingJob (or a Rewind's resume): a Backfill ends by itself"
        if opts.starting_position is not None or opts.snapshots_per_batch is not None:
            return "--starting-position / --snapshots-per-batch shape live sources; a Backfill reads history"
    return None


def _remote_hints(show: Display, job: StreamingJob) -> None:
    locations = [job.spec.checkpoints.location, *(s.path or "" for s in job.spec.sinks.values())]
    if any(loc.startswith("s3a://") for loc in locations):
        show.note(
            "Spark writes s3a:// through hadoop-aws: put it on the classpath (--spark-conf "
            "spark.jars.packages=org.apache.hadoop:hadoop-aws:<hadoop version>) with the AWS environment set, "
            "or run with --local DIR"
        )


def run_command(args: argparse.Namespace, console: Console) -> int:
    """`kappa run` (the parser lives in ``kappa_operator.cli``)."""
    show = Display(console)
    try:
        opts = RunOptions(
            local=args.local,
            state=args.state,
            master=args.master,
            spark_conf=parse_spark_conf(args.spark_conf),
            follow=args.follow,
            starting_position=args.starting_position,
            snapshots_per_batch=args.snapshots_per_batch,
            target_batch=args.target_batch,
            target_time=args.target_time,
            fresh=args.fresh,
        )
        found = load(args.manifest, args.job)
    except (KappaError, ValueError) as exc:
        show.error(str(exc))
        return 2
    return run_manifests(found, opts, show, SparkEngine())
