"""Green on an icebergLive source (pure): where its archive of the table ends (blue's whole
snapshots), and how far each of its live batches may go (blue's position, in table order)."""

from __future__ import annotations

import json
from pathlib import Path

from spark_app.bluegreen.live_start import read_whole
from spark_app.contract.offsets import LiveOffset
from spark_app.sources.iceberg.trailed import capped

CHAIN = [101, 102, 103, 104]
"""A table's history, oldest first."""
OTHER = 999
"""A snapshot of another table blue reads."""


def test_the_archive_ends_at_the_newest_snapshot_every_sink_query_of_blue_read_whole() -> None:
    assert read_whole(CHAIN, [LiveOffset(103, 4, True)]) == 103
    assert read_whole(CHAIN, [LiveOffset(103, 2, False)]) == 102, "within 103: only its parent read whole"
    assert read_whole(CHAIN, [LiveOffset(104, 0, True), LiveOffset(102, 1, False)]) == 101, "the lagging query"
    assert read_whole(CHAIN, [LiveOffset(OTHER, 3, True), LiveOffset(103, 4, True)]) == 103, "another table's"
    assert read_whole(CHAIN, [LiveOffset(101, 1, False)]) is None, "still in the first snapshot"
    assert read_whole(CHAIN, [LiveOffset(OTHER, 3, True)]) is None, "blue read none of this table"
    assert read_whole(CHAIN, []) is None


def test_green_reads_what_it_proposes_up_to_blues_position_in_this_table() -> None:
    start = LiveOffset(102, 0, True)
    ahead, behind = LiveOffset(104, 1, False), LiveOffset(103, 2, False)
    assert capped(CHAIN, start, ahead, [LiveOffset(103, 3, False)]) == LiveOffset(103, 3, False)
    assert capped(CHAIN, start, behind, [LiveOffset(103, 3, False)]) == behind, "below the cap: as proposed"
    assert capped(CHAIN, start, ahead, [LiveOffset(104, 0, True)]) == ahead, "a whole snapshot is past any split of it"
    assert capped(CHAIN, start, ahead, [LiveOffset(103, 5, True), LiveOffset(OTHER, 1, True)]) == LiveOffset(
        103, 5, True
    ), "another table's position is passed over"
    assert capped(CHAIN, start, ahead, [LiveOffset(103, 5, True), LiveOffset(103, 1, False)]) == LiveOffset(
        103, 1, False
    ), "two of blue's sources on one table: the lower"


def test_green_reads_nothing_until_blue_has_a_position_in_the_table_and_never_goes_back() -> None:
    start = LiveOffset(103, 1, False)
    assert capped(CHAIN, start, LiveOffset(104, 1, False), []) == start
    assert capped(CHAIN, start, LiveOffset(104, 1, False), [LiveOffset(OTHER, 1, True)]) == start
    assert capped(CHAIN, start, LiveOffset(104, 1, False), [LiveOffset(102, 0, True)]) == start


def test_the_trailer_writes_blues_live_offsets_beside_the_kafka_cap(tmp_path: Path) -> None:
    from spark_app.bluegreen.trail import SinkQuery, Trailer
    from spark_app.contract.blue_green import live_trail_rel
    from spark_app.contract.storage import open_location

    blue = tmp_path / "blue" / "plays"
    (blue / "offsets").mkdir(parents=True)
    (blue / "commits").mkdir()
    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    offset = {"v": 1, "kind": "live", "snapshot_id": "103", "position": 2, "complete": False}
    (blue / "offsets" / "0").write_text(f"v1\n{meta}\n{json.dumps(offset)}")
    (blue / "commits" / "0").write_text("v1\n{}")
    Trailer({"plays": SinkQuery(open_location(str(blue)))}, open_location(str(tmp_path / "green")), []).once()
    written = json.loads((tmp_path / "green" / live_trail_rel("plays")).read_text())
    assert [LiveOffset.from_dict(o) for o in written["offsets"]] == [LiveOffset(103, 2, False)]


def test_green_is_at_the_seam_only_once_its_archive_leg_ended(tmp_path: Path) -> None:
    """On a quiet table blue may stop exactly where green's archive ends: green's live position
    then equals blue's while it still has history to emit."""
    from datetime import UTC, datetime

    from spark_app.bluegreen.trail import SinkQuery, Trailer
    from spark_app.contract.reports.blue_green import read_seam
    from spark_app.contract.reports.bootstrap import BootstrapRecord, write_record
    from spark_app.contract.storage import open_location

    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    at_s = {"v": 1, "kind": "live", "snapshot_id": "103", "position": 0, "complete": True}
    archive = '{"v":1,"kind":"backfill","snapshot_id":"103","position":4,"plan":"p","splits":9}'
    for query, sources in (
        (tmp_path / "blue" / "plays", [json.dumps(at_s)]),
        (tmp_path / "green" / "plays", [archive, json.dumps(at_s)]),
    ):
        (query / "offsets").mkdir(parents=True)
        (query / "commits").mkdir()
        (query / "offsets" / "0").write_text("\n".join(["v1", meta, *sources]))
        (query / "commits" / "0").write_text("v1\n{}")
    green = open_location(str(tmp_path / "green"))
    records = open_location(str(tmp_path / "green" / "_kappa"))
    trailer = Trailer(
        {"plays": SinkQuery(open_location(str(tmp_path / "blue" / "plays")))},
        green,
        [],
        green_queries={"plays": SinkQuery(open_location(str(tmp_path / "green" / "plays")))},
        green_record=(records, "bootstrap.json"),
    )
    trailer.once()
    seam = read_seam(green)
    assert seam is not None and not seam.all_at_seam(), "no record yet: still reading the archive"
    at = datetime(2026, 12, 6, tzinfo=UTC)
    record = BootstrapRecord(start=at, archives={}, offsets={}, decided_at=at, live_from={"plays": 103})
    write_record(records, record, "bootstrap.json")
    trailer.once()
    seam = read_seam(green)
    assert seam is not None and not seam.all_at_seam(), "the archive leg not ended"
    write_record(records, record.model_copy(update={"switched_at": at}), "bootstrap.json")
    trailer.once()
    seam = read_seam(green)
    assert seam is not None and seam.all_at_seam()
