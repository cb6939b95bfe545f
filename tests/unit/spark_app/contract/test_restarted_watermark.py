"""A live query restarted from its checkpoint with nothing new to read runs no batch, and Spark
reports no watermark while it idles: its progress report carries the checkpoint's, so the
operator still sees where the job is in event time (a blue/green upgrade's catch-up needs it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from spark_app.apps.run import checkpoint_watermarks
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.reports.progress import ProgressReport, ProgressReporter, report_name
from spark_app.contract.storage import REPORT_DIR

WM = datetime(2026, 11, 1, 13, 29, 58, tzinfo=UTC)


def batch(query: Path, batch_id: int, watermark_ms: int, done: bool = True) -> None:
    """Batch ``batch_id``'s offset log entry, and (``done``) Spark's record that it committed."""
    for log in ("offsets", "commits"):
        (query / log).mkdir(parents=True, exist_ok=True)
    meta = json.dumps({"batchWatermarkMs": watermark_ms, "batchTimestampMs": 1})
    (query / "offsets" / str(batch_id)).write_text(f'v1\n{meta}\n{{"plays":{{"0":4}}}}')
    if done:
        (query / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_newest_done_batch_gives_the_watermark_and_none_before_any(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    query = tmp_path / "ckpt" / "copy"
    assert checkpoint_watermarks(cfg) == {}
    batch(query, 3, 0)
    assert checkpoint_watermarks(cfg) == {}, "0: no watermark yet"
    batch(query, 4, int(WM.timestamp() * 1000))
    assert checkpoint_watermarks(cfg) == {"copy": WM}
    batch(query, 5, int(WM.timestamp() * 1000) + 60_000, done=False)
    assert checkpoint_watermarks(cfg) == {"copy": WM}, "a batch not done is run again: its watermark is not yet"


def config(tmp_path: Path) -> JobConfig:
    return parse_config(
        {
            "name": "rmi",
            "pipeline": "spark_app.examples.copy:pipeline",
            "mode": "live",
            "sources": {
                "plays": {"kind": "kafka", "bootstrapServers": "k:9092", "topic": "plays", "schemaDdl": "a INT"}
            },
            "sinks": {"copy": {"kind": "parquet", "path": str(tmp_path / "out")}},
            "checkpoint": {"location": str(tmp_path / "ckpt")},
        }
    )


def test_an_idle_restarted_query_reports_its_checkpoints_watermark(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    reporter = ProgressReporter(cfg, lookahead_s=60.0, watermarks={"copy": WM}, lateness_s=1800.0)
    reporter.idle("rmi-copy")
    reporter.flush()
    written = (tmp_path / "ckpt" / REPORT_DIR / report_name("copy")).read_text()
    report = ProgressReport.model_validate_json(written)
    assert report.batch_id is None and report.watermark == WM
    assert (report.lookahead_s, report.lateness_s) == (60.0, 1800.0), "the plan's horizon, for a blue/green catch-up"
