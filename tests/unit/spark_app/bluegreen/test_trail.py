"""Green's cap per topic from blue's durable position (pure)."""

from __future__ import annotations

from pathlib import Path

from spark_app.contract.blue_green import Position, kafka_offsets


def test_the_cap_takes_blues_offsets_of_the_green_sources_topics_the_lower_of_two() -> None:
    blue = Position(
        3,
        None,
        {"0": {"plays": {"0": 10, "1": 7}}, "1": {"plays": {"0": 8}, "clicks": {"0": 4}}, "2": None, "3": "x"},
    )
    assert kafka_offsets(blue, ["plays"]) == {"plays": {"0": 8, "1": 7}}
    assert kafka_offsets(blue, ["views"]) == {}


def test_the_trailer_writes_each_sinks_cap_once_blue_has_a_durable_batch(tmp_path: Path) -> None:
    import json

    from spark_app.bluegreen.trail import SinkQuery, Trailer
    from spark_app.contract.blue_green import trail_rel
    from spark_app.contract.storage import open_location

    blue_ckpt = tmp_path / "blue" / "attributed"
    (blue_ckpt / "offsets").mkdir(parents=True)
    (blue_ckpt / "commits").mkdir()
    green = open_location(str(tmp_path / "green"))
    trailer = Trailer({"attributed": SinkQuery(open_location(str(blue_ckpt)))}, green, ["plays"])
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


def test_each_look_says_whether_green_stands_where_blue_does(tmp_path: Path) -> None:
    import json

    from spark_app.bluegreen.trail import SinkQuery, Trailer
    from spark_app.contract.reports.blue_green import read_seam
    from spark_app.contract.storage import open_location

    meta = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})
    archive = '{"snapshot":3,"position":{"split":1,"row":0},"complete":true}'

    def batch(query: Path, n: int, *sources: str, done: bool = True) -> None:
        (query / "offsets").mkdir(parents=True, exist_ok=True)
        (query / "commits").mkdir(exist_ok=True)
        (query / "offsets" / str(n)).write_text("\n".join(["v1", meta, *sources]))
        if done:
            (query / "commits" / str(n)).write_text("v1\n{}")

    blue, green = tmp_path / "blue" / "plays", tmp_path / "green" / "plays"
    batch(blue, 4, '{"plays":{"0":20}}')
    batch(green, 9, archive, "-")  # still in its archive
    where = open_location(str(tmp_path / "green"))
    trailer = Trailer(
        {"plays": SinkQuery(open_location(str(blue)))},
        where,
        ["plays"],
        green_queries={"plays": SinkQuery(open_location(str(green)))},
    )
    assert read_seam(where) is None
    trailer.once()
    first = read_seam(where)
    assert first is not None and not first.all_at_seam()
    assert (first.sinks["plays"].blue_batch, first.sinks["plays"].green_batch) == (4, 9)
    batch(green, 10, archive, '{"plays":{"0":20}}', done=False)  # offsets only: may run again
    trailer.once()
    seam = read_seam(where)
    assert seam is not None and not seam.all_at_seam()
    (green / "commits" / "10").write_text("v1\n{}")
    trailer.once()
    seam = read_seam(where)
    assert seam is not None and seam.all_at_seam() and seam.at >= first.at
