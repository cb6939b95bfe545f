"""Issue 64 on the rmi example's own sources, with real Spark and real Iceberg tables: rmi v1
reads its two tables' appends (``icebergLive``, each table its own history), appends go on
arriving, and v2 (a new column, a narrower attribution window) is upgraded blue/green. Every
config is the one the operator renders; each driver runs as ``kappa run`` runs it, in the order
the operator's steps give them:

blue runs -> green reads each table pinned at the snapshot blue read whole, then its appends,
never past blue -> compare -> more appends, blue runs on and stops -> green drains to where
blue stopped -> switch -> more appends, the promoted job runs on green's checkpoint.

With green's driver killed during its catch-up and the switch's driver killed once it recorded
B. Then main holds each attribution once: v1's before the boundary, v2's from it on, none of
the input missing, compared with v1 and v2 each run over every append (the oracles)."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyspark.sql import SparkSession

from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.blue_green import green_config
from kappa_operator.render.jobconfig import streaming_job_config
from spark_app.apps.blue_green import FAULT_ENV as SWITCH_FAULT
from spark_app.apps.blue_green import run_compare, run_switch
from spark_app.apps.run import run
from spark_app.bluegreen.switch import recorded_boundary
from spark_app.contract.reports.blue_green import read_seam
from spark_app.contract.reports.bootstrap import read_record, record_location
from spark_app.contract.storage import open_location
from spark_app.examples.generator import generate
from spark_app.sinks.iceberg.writer import FAULT_ENV as SINK_FAULT
from tests.spark.conftest import T0, Driver
from tests.spark.test_blue_green_upgrade import (
    INPUT,
    KEY,
    V2,
    assert_switched_once,
    bounded,
    green_starting,
    main_rows,
    promoted_config,
    upgraded_here,
)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("impressions", "playbacks")
PHASES = (120, 150, 180, 210)
"""Arrival minutes after T0: appended before blue starts until the first; each later span
arrives during the upgrade."""
APPENDS_PER_PHASE = 3
"""Each span arrives in this many appends (snapshots) per table."""


class Lake:
    """The two live tables, and the rows still to arrive (by ingestion time)."""

    def __init__(self, root: Path) -> None:
        self.props = {"uri": f"sqlite:///{root}/lake.db", "warehouse": f"file://{root}/warehouse"}
        self.catalog = SqlCatalog("default", **self.props)
        truth = SqlCatalog("truth", uri=f"sqlite:///{root}/truth.db", warehouse=f"file://{root}/truth")
        generate(truth, INPUT)
        self.catalog.create_namespace_if_not_exists("demo")
        self.rows: dict[str, pa.Table] = {}
        for name in TABLES:
            source = truth.load_table(f"demo.{name}")
            self.rows[name] = source.scan().to_arrow()
            self.catalog.create_table(f"demo.{name}", schema=source.schema())

    def append(self, start: float, end: float) -> None:
        """What arrived in [T0 + start, T0 + end) minutes, in ``APPENDS_PER_PHASE`` appends per table."""
        step = (end - start) / APPENDS_PER_PHASE
        for i in range(APPENDS_PER_PHASE):
            lo = T0 + timedelta(minutes=start + i * step)
            hi = T0 + timedelta(minutes=start + (i + 1) * step)
            for name in TABLES:
                rows = self.rows[name]
                arrived = pc.struct_field(rows["__metadata__"], "ingestion_ts")
                naive = [t.replace(tzinfo=None) for t in (lo, hi)]
                kept = rows.filter(pc.and_(pc.greater_equal(arrived, naive[0]), pc.less(arrived, naive[1])))
                if kept.num_rows:
                    self.catalog.load_table(f"demo.{name}").append(kept)


def manifest(lake: Lake, root: Path, generation: int, **spec: Any) -> StreamingJob:
    data = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text()))
    data["metadata"].update(name="rmi", uid="u1", generation=generation, annotations={})
    s = data["spec"]
    s["catalogs"] = {"default": {"type": "sql", **lake.props}}
    for name in TABLES:
        s["sources"][name] = {
            "live": {"kind": "icebergLive", "table": f"demo.{name}", "startingPosition": "earliest"},
            "history": {"table": f"demo.{name}"},
        }
    upgraded_here(s, root)
    for gone in ("executor", "driver"):
        s.pop(gone, None)
    s.update(spec)
    return StreamingJob.model_validate(data)


def test_rmi_on_live_appends_v1_to_v2_switches_main_once_with_no_gap_and_no_duplicate(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = Lake(tmp_path)
    v1 = manifest(lake, tmp_path, 1)
    v2 = manifest(lake, tmp_path, 2, **V2)
    catalog = SqlCatalog("default", **lake.props)

    # blue (v1) reads every append from the first, appends going on
    lake.append(-60, PHASES[0])
    blue = bounded(streaming_job_config(v1))
    run(blue, spark)
    lake.append(PHASES[0], PHASES[1])
    run(blue, spark)

    up = green_starting(tmp_path, blue)
    green = bounded(green_config(v2, up))
    # appends after blue's last run: green's history ends where blue read, its live leg stops there too
    lake.append(PHASES[1], PHASES[1] + 10)
    (tmp_path / "green-driver").mkdir()
    green_driver = Driver(green, tmp_path / "green-driver")
    killed = green_driver.run(**{SINK_FAULT: "kill-after-commit:1"})
    assert killed.returncode == -9, green_driver.tail()
    record = read_record(*record_location(green))
    assert record is not None and set(record.live_from) == set(TABLES), record
    for name in TABLES:  # pinned at the newest snapshot blue read whole, not the table's newest
        table = catalog.load_table(f"demo.{name}")
        current = table.current_snapshot()
        assert current is not None and record.live_from[name] != current.snapshot_id
    run(green, spark)
    seam = read_seam(open_location(up.green_checkpoint or ""))
    assert seam is not None and seam.all_at_seam(), "green stands where blue does, not at the table's newest"

    compared = run_compare(
        bounded(green_config(v2, up, (T0.isoformat(), (T0 + timedelta(minutes=30)).isoformat()))), spark
    )
    assert compared.state == "Matched", compared
    assert compared.tables[0].new_columns == ["time_to_play_s"]

    # StoppingBlue: blue reads what arrived, then stops; Draining: green reaches it
    lake.append(PHASES[1] + 10, PHASES[2])
    run(blue, spark)
    lake.append(PHASES[2], PHASES[2] + 10)  # after blue stopped: the promoted job's to read
    run(green, spark)
    seam = read_seam(open_location(up.green_checkpoint or ""))
    assert seam is not None and seam.all_at_seam(), "green drained to blue's end, not the table's newest"
    blue_rows = main_rows(catalog)
    green_rows = main_rows(catalog, "green-rmi-g2")

    (tmp_path / "switch-driver").mkdir()
    switch_driver = Driver(bounded(green_config(v2, up)), tmp_path / "switch-driver", "switch")
    assert switch_driver.run(**{SWITCH_FAULT: "kill-before-commit"}).returncode == -9, switch_driver.tail()
    recorded = recorded_boundary(open_location(up.green_checkpoint or ""))
    assert recorded is not None and main_rows(catalog) == blue_rows, "B recorded; main not switched yet"
    switched = run_switch(bounded(green_config(v2, up)), spark)
    assert switched.state == "Switched", switched
    b = switched.boundary
    assert b == recorded and b is not None and T0 + timedelta(minutes=30) <= b <= T0 + timedelta(minutes=90), b

    promoted = promoted_config(v2, up)
    lake.append(PHASES[2] + 10, PHASES[3] + 120)
    run(promoted, spark)

    final = main_rows(catalog)
    assert_switched_once(spark, final, (blue_rows, green_rows), b, (v1, v2), tmp_path)
    assert len(final) > 100 and len(KEY) == 2
