"""A backfill held by a declared member that never reports fails with the member's name
after a bounded wait, instead of waiting forever (or ending 'complete' with nothing read)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from spark_app.contract.alignment import HELD, GroupView
from spark_app.contract.config import AlignmentConfig, Window
from spark_app.contract.errors import IncompleteBackfillError
from spark_app.contract.sources import IcebergBackfillSource
from spark_app.planning.splits import FilePiece, Split
from spark_app.sources.iceberg import backfill_reader
from spark_app.sources.iceberg.spec import SourceSpec


class NeverReported:
    """A group whose member in another job never reports: held at -inf by it."""

    def report(self, member: str, watermark: int | None, throttled: bool = False, reset: bool = False) -> GroupView:
        return GroupView(HELD, ("other/out/ghost",), ("other/out/ghost",))


def test_a_member_that_never_reports_fails_the_backfill(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SourceSpec(
        name="plays",
        member="job/out/plays",
        source=IcebergBackfillSource(kind="icebergBackfill", table="demo.plays"),
        catalog={},
        ordering_column="event_ts",
        window=Window(start="2026-11-01T10:00:00Z", end="2026-11-01T11:00:00Z"),
        alignment=AlignmentConfig(maxDrift="5m"),
        group="g",
        members=("job/out/plays",),
    )
    reader = backfill_reader.BackfillReader(spec)
    reader._provider = NeverReported()
    reader.prepareForTriggerAvailableNow()
    monkeypatch.setattr(backfill_reader, "MISSING_MEMBER_LIMIT_S", 0.2)
    # the reader's own time only: the module's sleep patched would be every thread's
    monkeypatch.setattr(backfill_reader, "time", SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: None))
    split = Split(1_000_000_000, 1_000_060_000, (FilePiece("f", None, 1, 1),), 1, 1)
    with pytest.raises(IncompleteBackfillError, match=r"never reported: other/out/ghost"):
        reader._decide([split], 0, ReadAllAvailable())
