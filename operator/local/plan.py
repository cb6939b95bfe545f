"""`kappa plan FILE.yaml`: a Backfill's plan before it runs, computed here, in-process, by the
code the plan application runs on a cluster (``spark_app.planning.plan``).

The Backfill's StreamingJob is found as `kappa run` finds it (``--job``, the same file, or a
manifest next to it), ``--local DIR`` maps its catalogs as `kappa run` does, and the backfill
JobConfig is the operator's own rendering (``render.jobconfig.backfill_config``). The report
is printed as tables, or as the PlanReport JSON (``--json``) the operator would copy into
``status.plan``. The ETA is the operator's (it needs this cluster's calibration runs); the plan
gives the rows and bytes it divides."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kappa_operator.local.deps import py_file_paths
from kappa_operator.local.display import Display
from kappa_operator.local.engine import open_source_tables
from kappa_operator.local.manifests import ManifestError, load
from kappa_operator.local.overrides import RunOptions, localize, parse_spark_conf, runtime_config
from kappa_operator.models.backfill import Backfill
from kappa_operator.render.jobconfig import backfill_config
from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration
from spark_app.contract.errors import KappaError
from spark_app.contract.reports.plan import PlanReport


@dataclass(frozen=True)
class PlanOptions:
    """The command line of `kappa plan`, minus the files."""

    local: Path | None = None
    json: bool = False
    spark: bool = True
    """Read the pipeline's delay and horizon from its query plan (a local SparkSession)."""
    master: str = "local[2]"
    spark_conf: dict[str, str] | None = None
    py_files: tuple[Path, ...] = ()
    """The pipeline's code instead of spec.deps.pyFiles and spec.pipelineFrom (kappa run --py-files)."""


def backfill_job_config(manifest: Path, job_file: Path | None, opts: PlanOptions) -> tuple[JobConfig, list[str]]:
    """The backfill JobConfig the operator would render for ``manifest``, as this machine runs
    it, and the lines saying what --local changed."""
    found = load(manifest, job_file)
    bf = found.target
    if not isinstance(bf, Backfill):
        raise ManifestError(
            f"kappa plan plans a Backfill; {manifest} holds {bf.kind} {bf.metadata.name} (`kappa run` runs it)"
        )
    job = found.job
    lines = [f"Backfill {bf.metadata.name} of StreamingJob {job.metadata.name} ({found.job_from})"]
    if opts.local is not None:
        job, rows = localize(job, opts.local)
        (opts.local / "catalogs").mkdir(parents=True, exist_ok=True)  # SQLite creates files, not directories
        lines += [f"--local: spec.{r.field} {r.manifest} -> {r.local}" for r in rows]
    run_opts = RunOptions(
        local=opts.local, master=opts.master, spark_conf=opts.spark_conf or {}, py_files=opts.py_files
    )
    cfg, _ = runtime_config(backfill_config(bf, job, None), run_opts)
    return cfg, lines


def session(cfg: JobConfig) -> Any:
    """A local SparkSession (an existing one is reused), quiet."""
    from spark_app.apps.session import build_session

    spark = build_session(cfg)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def plan_manifest(manifest: Path, job_file: Path | None, opts: PlanOptions, out: Console) -> int:
    """Plan and print; the exit code (0 Planned, 3 Failed, 2 refused before planning)."""
    from spark_app.planning.plan import decide_backfill

    show = Display(out if not opts.json else Console(stderr=True))
    try:
        cfg, lines = backfill_job_config(manifest, job_file, opts)
    except (KappaError, ValueError) as exc:
        show.error(str(exc))
        return 2
    if opts.spark:
        open_source_tables(cfg)
    if opts.json:
        report = decide_backfill(cfg, session(cfg) if opts.spark else None)
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
        return 0 if report.state == "Planned" else 3
    for line in lines:
        show.note(line)
    how = "the pipeline's query plan (local Spark)" if opts.spark else "declarations only (--no-spark)"
    with out.status(escape(f"planning {cfg.name} from Iceberg metadata and {how}")):
        report = decide_backfill(cfg, session(cfg) if opts.spark else None)
    print_plan(out, cfg, report)
    return 0 if report.state == "Planned" else 3


