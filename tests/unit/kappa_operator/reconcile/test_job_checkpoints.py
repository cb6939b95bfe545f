"""A StreamingJob's externalized checkpoints: what the driver's externalizer copies and
retains on each due batch, and the restore points the operator lists from its manifests
(without copying anything) into status."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.handlers.checkpoints import list_points
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.checkpoints import SHOWN, checkpoint_status, snapshot_due, surely_not_due
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION, streaming_job_config
from spark_app.checkpoints.driver import sink_locations, snapshot_query
from spark_app.contract.checkpoints import list_snapshots, open_location
from spark_app.contract.config import RestorePoint

ROOT = Path(__file__).resolve().parents[4]
NOW = datetime(2026, 11, 21, 10, tzinfo=UTC)


def job(tmp: Path | None = None, status: dict[str, Any] | None = None, **annotations: str) -> StreamingJob:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    data["metadata"]["annotations"] = annotations
    if tmp is not None:
        data["spec"]["checkpoints"] = {
            "location": str(tmp / "ckpt"),
            "externalLocation": str(tmp / "ext"),
            "retention": {"count": 2},
        }
    if status is not None:
        data["status"] = status
    return StreamingJob.model_validate(data)


def test_a_snapshot_is_due_after_the_interval_unless_paused() -> None:
    assert snapshot_due(job(), NOW), "never taken"
    recent = job(status={"lastSnapshotAt": "2026-11-21T09:55:00Z"})
    assert not snapshot_due(recent, NOW) and snapshot_due(recent, NOW + timedelta(minutes=5))
    assert not snapshot_due(job(**{PAUSED_ANNOTATION: "rewind/x"}), NOW), "not while a rewind runs"
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    del data["spec"]["checkpoints"]["externalLocation"]
    assert not snapshot_due(StreamingJob.model_validate(data), NOW)


@pytest.mark.parametrize(
    ("status", "interval", "at", "expected"),
    [
        ({"lastSnapshotAt": "2026-11-21T09:55:00Z"}, "10m", NOW, True),
        ({"lastSnapshotAt": "2026-11-21T09:55:00Z"}, "10m", NOW + timedelta(minutes=5), False),
        ({"lastSnapshotAt": "2026-11-21T09:55:00Z"}, "2m", NOW, False),
        ({}, "10m", NOW, False),  # never taken: due
        (None, "10m", NOW, False),
        ({"lastSnapshotAt": "yesterday"}, "10m", NOW, False),  # unreadable: the full check decides
        ({"lastSnapshotAt": "2026-11-21T09:55:00Z"}, None, NOW, False),  # not defaulted by a server
        ({"lastSnapshotAt": "2026-11-21T09:55:00Z"}, "soon", NOW, False),
    ],
)
def test_surely_not_due_answers_from_the_manifest_only_when_certain(
    status: dict[str, Any] | None, interval: str | None, at: datetime, expected: bool
) -> None:
    data = yaml.safe_load((ROOT / "examples" / "rmi-streamingjob.yaml").read_text())
    if interval is None:
        data["spec"]["checkpoints"].pop("interval", None)
    else:
        data["spec"]["checkpoints"]["interval"] = interval
    if status is not None:
        data["status"] = status
    assert surely_not_due(data, at) is expected
    if expected:  # never "not due" where the validated job is due
        assert not snapshot_due(StreamingJob.model_validate(data), at)


def add_batch(root: Path, i: int) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(exist_ok=True)
    if not (root / "metadata").exists():
        (root / "metadata").write_text(json.dumps({"id": "q"}) + "\n")
    meta = {"batchWatermarkMs": int((NOW - timedelta(hours=1)).timestamp() * 1000) + i * 60_000, "batchTimestampMs": 0}
    (root / "offsets" / str(i)).write_text(f"v1\n{json.dumps(meta)}\n" + '{"kind":"live","snapshotId":7,"position":0}')
    (root / "commits" / str(i)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    t = (NOW - timedelta(minutes=30 - i)).timestamp()
    os.utime(root / "commits" / str(i), (t, t))


def driver_copies(sj: StreamingJob, now: datetime) -> list[int]:
    """What the live driver's externalizer does on a due batch (``CheckpointExternalizer``)."""
    cfg = streaming_job_config(sj)
    assert cfg.checkpoint.external is not None
    where = sink_locations(cfg, "attributed_plays")
    return snapshot_query(open_location(where.live), open_location(where.external), cfg.checkpoint.external, now)


