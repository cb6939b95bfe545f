"""A sink query's durable position from a checkpoint and pending log on disk, written as Spark
and the Iceberg sink write them."""

from __future__ import annotations

import json
from pathlib import Path

from spark_app.bluegreen.position import durable_position, recorded_batches
from spark_app.contract.blue_green import Position
from spark_app.contract.storage import open_location


def offsets(batch: int, watermark_ms: int, kafka: dict[str, dict[str, int]]) -> str:
    meta = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": 1_000 + batch, "conf": {}}
    return "\n".join(["v1", json.dumps(meta), json.dumps(kafka)])


def checkpoint(root: Path, with_offsets: range, committed: range) -> Path:
    for b in with_offsets:
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(b)).write_text(offsets(b, 60_000 * b, {"impressions": {"0": 10 * b}}))
    for b in committed:
        (root / "commits").mkdir(parents=True, exist_ok=True)
        (root / "commits" / str(b)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "metadata").write_text('{"id":"q1"}')
    return root


def test_the_durable_position_is_the_newest_committed_batch_with_its_offsets(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "ckpt" / "attributed", range(0, 4), range(0, 2))
    found = durable_position(open_location(str(ckpt)))
    assert found == Position(1, 60_000, {"0": {"impressions": {"0": 10}}})


def test_a_batch_the_sink_recorded_for_commit_is_durable_before_sparks_log(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "ckpt" / "attributed", range(0, 4), range(0, 2))
    pending = tmp_path / "_kappa" / "pending-commits" / "attributed"
    pending.mkdir(parents=True)
    (pending / f"{2:020d}.json").write_text("{}")
    (pending / ".00000000000000000003.json.tmp").write_text("")  # a write in flight is no record
    log = open_location(str(pending))
    assert recorded_batches(log) == [2]
    found = durable_position(open_location(str(ckpt)), log)
    assert found is not None and found.batch_id == 2 and found.offsets == {"0": {"impressions": {"0": 20}}}


def test_a_query_with_no_durable_batch_has_no_position(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path / "ckpt" / "attributed", range(0, 1), range(0, 0))
    assert durable_position(open_location(str(ckpt))) is None
