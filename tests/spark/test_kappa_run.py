"""`kappa run` of each example manifest, unchanged, as a person tries them before `kubectl
apply`: one --local directory, an hour of impressions and playbacks generated into the
examples' window (2026-11-01T14:00 on), real local Spark (this session's JVM: `main` runs
in-process). In the order a person would: the live job, its Rewind, then the Backfill that
rewrites and publishes the window (in one run, as its driver does on a cluster)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table
from pyspark.sql import SparkSession

from kappa_operator.cli.commands import main
from kappa_operator.local.overrides import local_catalog
from kappa_operator.render.jobconfig import CHECKPOINT_ANNOTATION
from spark_app.contract.checkpoints import list_snapshots, open_location
from spark_app.examples.generator import GeneratorConfig, generate
from spark_app.sinks.iceberg.commit import BATCH_ID, QUERY_ID, UNDO_AFTER_BATCH, branch_history

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
KEY = ["playback_id", "impression_id", "playback_ts"]


def rows(table: Table, ref: str = "main") -> list[tuple[Any, ...]]:
    """Every row of a branch, duplicates kept (exactly once is what is checked)."""
    snap = table.snapshot_by_name(ref)
    assert snap is not None
    data = table.scan(snapshot_id=snap.snapshot_id).to_arrow().select(KEY)
    return sorted(tuple(r.values()) for r in data.to_pylist())


def batches(table: Table) -> list[int]:
    """Batch ids the live query committed on main, oldest first."""
    out = []
    for snap in branch_history(table, "main"):
        props = snap.summary.additional_properties if snap.summary else {}
        if QUERY_ID in props and BATCH_ID in props:
            out.append(int(props[BATCH_ID]))
    return out[::-1]


def record(root: Path, kind: str, name: str) -> dict[str, Any]:
    return dict(json.loads((root / "objects" / kind / "default" / f"{name}.json").read_text()))


def kappa(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["run", *args])
    return code, " ".join(capsys.readouterr().out.split())


def test_kappa_run_of_each_example(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    root = (tmp_path / "local").resolve()
    job = yaml.safe_load((EXAMPLES / "rmi-streamingjob.yaml").read_text())
    props = local_catalog("default", job["spec"]["catalogs"]["default"], root)
    (root / "catalogs").mkdir(parents=True)
    catalog = SqlCatalog("default", uri=props["uri"], warehouse=props["warehouse"])
    gen = GeneratorConfig(
        start=datetime(2026, 11, 1, 14, tzinfo=UTC),
        hours=1,
        impressions_per_hour=2000,
        commit_interval=timedelta(minutes=5),
        namespace="ingest",  # the tables the example reads: ingest.impressions, ingest.playbacks
    )
    generate(catalog, gen)
    local = ["--local", str(root)]

    # 1. the live job, replaying the tables from their first snapshot, 3 commits per micro-batch
    code, out = kappa(
        capsys, str(EXAMPLES / "rmi-streamingjob.yaml"), *local, "--starting-position", "earliest",
        "--snapshots-per-batch", "3",
    )  # fmt: skip
    assert code == 0, out
    assert "StreamingJob default/rmi: Running" in out and "StreamingJob default/rmi: Completed" in out
    assert f"sql sqlite:///{root}/catalogs/" in out, "the --local mapping is shown"
    table = catalog.load_table("marts.attributed_plays")
    live = rows(table)
    assert len(live) > 200 and len(set(live)) == len(live), "attributed plays, each once"
    committed = batches(table)
    assert committed == list(range(len(committed))) and len(committed) >= 4
    job_status = record(root, "streamingjob", "rmi")["status"]
    assert job_status["phase"] == "Completed"
    external = open_location(f"{root}/s3/lake/kappa-snapshots/rmi/attributed_plays")
    snaps = list_snapshots(external)
    assert [m.batch_id for m in snaps][: len(committed)] == committed, "every committed batch is a restore point"

    # 2. the Rewind as written: its target time (production's) precedes every snapshot taken now
    before = table.refresh().current_snapshot()
    code, out = kappa(capsys, str(EXAMPLES / "rmi-rewind.yaml"), *local)
    assert code == 1
    assert "no snapshot committed before 2026-11-01T14:00:00+00:00" in out and "--target-batch N" in out
    assert table.refresh().current_snapshot() == before, "nothing changed"

    # ... and to a point of this run: restore batch 1, undo what came after, resume from batch 2
    code, out = kappa(capsys, str(EXAMPLES / "rmi-rewind.yaml"), *local, "--target-batch", "1")
    assert code == 0, out
    for phase in ("Stopping", "Restoring", "Resuming", "Succeeded"):
        assert f"Rewind default/rmi-before-outage: {phase}" in out
    rw = record(root, "rewind", "rmi-before-outage")["status"]
    assert rw["phase"] == "Succeeded" and rw["restoredBatch"] == 1 and rw["restores"][0]["filesRemoved"] > 0
    table = table.refresh()
    history = list(branch_history(table, "main"))[::-1]
    undo_at = next(
        i for i, s in enumerate(history) if s.summary and UNDO_AFTER_BATCH in s.summary.additional_properties
    )
    assert history[undo_at].summary is not None
    assert history[undo_at].summary.additional_properties[UNDO_AFTER_BATCH] == "1"
    rerun = [int(s.summary.additional_properties[BATCH_ID]) for s in history[undo_at + 1 :] if s.summary]
    assert rerun[0] == 2, "the resumed query's first batch is the one after the restored batch"
    assert rows(table) == live, "undo + resume give the same rows, none twice"
    annotations = record(root, "streamingjob", "rmi")["annotations"]
    assert annotations[CHECKPOINT_ANNOTATION] == rw["checkpointLocation"], "the job now runs from the restored copy"

    # 3. the Backfill: the window's history into a branch (alignment.mode auto: the range join
    # runs as one batch query, and kappa run says why); validated against main and published in
    # the same run, as the backfill's driver does on a cluster (no separate publish application)
    head = table.refresh().current_snapshot()
    code, out = kappa(capsys, str(EXAMPLES / "rmi-backfill.yaml"), *local)
    assert code == 0, out
    for phase in ("Running", "Succeeded"):
        assert f"Backfill default/rmi-outage: {phase}" in out
    assert "Backfill default/rmi-outage: Publishing" not in out, "one run that publishes"
    said = " ".join(out.split())
    assert "auto ran bounded" in said and "no row arrived behind the live watermark" in said, out
    assert "admission decisions" not in out, "a bounded run admits nothing"
    bf = record(root, "backfill", "rmi-outage")["status"]
    (published,) = bf["published"]
    assert bf["matchRatio"] == published["matchRatio"] == 1.0
    assert published["table"] == "marts.attributed_plays" and published["branchRows"] == len(live)
    assert (published["rowsAdded"], published.get("snapshotId")) == (0, None), "main already equals it: no commit"
    assert "main already equal to the branch: no commit" in bf["message"]
    table = table.refresh()
    assert rows(table, "backfill-rmi-outage") == live, "the backfill reproduced the live output"
    assert rows(table) == live and table.current_snapshot() == head