def test_the_driver_externalizes_applies_retention_and_the_operator_lists_restore_points(tmp_path: Path) -> None:
    live = tmp_path / "ckpt" / "live" / "attributed_plays"
    sj = job(tmp_path)
    cfg = streaming_job_config(sj)
    assert cfg.checkpoint.external is not None and cfg.checkpoint.external.keep_last == 2
    assert cfg.checkpoint.external.interval == timedelta(minutes=10), "the job's interval travels to its driver"
    for batch in range(3):
        add_batch(live, batch)
        assert driver_copies(sj, NOW + timedelta(minutes=batch)) == [batch]
    fields = list_points(sj, NOW + timedelta(minutes=2))
    external = open_location(str(tmp_path / "ext" / "attributed_plays"))
    assert [m.batch_id for m in list_snapshots(external)] == [1, 2], "retention keeps the newest 2"
    assert [p["batchId"] for p in fields["checkpoints"]] == [2, 1]
    assert fields["checkpoints"][0]["sink"] == "attributed_plays"
    assert fields["lastCheckpoint"] == "2026-11-21T09:32:00Z" and fields["lastSnapshotAt"] == "2026-11-21T10:02:00Z"
    assert fields["checkpoints"][0]["watermark"] == "2026-11-21T09:02:00Z", "to the second"
    assert driver_copies(sj, NOW + timedelta(minutes=3)) == [], "nothing new committed: nothing copied"
    files = sorted(p.relative_to(tmp_path) for p in (tmp_path / "ext").rglob("*") if p.is_file())
    assert list_points(sj, NOW + timedelta(minutes=3))["checkpoints"] == fields["checkpoints"]
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "ext").rglob("*") if p.is_file()) == files, (
        "listing copies nothing"
    )


def test_a_failing_driver_copy_is_shown_in_status_until_one_succeeds(tmp_path: Path) -> None:
    """The driver's copies fail (a purged batch, storage refusing): the operator's listing of
    restore points carries the reason per sink, and the next copy that succeeds clears it."""
    from spark_app.checkpoints.driver import CheckpointExternalizer

    live = tmp_path / "ckpt" / "live" / "attributed_plays"
    sj = job(tmp_path)
    add_batch(live, 0)
    externalizer = CheckpointExternalizer(streaming_job_config(sj))
    externalizer._copy("attributed_plays")
    assert list_points(sj, NOW)["snapshotError"] is None
    add_batch(live, 1)
    (live / "offsets" / "0").unlink()  # what batch 1 restarts from is gone: its copy fails
    externalizer._copy("attributed_plays")
    error = list_points(sj, NOW)["snapshotError"]
    assert error is not None and error.startswith("sink attributed_plays: ") and "(since 20" in error
    assert externalizer.errors and [p["batchId"] for p in list_points(sj, NOW)["checkpoints"]] == [0]
    add_batch(live, 0)  # repaired
    externalizer._copy("attributed_plays")
    fields = list_points(sj, NOW)
    assert fields["snapshotError"] is None and [p["batchId"] for p in fields["checkpoints"]] == [1, 0]
    externalizer.finish()


def test_status_lists_the_newest_restore_points_with_their_time_and_watermark() -> None:
    t0 = datetime(2026, 11, 1, 12, tzinfo=UTC)
    points = [
        RestorePoint(
            sink="out",
            batch_id=b,
            query_id="q",
            committed_at=t0 + timedelta(minutes=b),
            watermark_ms=None if b == 0 else int((t0.timestamp() + 60 * b - 300) * 1000),
        )
        for b in range(SHOWN + 2)
    ]
    status = checkpoint_status(points, t0 + timedelta(hours=1), ["sink out: denied (since 12:00)"])
    assert [p["batchId"] for p in status["checkpoints"]] == list(range(SHOWN + 1, 1, -1)), "the newest, newest first"
    assert status["checkpoints"][0] == {
        "sink": "out",
        "batchId": SHOWN + 1,
        "committedAt": "2026-11-01T12:06:00.000000Z",
        "queryId": "q",
        "watermark": "2026-11-01T12:01:00Z",
    }, "the same form as a Rewind's chosen point (RestorePointStatus): its commit time exact"
    assert status["lastCheckpoint"] == "2026-11-01T12:06:00Z" and status["lastSnapshotAt"] == "2026-11-01T13:00:00Z"
    assert status["snapshotError"] == "sink out: denied (since 12:00)"
    assert checkpoint_status([], t0)["lastCheckpoint"] is None and checkpoint_status([], t0)["snapshotError"] is None
