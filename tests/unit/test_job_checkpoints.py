"""A StreamingJob's externalized checkpoints as the operator keeps them: when a snapshot is
due, what one timer run copies and retains, and the restore points shown in status."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kappa_operator.checkpoints import list_snapshots, open_location
from kappa_operator.handlers.checkpoints import snapshot_job
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.reconcile.checkpoints import snapshot_due
from kappa_operator.render.jobconfig import PAUSED_ANNOTATION

ROOT = Path(__file__).resolve().parents[2]
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


def test_one_run_externalizes_each_query_applies_retention_and_lists_restore_points(tmp_path: Path) -> None:
    live = tmp_path / "ckpt" / "live" / "attributed_plays"
    sj = job(tmp_path)
    for batch in range(3):
        add_batch(live, batch)
        fields = snapshot_job(sj, NOW + timedelta(minutes=batch))
    external = open_location(str(tmp_path / "ext" / "attributed_plays"))
    assert [m.batch_id for m in list_snapshots(external)] == [1, 2], "retention keeps the newest 2"
    assert [p["batchId"] for p in fields["checkpoints"]] == [2, 1]
    assert fields["checkpoints"][0]["sink"] == "attributed_plays"
    assert fields["lastCheckpoint"] == "2026-11-21T09:32:00Z" and fields["lastSnapshotAt"] == "2026-11-21T10:02:00Z"
    assert fields["checkpoints"][0]["watermark"] == "2026-11-21T09:02:00Z"
    again = snapshot_job(sj, NOW + timedelta(minutes=3))
    assert again["checkpoints"] == fields["checkpoints"], "nothing new committed: nothing copied"
