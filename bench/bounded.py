"""A bounded backfill (``alignment.mode: bounded``: the job's own pipeline over batch reads,
one Spark batch query per sink; by default as ``auto``, the default mode, chooses it, its
proof timed with the run) against the batch job a user would write instead, measured
in the same run on the same data:
- ``spark_batch``: ``spark.read.parquet`` of the tables' data files, the same rmi logic, to
  plain Parquet (Spark's default codec, snappy);
- ``spark_batch_same_layout``: the same, written partitioned by the hour of ``playback_ts``, as
  the sink's table is (what a batch job writing into that table pays too);
- ``spark_batch_same_layout_and_codec``: that, compressed as the sink's table asks (Iceberg's
  default, zstd): the files a batch job writing into the table writes;
- ``spark_batch_no_write``: the same query into Spark's ``noop`` sink, nothing written: the
  other runs' time beyond it (``write_seconds``) is what their files cost.

The bounded run writes into the exactly-once Iceberg sink (its branch, one commit), as a
Backfill does; its rows are compared with the batch job's in both directions (``match`` 1.0:
no row differs).

After an untimed warm-up over the whole window (the first query of this size in a JVM is
4-5 s slower than the next: JIT), each of the four runs ``--repeats`` times, each round in
another order (the first run of a round first in the next one's last place), and each is taken
at its median: no run gets another's warm JVM, nor always the heap another left.

rows/s = input rows of both sources / wall seconds. Run from the repository root::

    .venv/bin/python -m bench.bounded --profile dense --driver-memory 12g --json
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import Any

from pyiceberg.table import TableProperties

from bench.backfill import OUTPUT, PROFILES, TABLES, config, iceberg_sink, measure_bounded, rmi_history
from bench.source_throughput import (
    batch_frame,
    chosen_profile,
    machine,
    measured_parser,
    run_measured,
)

log = logging.getLogger("bench.bounded")
SINK_CODEC = TableProperties.PARQUET_COMPRESSION_DEFAULT
"""What the sink's Iceberg table is written with (its ``write.parquet.compression-codec``, unset
here: Iceberg's default); Spark's own default, which ``spark_batch`` writes, is snappy."""
KEY = ["playback_id", "impression_id"]


def bench(args: argparse.Namespace) -> dict[str, Any]:

    from spark_app.apps.session import build_session
    from spark_app.examples import rmi

    name, profile, out = chosen_profile(args, PROFILES)
    runs = out / "runs"
    props, _, gen_seconds, start, end, window = rmi_history(out, profile)
    session = config(props, runs / "session", "session", "live", {"kind": "console"}, driver_memory=args.driver_memory)
    spark = build_session(session)
    spark.sparkContext.setLogLevel("WARN")

    from pyspark.sql import functions as F

    from spark_app.sinks.iceberg.write_conf import SESSION_CONF

    for key, value in SESSION_CONF.items():  # the sink's settings, for every run alike
        spark.conf.set(key, value)

    def spark_batch(
        run: str, same_layout: bool = False, codec: str | None = None, write: bool = True
    ) -> dict[str, Any]:
        t0 = time.monotonic()
        frames = {t: batch_frame(spark, props, t, (start, end)) for t in TABLES}
        output = rmi.pipeline(frames)[OUTPUT]
        if same_layout:
            hour = F.floor(F.unix_micros("playback_ts") / 3_600_000_000)
            writer = output.withColumn("playback_ts_hour", hour).write.partitionBy("playback_ts_hour")
        else:
            writer = output.write
        if codec is not None:
            writer = writer.option("compression", codec)
        if write:
            writer.parquet(str(runs / run))
        else:  # the query alone: what is left of each run once its files are not counted
            output.write.format("noop").mode("overwrite").save()
        seconds = time.monotonic() - t0
        rows = sum(batch_frame(spark, props, t, (start, end)).count() for t in TABLES)
        return {"input_rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1)}

    # untimed warm-up over the whole window: the JVM, the Python workers, the join's code paths
    rmi.pipeline({t: batch_frame(spark, props, t, (start, end)) for t in TABLES})[OUTPUT].write.format("noop").mode(
        "overwrite"
    ).save()
    plain: list[dict[str, Any]] = []
    laid_out: list[dict[str, Any]] = []
    as_sink: list[dict[str, Any]] = []
    bounded_runs: list[dict[str, Any]] = []
    unwritten: list[dict[str, Any]] = []

    def bounded_config(turn: int) -> Any:
        alignment = {"mode": args.mode, "stateDir": str(runs / f"bounded_{turn}")}
        name = f"bench-bounded-{turn}"
        return config(props, runs / f"bounded_{turn}", name, "backfill", iceberg_sink(), window, alignment)

    def bounded_run(turn: int) -> dict[str, Any]:
        return measure_bounded(spark, bounded_config(turn))

    kinds: list[tuple[str, list[dict[str, Any]], Callable[[int], dict[str, Any]]]] = [
        ("spark batch", plain, lambda turn: spark_batch(f"spark_batch_{turn}")),
        ("the same to the sink's layout", laid_out, lambda turn: spark_batch(f"spark_batch_same_layout_{turn}", True)),
        (
            "the same to the sink's layout and codec",
            as_sink,
            lambda turn: spark_batch(f"as_sink_{turn}", True, SINK_CODEC),
        ),
        ("bounded", bounded_runs, bounded_run),
        ("the same query, nothing written", unwritten, lambda turn: spark_batch(f"no_write_{turn}", write=False)),
    ]
    for turn in range(args.repeats):
        # each round in another order: no run always follows the same one (its garbage, its files)
        order = kinds[turn % len(kinds) :] + kinds[: turn % len(kinds)]
        log.info("round %d: %s", turn + 1, ", ".join(name for name, _, _ in order))
        for _, runs_of_kind, measured in order:
            runs_of_kind.append(measured(turn))
    bounded_cfg = bounded_config(args.repeats - 1)
    batch, same_layout, same_table = median_run(plain), median_run(laid_out), median_run(as_sink)
    bounded, query = median_run(bounded_runs), median_run(unwritten)

    from pyiceberg.catalog.sql import SqlCatalog

    table = SqlCatalog("default", **props).load_table("bench.attributed_plays")
    branch = table.refs()[bounded_cfg.sink_branch(OUTPUT)].snapshot_id
    written = spark.createDataFrame(table.scan(snapshot_id=branch).to_arrow().select(KEY).to_pandas())
    expected = spark.read.parquet(str(runs / "spark_batch_0")).select(*KEY)
    only_batch = expected.exceptAll(written).count()
    only_bounded = written.exceptAll(expected).count()
    total = expected.count()
    spark.stop()
    return {
        "bench": "bounded",
        "profile": name,
        "machine": machine(),
        "rows": bounded["input_rows"],
        "output_rows": total,
        "spark_batch": {**batch, "runs_s": [r["seconds"] for r in plain]},
        "spark_batch_same_layout": {**same_layout, "runs_s": [r["seconds"] for r in laid_out]},
        "spark_batch_same_layout_and_codec": {
            **same_table, "codec": SINK_CODEC, "runs_s": [r["seconds"] for r in as_sink]
        },
        "spark_batch_no_write": {**query, "runs_s": [r["seconds"] for r in unwritten]},
        "bounded": {**bounded, "runs_s": [r["seconds"] for r in bounded_runs]},
        "match": round(1 - (only_batch + only_bounded) / max(total, 1), 6),
        "rows_only_in_spark_batch": only_batch,
        "rows_only_in_bounded": only_bounded,
        "event_hours_per_wall_hour": round((end - start).total_seconds() / bounded["seconds"], 1),
        "ratios": {
            "bounded_vs_spark_batch": round(bounded["rows_per_s"] / batch["rows_per_s"], 3),
            "bounded_vs_spark_batch_same_layout": round(bounded["rows_per_s"] / same_layout["rows_per_s"], 3),
            "bounded_vs_spark_batch_same_layout_and_codec": round(bounded["rows_per_s"] / same_table["rows_per_s"], 3),
            # the most any job writing the table's hour layout with Spark's file writer reaches
            "same_layout_vs_spark_batch": round(same_layout["rows_per_s"] / batch["rows_per_s"], 3),
        },
        "write_seconds": {  # beyond the query's own (the noop run): what each one's files cost
            "plain": round(batch["seconds"] - query["seconds"], 3),
            "same_layout": round(same_layout["seconds"] - query["seconds"], 3),
            "bounded": round(bounded["seconds"] - query["seconds"], 3),
        },
        "params": {"hours": profile["hours"], "impressions_per_hour": profile["impressions_per_hour"],
                   "window": window, "generate_seconds": round(gen_seconds, 1)},
    }  # fmt: skip


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run at the median time (the lower middle of an even count): one whole run's figures."""
    return sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]


def main(argv: list[str] | None = None) -> int:
    p = measured_parser(__doc__)
    p.add_argument("--quick", action="store_true", help="2 h at 20k impressions/h")
    p.add_argument("--hours", type=float, help="override the profile's hours of data")
    p.add_argument("--profile", choices=sorted(PROFILES), default="dense")
    p.add_argument("--repeats", type=int, default=3, help="runs of each, taken at the median (default 3)")
    p.add_argument("--driver-memory", help="the local JVM's memory, e.g. 12g (dense needs more than the default)")
    p.add_argument(
        "--mode", choices=["auto", "bounded"], default="auto",
        help="auto (the default mode: it must choose bounded here, and its proof is timed with the run) or bounded",
    )  # fmt: skip
    return run_measured(p.parse_args(argv), bench, "kappa-bench-bounded-")


if __name__ == "__main__":
    raise SystemExit(main())
