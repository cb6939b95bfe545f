"""Soak: does a live job's cost per micro-batch stay flat as its tables' histories grow?

A writer thread ingests into the upstream tables (one snapshot per table every
``commit_interval`` of generated ingestion time, a few commits ahead of the reader) while the
live rmi job reads them snapshot by snapshot (``maxSnapshots: 1``) and commits one snapshot
per micro-batch into its Iceberg sink, for ``--batches`` batches. Both sides expire history
as a long-running deployment does: the sink by its ``history`` policy (on the driver), the
upstream writer with the same ``history.expire``. Reports the sink's median commit and the
median trigger time of the first and of the last 100 batches (issue 15, item 5: both ratios
<= 1.2).

Run from the repository root (about 40 minutes on 2 cores)::

    .venv/bin/python -m bench.soak --batches 2000 --json
    .venv/bin/python -m bench.backfill --profile soak --json     # the same
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/soak.py`: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.source_throughput import MASTER, SPARK_CONF, T0, events_listener, machine, run_measured

log = logging.getLogger("bench.soak")

BATCHES = 2000
LEAD = 3
"""Commits the writer may be ahead of the reader: each batch finds about one new snapshot."""
COMMIT_INTERVAL = timedelta(seconds=10)
IMPRESSIONS_PER_HOUR = 60_000
KEEP_LAST = 20
"""Snapshots the sink keeps in the soak (``--keep-last``); ``minAge`` 0 so the count bounds it
within the run. A pyiceberg commit deep-copies the table's metadata a dozen times, so the
level it stays flat at is set by this count (0.5-1.1 ms more per snapshot kept, measured)."""
TABLE = "bench.soak_plays"


def by_100(values: list[float]) -> list[float]:
    """Median of each run of 100, in ms: flat or not at a glance."""
    return [round(statistics.median(values[i : i + 100]) * 1000, 1) for i in range(0, len(values) - 99, 100)]


def medians(values: list[float]) -> dict[str, float | None]:
    if len(values) < 200:
        return {"first100": None, "last100": None, "ratio": None}
    first, last = statistics.median(values[:100]), statistics.median(values[-100:])
    return {"first100": round(first, 4), "last100": round(last, 4), "ratio": round(last / first, 3)}


class Writer(threading.Thread):
    """The upstream ingestion, paced by the reader, expiring its own history as it goes."""

    def __init__(self, props: dict[str, str], gen: Any, batches_done: Any, keep: int) -> None:
        super().__init__(daemon=True)
        self.props, self.gen, self.batches_done, self.keep = props, gen, batches_done, keep
        self.commits, self.expire_s, self.stop_at = 0, [], False
        self.error: BaseException | None = None

    def run(self) -> None:
        from pyiceberg.catalog.sql import SqlCatalog

        from spark_app.examples.generator import iter_commits, write_commit
        from spark_app.sinks.iceberg.history import expire

        try:
            catalog = SqlCatalog("default", **self.props)
            imp, play = (catalog.load_table(t) for t in (self.gen.impressions_table, self.gen.playbacks_table))
            # maintained like the sink's own table: manifests merged as they accumulate
            imp, play = (
                t.transaction().set_properties({"commit.manifest-merge.enabled": "true"}).commit_transaction()
                for t in (imp, play)
            )
            for commit in iter_commits(self.gen):
                while not self.stop_at and self.commits - self.batches_done() >= LEAD:
                    time.sleep(0.02)
                if self.stop_at:
                    return
                write_commit(imp, play, commit)
                self.commits += 1
                if self.commits % 20 == 0:
                    t0 = time.monotonic()
                    for t in (imp, play):
                        expire(lambda t=t: catalog.load_table(t.name()), self.keep, timedelta(0))
                    imp, play = (catalog.load_table(t.name()) for t in (imp, play))
                    self.expire_s.append(time.monotonic() - t0)
        except BaseException as exc:  # reported by the bench, not lost in a thread
            self.error = exc


def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pyiceberg.catalog.sql import SqlCatalog

    from spark_app.apps.run import run
    from spark_app.apps.session import build_session
    from spark_app.contract.config import parse_config
    from spark_app.contract.trace import read_trace
    from spark_app.examples.generator import GeneratorConfig, create_tables

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    history = {"keepLast": args.keep_last, "minAge": "0s", "expireEvery": 20}
    props = {"uri": f"sqlite:///{out}/catalog.db", "warehouse": f"file://{out}/warehouse"}
    hours = (args.batches + 2 * LEAD + 50) * COMMIT_INTERVAL.total_seconds() / 3600
    gen = GeneratorConfig(
        start=T0, hours=hours, impressions_per_hour=IMPRESSIONS_PER_HOUR, commit_interval=COMMIT_INTERVAL
    )
    create_tables(SqlCatalog("default", **props), gen)
    source = {"kind": "icebergLive", "startingPosition": "earliest", "readLimit": {"maxSnapshots": 1}}
    cfg = parse_config(
        {
            "name": "soak",
            "pipeline": "spark_app.examples.rmi:pipeline",
            "mode": "live",
            "master": MASTER,
            "sparkConf": {
                **{k: v for k, v in SPARK_CONF.items() if k != "spark.sql.shuffle.partitions"},
                **({"spark.driver.memory": args.driver_memory} if args.driver_memory else {}),
            },
            "catalogs": {"default": {"type": "sql", **props}},
            "sources": {t: {**source, "table": f"demo.{t}"} for t in ("impressions", "playbacks")},
            "sinks": {
                "attributed_plays": {
                    "kind": "iceberg",
                    "table": TABLE,
                    "timeColumn": "playback_ts",
                    "partitionBy": ["hour(playback_ts)"],
                    "history": history,
                    # compaction at the sink's defaults
                }
            },
            "checkpoint": {"location": str(out / "ckpt")},
            "trigger": {"kind": "processingTime", "interval": "0s"},
            "tracePath": str(out / "trace.jsonl"),
        }
    )
    spark = build_session(cfg)
    spark.sparkContext.setLogLevel("WARN")
    events = events_listener()
    spark.streams.addListener(events)

    def batches_done() -> int:
        with events.lock:
            return sum(1 for p in events.progress if p["numInputRows"] > 0)

    writer = Writer(props, gen, batches_done, 100)

    def stop_when_done() -> None:
        while batches_done() < args.batches and writer.error is None and (writer.is_alive() or not writer.commits):
            time.sleep(0.5)
        writer.stop_at = True
        for q in spark.streams.active:
            q.stop()

    started = time.monotonic()
    writer.start()
    stopper = threading.Thread(target=stop_when_done, daemon=True)
    stopper.start()
    run(cfg, spark)
    wall = time.monotonic() - started
    if writer.error is not None:
        raise RuntimeError(f"upstream writer failed: {writer.error!r}") from writer.error
    progress = [p for p in events.complete() if p["numInputRows"] > 0]
    spark.streams.removeListener(events)
    spark.stop()

    commits = [e for e in read_trace(cfg.trace_path) if e["event"] == "commit" and e.get("files")]
    commit_s = [e["commit_s"] for e in commits]
    batch_s = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    expire_s = [e["expire_s"] for e in commits if "expire_s" in e]
    catalog = SqlCatalog("default", **props)
    c, b = medians(commit_s), medians(batch_s)
    return {
        "bench": "soak",
        "profile": "soak",
        "batches": len(progress),
        "sink_commits": len(commits),
        "seconds": round(wall, 1),
        "commit_s_first100": c["first100"],
        "commit_s_last100": c["last100"],
        "commit_s_last100_vs_first100": c["ratio"],
        "batch_s_first100": b["first100"],
        "batch_s_last100": b["last100"],
        "batch_s_last100_vs_first100": b["ratio"],
        "commit_ms_by_100": by_100(commit_s),
        "batch_ms_by_100": by_100(batch_s),
        "sink_expire_s_median": round(statistics.median(expire_s), 4) if expire_s else None,
        "sink_expiries": len(expire_s),
        "sink_compactions": [
            {"batch": e["batch"], "files": e["compacted_files"], "into": e["compacted_into"], "s": e["compact_s"]}
            for e in read_trace(cfg.trace_path)
            if e["event"] == "compact" and e.get("compacted_files")
        ],
        "sink_live_files": len(list(catalog.load_table(TABLE).scan().plan_files())),
        "snapshots_kept": {
            "sink": len(catalog.load_table(TABLE).snapshots()),
            "impressions": len(catalog.load_table(gen.impressions_table).snapshots()),
            "playbacks": len(catalog.load_table(gen.playbacks_table).snapshots()),
        },
        "snapshots_written": {"sink": len(commits), "upstream_commits": writer.commits},
        "input_rows": sum(p["numInputRows"] for p in progress),
        "output_rows": sum(e.get("rows", 0) for e in commits),
        "machine": machine(),
        "config": {
            "history": history,
            "upstream_keep_last": 100,
            "commit_interval_s": COMMIT_INTERVAL.total_seconds(),
            "impressions_per_hour": IMPRESSIONS_PER_HOUR,
            "lead": LEAD,
            "driver_memory": args.driver_memory,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batches", type=int, default=BATCHES, help="live micro-batches with data (default 2000)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", help="directory for the tables and checkpoint (default: a temp dir, removed at the end)")
    p.add_argument("--driver-memory", help="the local JVM's memory, e.g. 4g")
    p.add_argument("--keep-last", type=int, default=KEEP_LAST, help="history.keepLast of the sink (default 20)")
    args = p.parse_args(argv)
    return run_measured(args, bench, "kappa-bench-soak-")


if __name__ == "__main__":
    sys.exit(main())
