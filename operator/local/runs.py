"""`kappa run FILE.yaml`: load the manifests, refuse what cannot run on this machine, and hand
each to its walker (``job``, ``backfill``, ``rewind``). Each walker asks the operator's pure
planner what to do, carries the plan out here and records the status the planner produced, in
the order the operator's handlers do (status before the I/O it announces). Spark is behind
``engine.Engine``, so the walkers are tested without a JVM."""

from __future__ import annotations

import argparse

from rich.console import Console

from kappa_operator.local.backfill import run_backfill
from kappa_operator.local.deps import py_file_paths
from kappa_operator.local.display import Display
from kappa_operator.local.engine import Engine, Local, SparkEngine, _status
from kappa_operator.local.job import run_job
from kappa_operator.local.manifests import Manifests, load
from kappa_operator.local.objects import LocalObjects
from kappa_operator.local.overrides import RunOptions, localize, parse_spark_conf
from kappa_operator.local.rewind import run_rewind
from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from spark_app.contract.errors import KappaError


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
    engine.open_tables(job, backfill=isinstance(target, Backfill))
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
    """`kappa run` (the parser lives in ``kappa_operator.cli.commands``)."""
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
            py_files=tuple(py_file_paths(args.py_files)),
            secrets_dir=args.secrets_dir,
        )
        found = load(args.manifest, args.job)
    except (KappaError, ValueError) as exc:
        show.error(str(exc))
        return 2
    return run_manifests(found, opts, show, SparkEngine())
