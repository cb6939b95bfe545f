"""``run_demo``: the product's story end to end on a local catalog, every number from the run.

1. generate impressions and playbacks (4x skew, late events) the way an ingestion job commits;
2. run the ``rmi`` StreamingJob live over the commits into the Iceberg sink (main);
3. inject an outage into main's output (missing, then corrupt rows) and keep the clean replay
   (main's snapshot before it);
4. backfill the window aligned through the embedded coordinator into ``backfill-rmi-outage``,
   and the same window unordered (for the state it would need);
5. validate the branch against the clean replay, publish it into main, check main is whole;
6. rewind the stateful ``sessions`` job to before the outage (rewind.py);
7. backfill the ``windows`` and ``sessions`` examples over a window in the middle of the
   history (warm-up before it, drain after it) and compare each with batch (shapes.py);
8. plot, write summary.json, print the table, and fail loudly when a promise did not hold.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession
from rich.console import Console

from kappa_operator.coordinator.core import Accepted
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service, now_us
from kappa_operator.demo import plots, shapes
from kappa_operator.demo.jobs import RMI_KEY, RMI_TABLE, WARMUP, DemoSettings, rmi_backfill, rmi_live, write_log_config
from kappa_operator.demo.outage import all_rows, compare_tables, head, inject_outage
from kappa_operator.demo.report import evaluate, print_report
from kappa_operator.demo.rewind import run_rewind
from kappa_operator.demo.steps import DemoError, Poll, Steps, batches_poll, plural, quiet
from kappa_operator.reconcile.backfill.intent import alignment_group
from spark_app.apps.run import run
from spark_app.apps.session import build_session
from spark_app.catalogs import load_table
from spark_app.contract.config import JobConfig
from spark_app.contract.durations import format_duration
from spark_app.contract.trace import read_trace
from spark_app.examples import rmi
from spark_app.examples.generator import generate
from spark_app.sinks.iceberg.publish import branch_head, publish
from spark_app.sinks.iceberg.validation import Comparison, compare_snapshots
from spark_app.sinks.iceberg.window import TimeWindow

BACKFILL = "rmi-outage"
UNORDERED = "rmi-unordered"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _publish_quietly(*args: Any, **kwargs: Any) -> Any:
    """Publish without its opt-out warning: the demo's validate step already says why."""
    with quiet("kappa.publish"):
        return publish(*args, **kwargs)


def _cmp(c: Comparison) -> dict[str, Any]:
    return {
        "reference_rows": c.main_rows,
        "rows": c.branch_rows,
        "matched": c.matched,
        "match_ratio": round(c.match_ratio, 6),
    }


def _batches(cfg: JobConfig, expected: int | None) -> Poll:
    return batches_poll(Path(cfg.checkpoint.location) / rmi.OUTPUT, expected)


def _commit_rows(cfg: JobConfig) -> int:
    """Rows the sink committed, from its trace (what it wrote, replays excluded)."""
    return sum(e.get("rows", 0) for e in read_trace(cfg.trace_path or "", "commit") if not e.get("skipped"))


def _shapes_window(s: DemoSettings) -> dict[str, Any]:
    start, end = shapes.window(s)
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "hours": round((end - start).total_seconds() / 3600, 4),
        "warmup": format_duration(shapes.LOOK_BACK),
        "drain": format_duration(shapes.DRAIN),
        "lateness": format_duration(shapes.LATENESS),
        "look_ahead": format_duration(shapes.LOOK_BACK),
        "max_drift": shapes.MAX_DRIFT,
    }


MARKER = ".kappa-demo"
"""Written first into the directory the demo works in: what lets a later demo recreate it."""


def out_refusal(out: Path) -> str | None:
    """Why the demo may not work in ``out`` (None: it may). It deletes only a directory it
    made itself (it holds the marker): `--out ~` must never cost anyone their home."""
    if not out.exists():
        return None
    if not out.is_dir():
        return f"--out {out} is a file; name a directory (it is created)"
    if (out / MARKER).is_file() or not any(out.iterdir()):
        return None
    return (
        f"--out {out} is not empty and is not a previous demo's output (no {MARKER} in it); the demo recreates its "
        "directory, so name a new or empty one"
    )


def prepare_out(out: Path) -> None:
    if refusal := out_refusal(out):
        raise DemoError(refusal)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("made by `kappa demo`; a later demo with this --out deletes and recreates it\n")


