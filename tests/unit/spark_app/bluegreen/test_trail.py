"""Green's cap per topic from blue's durable position (pure)."""

from __future__ import annotations

from pathlib import Path

from spark_app.bluegreen.trail import kafka_cap
from spark_app.contract.blue_green import Position


def test_the_cap_takes_blues_offsets_of_the_green_sources_topics_the_lower_of_two() -> None:
    blue = Position(
        3,
        None,
        {"0": {"plays": {"0": 10, "1": 7}}, "1": {"plays": {"0": 8}, "clicks": {"0": 4}}, "2": None, "3": "x"},
    )
    assert kafka_cap(blue, ["plays"]) == {"plays": {"0": 8, "1": 7}}
    assert kafka_cap(blue, ["views"]) == {}


def test_the_trailer_writes_each_sinks_cap_once_blue_has_a_durable_batch(tmp_path: Path) -> None:
    import json

    from spark_app.bluegreen.trail import BlueQuery, Trailer
    from spark_app.contract.blue_green import trail_rel
    from spark_app.contract.storage import open_location

    blue_ckpt = tmp_path / "blue" / "attributed"
    (blue_ckpt / "offsets").mkdir(parents=True)
    (blue_ckpt / "commits").mkdir()
    green = open_location(str(tmp_path / "green"))
    trailer = Trailer({"attributed": BlueQuery(open_location(str(blue_ckpt)))}, green, ["plays"])
    assert trailer.once() == {}  # no durable batch: no trail, green reads nothing
    assert not (tmp_path / "green" / trail_rel("attributed")).exists()

    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    (blue_ckpt / "offsets" / "0").write_text(f'v1\n{meta}\n{{"plays":{{"0":12,"1":3}}}}')
    (blue_ckpt / "offsets" / "1").write_text(f'v1\n{meta}\n{{"plays":{{"0":20,"1":9}}}}')
    (blue_ckpt / "commits" / "0").write_text("v1\n{}")
    assert trailer.once() == {"attributed": {"plays": {"0": 12, "1": 3}}}
    written = json.loads((tmp_path / "green" / trail_rel("attributed")).read_text())
    assert written == {"plays": {"0": 12, "1": 3}}
    (tmp_path / "green" / trail_rel("attributed")).unlink()
    assert trailer.once() == {"attributed": {"plays": {"0": 12, "1": 3}}}
    assert not (tmp_path / "green" / trail_rel("attributed")).exists(), "blue did not move: nothing written"
    (blue_ckpt / "commits" / "1").write_text("v1\n{}")
    assert trailer.once() == {"attributed": {"plays": {"0": 20, "1": 9}}}
    assert json.loads((tmp_path / "green" / trail_rel("attributed")).read_text()) == {"plays": {"0": 20, "1": 9}}