def _d(seconds: float | None, none: str = "-") -> str:
    return none if seconds is None else format_duration(timedelta(seconds=math.ceil(seconds)))  # never understate


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def sources_table(report: PlanReport) -> Table:
    table = Table(title="per source (window + warm-up + drain; from manifests and column statistics)")
    cols = ("source", "table", "files", "bytes", "rows", "in window", "splits", "max span", "out of order", "stats")
    for col in cols:
        table.add_column(col, justify="left" if col in ("source", "table", "stats") else "right")
    for s in report.sources:
        table.add_row(
            s.source,
            s.table,
            str(s.files),
            _bytes(s.bytes),
            f"{s.rows:,}",
            f"{s.rows_in_window:,}",
            str(s.splits),
            _d(s.max_split_span_s),
            _d(s.out_of_order_s),
            "yes" if s.has_statistics else "[red]missing[/]",
        )
    return table


def run_rows(cfg: JobConfig, report: PlanReport) -> list[tuple[str, str]]:
    """The run's predictions as (what, value) lines, verdicts with their fixes."""
    verdict = "[green]pass[/]" if report.lateness_ok else "[red]FAIL: the lateness guard refuses this run[/]"
    pipeline = _d(report.pipeline_lateness_s, "none (no event-time watermark)")
    warmup = cfg.window.warmup if cfg.window is not None else timedelta(0)
    warm = "[green]ok[/]" if report.warmup_ok else "[red]FAIL: refused at start[/]"
    unknown = report.horizon.startswith("unknown")
    if unknown:
        warm = "not checked"
    recommended = f"{_d(report.recommended_warmup_s, 'unknown')} (window.warmup {format_duration(warmup)}: {warm})"
    horizon = f"(watermark delay + look-back: {escape(report.horizon)})" if report.state_horizon_s else ""
    no_horizon = "unknown (the look-back is)" if unknown else "none (stateless, or unbounded)"
    return [
        ("mode", f"{report.mode}, maxDrift {_d(report.max_drift_s)}"),
        ("why this mode", escape(report.mode_reason or "set in the spec (alignment.mode)")),
        ("lateness required", f"{_d(report.lateness_required_s)} (maxDrift + the largest split span)"),
        ("pipeline's lateness", f"{pipeline}: {verdict}"),
        ("guard", escape(report.lateness_message)),
        ("largest maxDrift that fits", _d(report.max_drift_fitting_s, "any (no watermark, or unordered)")),
        ("expected micro-batches", str(report.expected_batches)),
        ("peak state (estimate)", f"{report.peak_state_rows:,} rows"),
        ("state horizon", f"{_d(report.state_horizon_s, no_horizon)} {horizon}"),
        ("recommended warm-up", recommended),
        ("warm-up check", escape(report.warmup_message)),
        ("drain past the end", _d(report.drain_s, "0s")),
        ("read in total", f"{report.rows_total:,} rows, {_bytes(report.bytes_total)}"),
        ("ETA", "from the cluster's calibration (the operator's status.plan); here: rows and bytes above"),
    ]


def print_plan(out: Console, cfg: JobConfig, report: PlanReport) -> None:
    if report.state == "Failed":
        out.print(f"[red]plan failed:[/] {escape(report.error or '')}")
        return
    out.print(sources_table(report))
    table = Table(title=f"the run of {cfg.name} (what its admission and lateness guard will do)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("plan", overflow="fold")
    for what, value in run_rows(cfg, report):
        table.add_row(what, value)
    out.print(table)
    warnings = list(report.warnings) + [f"{s.source}: {w}" for s in report.sources for w in s.warnings]
    for w in warnings:
        out.print(f"[yellow]warning:[/] {escape(w)}")
    if not warnings:
        out.print("[green]no warnings[/]")


def plan_command(args: argparse.Namespace, console: Console) -> int:
    """`kappa plan` (the parser lives in ``kappa_operator.cli.commands``)."""
    try:
        opts = PlanOptions(
            local=args.local,
            json=args.json,
            spark=not args.no_spark,
            master=args.master,
            spark_conf=parse_spark_conf(args.spark_conf),
            py_files=tuple(py_file_paths(args.py_files)),
        )
    except ValueError as exc:
        Display(console).error(str(exc))
        return 2
    return plan_manifest(args.manifest, args.job, opts, console)