def run_demo(s: DemoSettings, console: Console, spark: SparkSession | None = None) -> dict[str, Any]:
    """Run the whole story into ``s.out`` (recreated); returns the summary (also summary.json).
    Raises DemoError naming the failed step, or listing the checks that did not hold.

    ``spark``: an existing session to use (tests share theirs); by default a local one."""
    started = time.monotonic()
    prepare_out(s.out)
    write_log_config(s)
    catalog = SqlCatalog("default", **s.catalog_props)
    w_start, w_end = s.window
    window = TimeWindow(rmi.TIME_COLUMN, w_start, w_end)
    session: list[SparkSession] = []

    def stop_queries() -> None:
        for q in session[0].streams.active if session else []:
            q.stop()

    steps = Steps(console, stop_queries)
    gen = s.generator()
    written = [0, 1]
    stats = steps.run(
        f"generate {s.hours:g} h of data",
        lambda: generate(catalog, gen, progress=lambda d, t: written.__setitem__(slice(None), [d, t])),
        lambda: (written[0], written[1], f"{written[0]}/{written[1]} commits"),
        lambda st: f"{st.impressions} impressions, {st.playbacks} plays, {st.commits} commits",
    )
    live_cfg = rmi_live(s)
    if spark is None:
        spark = steps.run("start Spark local[2]", lambda: build_session(live_cfg))
        spark.sparkContext.setLogLevel("ERROR")
    session.append(spark)
    live = steps.run(
        "rmi live",
        lambda: run(live_cfg, spark),
        _batches(live_cfg, stats.commits),
        lambda r: f"a commit per batch, {plural(r.batches, 'batch')} into {RMI_TABLE}",
    )
    props = live_cfg.catalogs["default"].properties()
    load = partial(load_table, "default", props, RMI_TABLE)
    compare_refs = partial(compare_snapshots, spark, catalog_properties=props, window=window, key=RMI_KEY)
    outage = steps.run(
        f"outage {w_start:%H:%M}-{w_end:%H:%M}",
        lambda: inject_outage(load, window),
        detail=lambda o: f"{o.missing} rows missing, then {o.corrupted} corrupt in main",
    )

    token = secrets.token_urlsafe(16)
    with EmbeddedCoordinator(Service(token)) as coordinator:
        bf_cfg = rmi_backfill(
            s,
            BACKFILL,
            {"mode": "aligned", "maxDrift": s.max_drift},
            coordinator={"url": coordinator.url, "token": token},
        )
        group = alignment_group(bf_cfg)
        assert group is not None, "an aligned backfill has members"
        coordinator.service.core.declare(group, now_us())
        read_from = w_start - WARMUP

        def progress() -> tuple[float, float | None, str]:
            answer = coordinator.service.core.view(group.name, now_us())
            if answer.finished or answer.global_watermark is None:
                return 100, 100, "all sources finished"
            if answer.held:
                return 0, 100, "waiting for every source"
            at = EPOCH + timedelta(microseconds=answer.global_watermark)
            ratio = (at - read_from) / (w_end - read_from)
            return round(min(max(ratio, 0.0), 1.0) * 100), 100, f"global watermark {at:%H:%M}"

        aligned = steps.run(
            "backfill, aligned",
            lambda: run(bf_cfg, spark),
            progress,
            lambda r: f"{plural(r.batches, 'batch')} into backfill-{BACKFILL}",
        )
        history: tuple[Accepted, ...] = coordinator.service.core.history(group.name)
    un_cfg = rmi_backfill(s, UNORDERED, {"mode": "unordered", "maxDrift": s.max_drift})
    unaligned = steps.run(
        "backfill, unordered",
        lambda: run(un_cfg, spark),
        _batches(un_cfg, None),
        lambda r: f"{plural(r.batches, 'batch')} into backfill-{UNORDERED}",
    )

    def validate() -> tuple[Comparison, Comparison, Comparison]:
        table = load()
        branch = branch_head(table, bf_cfg.sink_branch(rmi.OUTPUT), window)
        unordered = branch_head(table, un_cfg.sink_branch(rmi.OUTPUT), window)
        return (
            compare_refs(table, reference=head(table), candidate=branch),
            compare_refs(table, reference=outage.clean_snapshot, candidate=branch),
            compare_refs(table, reference=outage.clean_snapshot, candidate=unordered),
        )

    before, validation, unordered_cmp = steps.run(
        "validate against the clean replay",
        validate,
        detail=lambda r: f"match {r[1].match_ratio:.4f}",
    )
    if validation.match_ratio < 1.0:
        raise DemoError(
            f"validation: backfill-{BACKFILL} matches the live output of the window at {validation.match_ratio:.4f} "
            f"({validation.only_main} rows only in the clean replay, {validation.only_branch} only in the branch); "
            "nothing was published"
        )
    published = steps.run(
        "publish into main",
        # Main's window is the outage's (known wrong), so the gate against main cannot pass: the
        # branch was validated against the clean replay above instead, hence the explicit 0.0.
        partial(
            _publish_quietly,
            spark,
            load,
            props,
            bf_cfg.sink_branch(rmi.OUTPUT),
            window,
            key=RMI_KEY,
            min_match_ratio=0.0,
            properties={"kappa.backfill": f"demo/{BACKFILL}"},
        ),
        detail=lambda p: f"-{p.rows_removed} +{p.rows_added} rows, one snapshot",
    )

    def after_publish() -> tuple[Comparison, Comparison]:
        table = load()
        whole = compare_tables(all_rows(table, outage.clean_snapshot), all_rows(table, head(table)), RMI_KEY)
        return compare_refs(table, reference=outage.clean_snapshot, candidate=head(table)), whole

    repaired, whole = steps.run(
        "main vs the clean replay",
        after_publish,
        detail=lambda r: f"match {r[0].match_ratio:.4f} (window), {r[1].match_ratio:.4f} (all)",
    )
    rewind = run_rewind(s, steps, spark)
    shape_runs = shapes.run_shapes(s, steps, spark)
    decisions = read_trace(bf_cfg.trace_path or "", "admission")
    runs = {"live": live, "aligned": aligned, "unaligned": unaligned}
    paths = steps.run(
        "plots",
        lambda: plots.write(s.out, history, s.window, bf_cfg.alignment.effective_drift, runs),
        detail=lambda p: ", ".join(path.name for path in p.values()),
    )

    window_hours = (w_end - w_start).total_seconds() / 3600
    summary: dict[str, Any] = {
        "settings": {"hours": s.hours, "seed": s.seed, "max_drift": s.max_drift, "out": str(s.out)},
        "data": {
            "impressions": stats.impressions,
            "playbacks": stats.playbacks,
            "commits": stats.commits,
            "late_events": stats.late_events,
            "max_file_span_s": round(stats.max_file_span_s, 1),
        },
        "window": {
            "start": w_start.isoformat(),
            "end": w_end.isoformat(),
            "warmup": f"{WARMUP // timedelta(minutes=1)}m",
            "hours": window_hours,
        },
        "live": {**live.summary(), "output_rows": _commit_rows(live_cfg), "main_rows": outage.clean_rows},
        "outage": {
            "clean_snapshot": outage.clean_snapshot,
            "clean_rows_in_window": outage.clean_rows,
            "down_until": outage.down_until.isoformat(),
            "missing_rows": outage.missing,
            "corrupted_rows": outage.corrupted,
            "main_vs_backfill_before_publish": _cmp(before),
        },
        "backfill": {
            **aligned.summary(),
            "branch": bf_cfg.sink_branch(rmi.OUTPUT),
            "output_rows": _commit_rows(bf_cfg),
            "event_hours_per_wall_hour": round(window_hours / (aligned.seconds / 3600), 1),
            "admission_decisions": len(decisions),
            "throttled_decisions": sum(1 for d in decisions if d["throttled"]),
            "coordinator_reports": len(history),
            "vs_clean_replay": _cmp(validation),
        },
        "unaligned": {
            **unaligned.summary(),
            "branch": un_cfg.sink_branch(rmi.OUTPUT),
            "output_rows": _commit_rows(un_cfg),
            "event_hours_per_wall_hour": round(window_hours / (unaligned.seconds / 3600), 1),
            "vs_clean_replay": _cmp(unordered_cmp),
        },
        "publish": {
            "rows_removed": published.rows_removed,
            "rows_added": published.rows_added,
            "files_removed": published.files_removed,
            "files_added": published.files_added,
            "files_rewritten": published.files_rewritten,
            "snapshot_id": published.snapshot_id,
            "main_vs_clean_replay_window": _cmp(repaired),
            "main_vs_clean_replay_table": _cmp(whole),
        },
        "rewind": rewind.summary(),
        "shapes": {"window": _shapes_window(s), **{k: r.summary() for k, r in shape_runs.items()}},
        "plots": {k: str(p) for k, p in paths.items()},
        "step_seconds": {k: round(v, 2) for k, v in steps.seconds.items()},
    }
    summary["checks"] = [c._asdict() for c in evaluate(summary)]
    summary["wall_seconds"] = round(time.monotonic() - started, 1)
    (s.out / "summary.json").write_text(json.dumps(summary, indent=2))
    print_report(console, summary)
    failed = [c for c in summary["checks"] if not c["ok"]]
    if failed:
        raise DemoError("; ".join(f"{c['name']}: {c['detail']}" for c in failed))
    return summary
