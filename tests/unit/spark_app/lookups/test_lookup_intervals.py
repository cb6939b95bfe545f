"""Lookups as of event time, the pure parts: file validity intervals from a snapshot history,
the key and column rules of a lookup, and the per-key state of the streaming join."""

from __future__ import annotations

import pytest

from spark_app.contract.errors import ConfigError
from spark_app.lookups.as_of import added_columns, key_pairs
from spark_app.lookups.context import catalog_properties, job_catalogs
from spark_app.lookups.history import normalized_path
from spark_app.lookups.intervals import FileInterval, SnapshotFiles, file_intervals, history_start_ms
from spark_app.lookups.versioned import KeyState


def snap(sid: int, ms: int, *files: str) -> SnapshotFiles:
    return SnapshotFiles(sid, ms, frozenset(files))


def test_a_file_is_valid_from_the_commit_that_added_it_to_the_one_that_removed_it() -> None:
    # s1 writes a (every title); s2 overwrites two titles: a rewritten as b (the others), c added;
    # s3 appends d; s4 compacts b, c, d into e.
    history = [snap(1, 100, "a"), snap(2, 200, "b", "c"), snap(3, 300, "b", "c", "d"), snap(4, 400, "e")]
    assert file_intervals(history) == [
        FileInterval("a", 100, 200),
        FileInterval("b", 200, 400),
        FileInterval("c", 200, 400),
        FileInterval("d", 300, 400),
        FileInterval("e", 400, None),
    ]
    assert history_start_ms(history) == 100


def test_a_file_that_leaves_and_comes_back_gets_two_intervals_and_unchanged_snapshots_add_none() -> None:
    history = [snap(1, 100, "a"), snap(2, 150, "a"), snap(3, 200, "b"), snap(4, 300, "a", "b")]
    assert file_intervals(history) == [
        FileInterval("a", 100, 200),
        FileInterval("b", 200, None),
        FileInterval("a", 300, None),
    ]


def test_a_file_added_and_removed_in_the_same_millisecond_was_never_visible() -> None:
    assert file_intervals([snap(1, 100, "a"), snap(2, 100, "b")]) == [FileInterval("b", 100, None)]


def test_commit_times_going_backwards_are_refused_naming_both_snapshots() -> None:
    with pytest.raises(ConfigError, match="snapshot 2 was committed at 90 ms, before its parent 1"):
        file_intervals([snap(1, 100, "a"), snap(2, 90, "b")])


def test_an_empty_history_has_no_interval_and_no_start() -> None:
    assert file_intervals([]) == [] and history_start_ms([]) is None


def test_key_pairs_take_a_name_a_list_or_a_mapping_and_need_the_whole_key() -> None:
    assert key_pairs("title_id", ("title_id",)) == [("title_id", "title_id")]
    assert key_pairs({"tid": "title_id", "c": "country"}, ("country", "title_id")) == [
        ("tid", "title_id"),
        ("c", "country"),
    ]
    with pytest.raises(ConfigError, match="not the dimension's key"):
        key_pairs("title_id", ("title_id", "country"))


def test_added_columns_default_to_all_but_the_key_and_refuse_clashes_and_unknowns() -> None:
    dim = ["title_id", "campaign", "cpm"]
    assert added_columns(["impression_id", "title_id"], dim, ["title_id"], None) == ["campaign", "cpm"]
    with pytest.raises(ConfigError, match=r"\['cpm'\] are in the facts too"):
        added_columns(["title_id", "cpm"], dim, ["title_id"], None)
    with pytest.raises(ConfigError, match=r"no column\(s\) \['price'\]"):
        added_columns(["title_id"], dim, ["title_id"], ["price"])


def test_catalogs_come_from_the_running_job_or_the_caller() -> None:
    with pytest.raises(ConfigError, match="no job is running"):
        catalog_properties("default")
    assert catalog_properties("x", {"uri": "u"}) == {"uri": "u"}
    with job_catalogs({"default": {"type": "sql", "uri": "sqlite://"}}):
        assert catalog_properties("default") == {"type": "sql", "uri": "sqlite://"}
        with pytest.raises(ConfigError, match=r"'lake' is not among the job's catalogs \(default\)"):
            catalog_properties("lake")
    with pytest.raises(ConfigError, match="no job is running"):
        catalog_properties("default")


def test_a_fact_waits_for_the_watermark_and_gets_the_version_valid_at_its_time() -> None:
    ks = KeyState()
    ks.add_change(100, "v1")
    ks.add_fact(150, "f150")
    ks.add_fact(250, "f250")
    assert ks.release(140) == [] and ks.next_timeout_ms() == 0  # 150 µs is in ms 0
    ks.add_change(200, "v2")  # arrives after the fact at 250 but before the watermark passes it
    assert ks.release(260) == [("f150", "v1"), ("f250", "v2")]
    assert ks.versions == [(200, "v2")]  # v1 can serve no fact after the watermark
    assert ks.facts == [] and ks.next_timeout_ms() is None


def test_a_fact_before_every_version_gets_none_and_a_correction_of_the_same_time_wins() -> None:
    ks = KeyState()
    ks.add_fact(50, "early")
    ks.add_change(100, "v1")
    ks.add_change(100, "v1-corrected")
    ks.add_fact(100, "at")
    assert ks.release(100) == [("early", None), ("at", "v1-corrected")]


def test_the_state_survives_a_round_trip_and_asks_to_be_called_at_its_oldest_fact() -> None:
    ks = KeyState([(1_000, "v")], [(5_000_500, "f")])
    back = KeyState.load(ks.dump())
    assert back.versions == [(1_000, "v")] and back.facts == [(5_000_500, "f")]
    assert back.next_timeout_ms() == 5_000


def test_file_paths_are_compared_as_spark_reports_them() -> None:
    """Iceberg writes ``file:///x``, Spark reports ``file:/x`` and quotes what a URI may not hold:
    both sides are reduced to the path after the scheme, quoted the same way."""
    assert normalized_path("file:///tmp/data dir/x%1.parquet") == "tmp/data%20dir/x%251.parquet"
    assert normalized_path("s3://lake/dims/data/00000-0-a.parquet") == "lake/dims/data/00000-0-a.parquet"
    assert normalized_path("/tmp/wh/x.parquet") == "tmp/wh/x.parquet"
    assert normalized_path("file:/tmp/é.parquet") == "tmp/é.parquet"
