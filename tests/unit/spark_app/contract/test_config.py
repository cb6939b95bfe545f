"""JobConfig: loading, defaults, and the quality of every error message (pure Python)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_app.contract.base import parse_timestamp
from spark_app.contract.config import (
    AlignmentConfig,
    JobConfig,
    TriggerConfig,
    load_config,
    parse_config,
)
from spark_app.contract.durations import format_duration, parse_duration
from spark_app.contract.errors import ConfigError
from spark_app.contract.sources import IcebergBackfillSource, IcebergLiveSource, KafkaSource
from tests.unit.job_configs import BACKFILL, LIVE, variant


def config_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data, origin="job.json")
    msg = str(info.value)
    assert msg.startswith("invalid job config job.json:"), msg
    return msg


# --- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("90s", timedelta(seconds=90)),
        ("26h", timedelta(days=1, hours=2)),
        ("250ms", timedelta(milliseconds=250)),
        ("1m30s500ms", timedelta(minutes=1, seconds=30, milliseconds=500)),
        ("1.5h", timedelta(minutes=90)),
        ("0.25s", timedelta(milliseconds=250)),
        ("0s", timedelta(0)),
        (timedelta(minutes=3), timedelta(minutes=3)),
    ],
)
def test_parse_duration_accepts(text: Any, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("bad", "hint"),
    [
        ("", ""),
        ("10", "a bare number has no unit"),
        (90, "a bare number has no unit"),
        (0.25, "a bare number has no unit"),
        ("10 minutes", ""),
        ("m10", ""),
        ("10x", ""),
        ("1h 30m", "no spaces"),
        (" 10m ", "no spaces"),
        ("10M", "units are lowercase"),
        ("1d2h", "no unit d: write 24h for a day"),
        ("PT10M", "ISO 8601 is not read: write 10m"),
        ("P1DT2H", "ISO 8601 is not read: write 26h"),
        ("P", ""),
        ("PT", ""),
        ("-5m", "a duration has no sign"),
        ("0.0001ms", "whole milliseconds"),
        ("ten", ""),
        (True, ""),
        (None, ""),
        ([], ""),
    ],
)
def test_parse_duration_rejects_with_hint(bad: Any, hint: str) -> None:
    with pytest.raises(
        ValueError, match=r"^expected a duration such as 90s, 10m, 1h30m \(units ms, s, m, h\), got "
    ) as e:
        parse_duration(bad)
    assert hint in str(e.value)


def test_parse_duration_bounds() -> None:
    assert parse_duration("87600h") == timedelta(hours=87600)
    with pytest.raises(ValueError, match=r"must be at most 87600h \(10 years\), got '87600h1ms'"):
        parse_duration("87600h1ms")
    with pytest.raises(ValueError, match="of at most 32 characters"):
        parse_duration("1m" + "0s" * 16)


@pytest.mark.parametrize(
    ("td", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(seconds=45), "45s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=1, seconds=1), "24h1s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(milliseconds=250), "0.25s"),
        (timedelta(minutes=1, milliseconds=5), "1m0.005s"),
    ],
)
def test_format_duration_short_form(td: timedelta, text: str) -> None:
    assert format_duration(td) == text
    assert parse_duration(text) == td


@given(st.integers(min_value=0, max_value=400 * 86400 * 1000))
def test_format_duration_round_trips_at_millisecond_resolution(ms: int) -> None:
    td = timedelta(milliseconds=ms)
    assert parse_duration(format_duration(td)) == td


@pytest.mark.parametrize(
    ("td", "text"),
    [(timedelta(microseconds=1), "0.001s"), (timedelta(seconds=1, microseconds=234567), "1.235s")],
    ids=["1us", "1.234567s"],
)
def test_format_duration_rounds_up_below_a_millisecond(td: timedelta, text: str) -> None:
    """The grammar's resolution is a millisecond: a finer timedelta (only ever built in Python)
    prints as the next millisecond up, still parsable, and never understating a bound."""
    assert format_duration(td) == text
    assert parse_duration(text) >= td


# --- timestamps --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-01T10:00:00Z", datetime(2026, 11, 1, 10, tzinfo=UTC)),
        ("2026-11-01T12:00:00+02:00", datetime(2026, 11, 1, 10, tzinfo=UTC)),
        ("2026-11-01T05:30:00-04:30", datetime(2026, 11, 1, 10, tzinfo=UTC)),
        ("2026-11-01T10:00:00", datetime(2026, 11, 1, 10, tzinfo=UTC)),
        ("2026-11-01T10:00:00.123456Z", datetime(2026, 11, 1, 10, 0, 0, 123456, tzinfo=UTC)),
        (datetime(2026, 11, 1, 10), datetime(2026, 11, 1, 10, tzinfo=UTC)),
    ],
)
def test_parse_timestamp(text: Any, expected: datetime) -> None:
    got = parse_timestamp(text)
    assert got == expected
    assert got.utcoffset() == timedelta(0)
    assert got.tzinfo is UTC


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00Z", "", 1700000000, None])
def test_parse_timestamp_rejects_with_example(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"ISO 8601 timestamp such as '2026-11-01T10:00:00Z'"):
        parse_timestamp(bad)


# --- valid configs and defaults --------------------------------------------------------


def test_minimal_backfill_defaults() -> None:
    cfg = parse_config(copy.deepcopy(BACKFILL))
    assert cfg.mode == "backfill"
    assert cfg.effective_trigger == TriggerConfig(kind="availableNow")
    assert cfg.alignment_group == "rides-backfill"
    assert cfg.ordering_column("rides") == "event_ts"
    assert cfg.alignment.mode == "auto"
    assert cfg.alignment.max_drift == timedelta(minutes=10)
    assert cfg.alignment.effective_drift == timedelta(minutes=10)
    assert cfg.window is not None
    assert cfg.window.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert cfg.window.read_start == cfg.window.start
    src = cfg.sources["rides"]
    assert isinstance(src, IcebergBackfillSource)
    assert src.catalog == "default"
    assert src.split.target_bytes == 128 * 1024 * 1024
    assert src.split.max_bundle_span == timedelta(minutes=5)


def test_live_defaults_trigger_processing_time_10s() -> None:
    cfg = parse_config(copy.deepcopy(LIVE))
    assert cfg.effective_trigger.kind == "processingTime"
    assert cfg.effective_trigger.interval == timedelta(seconds=10)
    src = cfg.sources["rides"]
    assert isinstance(src, IcebergLiveSource)
    assert src.on_non_append == "fail"
    assert src.starting_position is None


def test_explicit_trigger_group_and_strict_drift() -> None:
    d = variant(
        LIVE,
        trigger={"kind": "processingTime", "interval": "2s"},
        alignment={"group": "g1", "mode": "strict", "maxDrift": "1h"},
    )
    cfg = parse_config(d)
    assert cfg.effective_trigger == TriggerConfig(kind="processingTime", interval=timedelta(seconds=2))
    assert cfg.alignment_group == "g1"
    assert cfg.alignment.max_drift == timedelta(hours=1)
    assert cfg.alignment.effective_drift == timedelta(0)


def test_ordering_column_override_per_source() -> None:
    d = variant(
        BACKFILL,
        alignment={"orderingColumn": "__metadata__.ingestion_ts"},
        sources={
            "rides": {"kind": "icebergBackfill", "table": "db.rides", "orderingColumn": "pickup_ts"},
            "fares": {"kind": "icebergBackfill", "table": "db.fares"},
        },
    )
    cfg = parse_config(d)
    assert cfg.ordering_column("rides") == "pickup_ts"
    assert cfg.ordering_column("fares") == "__metadata__.ingestion_ts"


def test_kafka_source_uses_alignment_ordering_column() -> None:
    d = variant(LIVE)
    d["sources"]["k"] = {"kind": "kafka", "bootstrapServers": "b:9092", "topic": "t", "schemaDdl": "a INT"}
    cfg = parse_config(d)
    assert isinstance(cfg.sources["k"], KafkaSource)
    assert cfg.ordering_column("k") == "event_ts"


def test_durations_in_config_fields_accept_all_forms() -> None:
    for raw, expected in [("10m", 600), ("1h30m", 5400), ("600s", 600), ("90s", 90), ("0.025h", 90)]:
        d = variant(BACKFILL, alignment={"maxDrift": raw})
        d["window"]["warmup"] = raw
        cfg = parse_config(d)
        assert cfg.alignment.max_drift == timedelta(seconds=expected)
        assert cfg.window is not None
        assert cfg.window.warmup == timedelta(seconds=expected)
        assert cfg.window.read_start == cfg.window.start - timedelta(seconds=expected)


def test_window_timestamps_offset_and_naive() -> None:
    d = variant(BACKFILL, window={"start": "2026-11-01T02:00:00+02:00", "end": "2026-11-01T06:00:00"})
    cfg = parse_config(d)
    assert cfg.window is not None
    assert cfg.window.start == datetime(2026, 11, 1, 0, tzinfo=UTC)
    assert cfg.window.end == datetime(2026, 11, 1, 6, tzinfo=UTC)


def test_snake_case_names_are_accepted_too() -> None:
    d = variant(BACKFILL, alignment={"max_drift": "3m", "ordering_column": "ts"})
    cfg = parse_config(d)
    assert cfg.alignment.max_drift == timedelta(minutes=3)
    assert cfg.ordering_column("rides") == "ts"


def test_config_is_frozen() -> None:
    cfg = parse_config(copy.deepcopy(BACKFILL))
    with pytest.raises(Exception, match="frozen"):
        cfg.name = "other"  # type: ignore[misc]


def test_catalog_properties_are_strings() -> None:
    d = variant(BACKFILL)
    d["catalogs"]["default"]["pool_size"] = 5
    cfg = parse_config(d)
    props = cfg.catalogs["default"].properties()
    assert props == {"type": "sql", "uri": "sqlite:///cat.db", "warehouse": "file:///wh", "pool_size": "5"}


# --- round trip ------------------------------------------------------------------------


def rich_live() -> dict[str, Any]:
    return {
        "name": "rides-live",
        "pipeline": "pkg.pipelines.rides:build",
        "mode": "live",
        "catalogs": {"default": {"type": "sql", "uri": "sqlite:///c.db"}, "prod": {"type": "rest"}},
        "sources": {
            "rides": {
                "kind": "icebergLive",
                "catalog": "prod",
                "table": "db.rides",
                "columns": ["id", "event_ts"],
                "filter": "country = 'US' and duration_s > 0",
                "startingTimestamp": "2026-11-01T12:00:00+02:00",
                "onNonAppend": "skip",
                "split": {"targetBytes": 1000, "openFileCost": 10, "maxBundleSpan": "90s"},
                "readLimit": {"maxFiles": 5, "maxSnapshots": 1},
            },
            "clicks": {
                "kind": "kafka",
                "bootstrapServers": "k:9092",
                "topic": "clicks",
                "schemaFrom": "default:db.clicks",
                "options": {"startingOffsets": "earliest"},
            },
        },
        "sinks": {
            "p": {"kind": "parquet", "path": "/out", "partitionBy": ["day"], "timeColumn": "ts"},
            "c": {"kind": "console", "outputMode": "update"},
        },
        "checkpoint": {"location": "s3://b/ck"},
        "trigger": {"kind": "processingTime", "interval": "5s"},
        "alignment": {"group": "g", "maxDrift": "1h30m", "lateness": "2h", "allowLateDrops": True},
        "coordinator": {"url": "http://coord:8080", "token": "t", "timeout": "30s"},
        "sparkConf": {"spark.sql.shuffle.partitions": "4"},
        "master": "local[2]",
        "tracePath": "/tmp/trace.jsonl",
    }


def rich_backfill() -> dict[str, Any]:
    d = variant(BACKFILL, trigger={"kind": "availableNow"})
    d["window"] = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00.5Z", "warmup": "1h"}
    d["sources"]["rides"].update(snapshotId=123456789012345678, readLimit={"maxBytes": 10, "maxRows": 3})
    d["alignment"] = {"mode": "unordered", "stateDir": "/tmp/s", "maxDrift": "0.5s"}
    return d


@pytest.mark.parametrize("make", [rich_live, rich_backfill, lambda: copy.deepcopy(BACKFILL)])
def test_to_json_round_trip(make: Any) -> None:
    cfg = parse_config(make())
    text = cfg.to_json()
    wire = json.loads(text)
    # camelCase on the wire, no nulls
    assert "null" not in text
    assert not [k for k in wire if "_" in k]
    again = parse_config(wire)
    assert again == cfg
    assert again.to_json() == text


def test_round_trip_keeps_converted_timestamp() -> None:
    cfg = parse_config(rich_live())
    wire = json.loads(cfg.to_json())
    assert wire["sources"]["rides"]["startingTimestamp"] == "2026-11-01T10:00:00Z"
    assert wire["alignment"]["maxDrift"] == "1h30m"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("alignment", "lateness"), -300),
        (("trigger", "interval"), -10),
    ],
)
def test_negative_durations_are_rejected(path: tuple[str, str], value: int) -> None:
    # BUG (config.py AlignmentConfig.lateness, TriggerConfig.interval; also
    # SplitConfig.maxBundleSpan, CoordinatorConfig.timeout): a negative number of seconds is
    # accepted, and to_json() then writes e.g. '-1d23h55m', which parse_config rejects, so
    # the config does not even survive its own round trip.
    d = rich_live()
    d.setdefault(path[0], {})[path[1]] = value
    msg = config_error(d)
    assert f"{path[0]}.{path[1]}" in msg


# --- every bad config names the field and what is allowed --------------------------------


def test_unknown_top_level_field() -> None:
    msg = config_error(variant(BACKFILL, alignmnet={}))
    assert "alignmnet: unknown field (check the spelling; fields are camelCase)" in msg


def test_unknown_nested_field() -> None:
    msg = config_error(variant(BACKFILL, alignment={"maxDrfit": "1m"}))
    assert "alignment.maxDrfit: unknown field" in msg
    assert "camelCase" in msg


def test_snake_case_typo_in_window_is_unknown() -> None:
    d = variant(BACKFILL)
    d["window"]["warm_up"] = "1h"
    msg = config_error(d)
    assert "window.warm_up: unknown field" in msg


def test_unknown_field_in_source_is_reported() -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["tabel"] = "db.x"
    msg = config_error(d)
    assert "sources.rides" in msg
    assert "tabel: unknown field" in msg


def test_unknown_field_in_source_path_has_no_union_tag() -> None:
    # BUG (config.py _format_errors): the discriminator tag is part of pydantic's loc, so the
    # path reads 'sources.rides.icebergBackfill.tabel', a key that does not exist in the
    # user's file (it strips 'function-...' parts but not the union tag).
    d = variant(BACKFILL)
    d["sources"]["rides"]["tabel"] = "db.x"
    msg = config_error(d)
    assert "  sources.rides.tabel: unknown field" in msg


def test_bad_mode_lists_allowed() -> None:
    msg = config_error(variant(BACKFILL, mode="fast"))
    assert "mode: allowed: 'live' or 'backfill'" in msg


def test_bad_alignment_mode_lists_allowed() -> None:
    msg = config_error(variant(BACKFILL, alignment={"mode": "loose"}))
    assert "alignment.mode: allowed: 'auto', 'aligned', 'strict', 'unordered' or 'bounded'" in msg


def test_bad_source_kind_lists_allowed() -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["kind"] = "iceberg"
    msg = config_error(d)
    assert "sources.rides" in msg
    for tag in ("icebergLive", "icebergBackfill", "kafka"):
        assert tag in msg


def test_backfill_without_window() -> None:
    msg = config_error(variant(BACKFILL, window=...))
    assert "mode backfill needs a window" in msg
    assert "{start, end[, warmup]}" in msg


def test_window_in_live_mode() -> None:
    msg = config_error(variant(LIVE, window=BACKFILL["window"]))
    assert "window is only meaningful with mode: backfill" in msg


@pytest.mark.parametrize("end", ["2026-11-01T00:00:00Z", "2026-10-31T23:59:59Z", "2026-11-01T01:00:00+01:00"])
def test_window_end_not_after_start(end: str) -> None:
    d = variant(BACKFILL)
    d["window"]["end"] = end
    msg = config_error(d)
    assert "window: end (" in msg
    assert "must be after start (2026-11-01T00:00:00+00:00)" in msg


def test_negative_warmup() -> None:
    d = variant(BACKFILL)
    d["window"]["warmup"] = "-60s"
    msg = config_error(d)
    assert "window.warmup: expected a duration such as 90s, 10m, 1h30m" in msg
    assert "(a duration has no sign)" in msg


def test_negative_timedelta_built_in_python() -> None:
    with pytest.raises(ValueError, match="must not be negative, got '-1m'"):
        TriggerConfig(kind="processingTime", interval=timedelta(minutes=-1))


@pytest.mark.parametrize("drift", ["0s", "0h0m0.000s", timedelta(0)])
def test_max_drift_must_be_positive(drift: Any) -> None:
    msg = config_error(variant(BACKFILL, alignment={"maxDrift": drift}))
    assert "alignment.maxDrift: must be > 0, got" in msg
    assert "(use mode: strict for no drift)" in msg


@pytest.mark.parametrize("drift", [0, "-5m", "PT0S"])
def test_max_drift_not_a_duration(drift: Any) -> None:
    msg = config_error(variant(BACKFILL, alignment={"maxDrift": drift}))
    assert "alignment.maxDrift: expected a duration such as 90s, 10m, 1h30m" in msg


def test_bad_duration_string() -> None:
    msg = config_error(variant(BACKFILL, alignment={"maxDrift": "10 minutes"}))
    assert "alignment.maxDrift: expected a duration such as 90s, 10m, 1h30m (units ms, s, m, h)" in msg
    assert "got '10 minutes'" in msg


def test_bad_duration_in_split_settings() -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["split"] = {"maxBundleSpan": "five minutes"}
    msg = config_error(d)
    assert "split.maxBundleSpan: expected a duration" in msg


def test_bad_timestamp() -> None:
    d = variant(BACKFILL)
    d["window"]["start"] = "yesterday"
    msg = config_error(d)
    assert "window.start: expected an ISO 8601 timestamp such as '2026-11-01T10:00:00Z', got 'yesterday'" in msg


def test_processing_time_trigger_on_backfill() -> None:
    msg = config_error(variant(BACKFILL, trigger={"kind": "processingTime"}))
    assert "trigger.kind must be availableNow" in msg
    assert "backfill ends by itself" in msg


def test_bad_trigger_kind() -> None:
    msg = config_error(variant(LIVE, trigger={"kind": "once"}))
    assert "trigger.kind: allowed: 'processingTime' or 'availableNow'" in msg


@pytest.mark.parametrize(
    "src",
    [
        {"kind": "icebergLive", "table": "db.rides"},
        {"kind": "kafka", "bootstrapServers": "b:9092", "topic": "t", "schemaDdl": "a INT"},
    ],
)
def test_live_source_kind_in_backfill(src: dict[str, Any]) -> None:
    d = variant(BACKFILL)
    d["sources"]["live"] = src
    msg = config_error(d)
    assert f"sources.live.kind is {src['kind']!r} but mode backfill reads history: use icebergBackfill" in msg


def test_iceberg_backfill_in_live_mode() -> None:
    d = variant(LIVE)
    d["sources"]["hist"] = {"kind": "icebergBackfill", "table": "db.rides"}
    msg = config_error(d)
    assert "sources.hist.kind icebergBackfill needs mode: backfill" in msg


def test_source_catalog_not_in_catalogs() -> None:
    d = variant(BACKFILL)
    d["catalogs"]["aux"] = {"type": "rest"}
    d["sources"]["rides"]["catalog"] = "prod"
    msg = config_error(d)
    assert "sources.rides.catalog 'prod' is not in catalogs (aux, default)" in msg


def test_default_catalog_missing_says_none_defined() -> None:
    msg = config_error(variant(BACKFILL, catalogs={}))
    assert "sources.rides.catalog 'default' is not in catalogs (none defined)" in msg


@pytest.mark.parametrize("flt", ["country = = 'US'", "and and", "x >"])
def test_unparsable_filter(flt: str) -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["filter"] = flt
    msg = config_error(d)
    assert "sources.rides" in msg
    assert "filter: cannot parse filter" in msg
    assert repr(flt) in msg


def test_parsable_filter_accepted() -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["filter"] = "country = 'US' and duration_s > 0"
    assert parse_config(d).sources["rides"].filter == "country = 'US' and duration_s > 0"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "starts",
    [
        {"startingPosition": "earliest", "startingSnapshotId": 3},
        {"startingPosition": "latest", "startingTimestamp": "2026-11-01T00:00:00Z"},
        {"startingTimestamp": "2026-11-01T00:00:00Z", "startingSnapshotId": 3},
        {"startingPosition": "earliest", "startingTimestamp": "2026-11-01T00:00:00Z", "startingSnapshotId": 3},
    ],
)
def test_more_than_one_starting_position(starts: dict[str, Any]) -> None:
    d = variant(LIVE)
    d["sources"]["rides"].update(starts)
    msg = config_error(d)
    assert "sources.rides" in msg
    assert "give at most one of startingPosition, startingTimestamp, startingSnapshotId" in msg
    for key in starts:
        assert repr(key) in msg


@pytest.mark.parametrize(
    ("start", "parsed"),
    [
        ({"startingPosition": "earliest"}, ("earliest", None, None)),
        ({"startingSnapshotId": 7}, (None, None, 7)),
        ({"startingTimestamp": "2026-11-01"}, (None, datetime(2026, 11, 1, tzinfo=UTC), None)),
    ],
)
def test_one_starting_position_is_taken_as_given(start: dict[str, Any], parsed: tuple[Any, ...]) -> None:
    d = variant(LIVE)
    d["sources"]["rides"].update(start)
    src = parse_config(d).sources["rides"]
    assert (src.starting_position, src.starting_timestamp, src.starting_snapshot_id) == parsed  # type: ignore[union-attr]


def test_bad_starting_position_value() -> None:
    d = variant(LIVE)
    d["sources"]["rides"]["startingPosition"] = "middle"
    msg = config_error(d)
    assert "startingPosition: allowed: 'latest' or 'earliest'" in msg


@pytest.mark.parametrize(
    "schema",
    [{}, {"schemaFrom": "default:db.clicks", "schemaDdl": "a INT"}],
    ids=["neither", "both"],
)
def test_kafka_schema_exactly_one(schema: dict[str, Any]) -> None:
    d = variant(LIVE)
    d["sources"]["k"] = {"kind": "kafka", "bootstrapServers": "b:9092", "topic": "t", **schema}
    msg = config_error(d)
    assert "sources.k" in msg
    assert "give exactly one of schemaFrom (a history table) or schemaDdl" in msg


def test_bad_table_identifier() -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"]["table"] = "rides"
    msg = config_error(d)
    assert "table: String should match pattern" in msg


def test_bad_job_name_and_pipeline() -> None:
    msg = config_error(variant(BACKFILL, name="Rides_Backfill", pipeline="not an entry point"))
    assert "  name: String should match pattern" in msg
    assert "  pipeline: String should match pattern" in msg


def test_missing_required_fields_are_all_listed() -> None:
    msg = config_error({"name": "x", "mode": "live"})
    for field in ("pipeline", "sources", "sinks", "checkpoint"):
        assert f"  {field}: Field required" in msg


@pytest.mark.parametrize(
    ("section", "payload", "needle"),
    [
        ("readLimit", {"maxFiles": 0}, "readLimit.maxFiles: Input should be greater than 0"),
        ("split", {"targetBytes": 0}, "split.targetBytes: Input should be greater than 0"),
    ],
)
def test_numeric_limits(section: str, payload: dict[str, Any], needle: str) -> None:
    d = variant(BACKFILL)
    d["sources"]["rides"][section] = payload
    assert needle in config_error(d)


# --- files ------------------------------------------------------------------------------


def test_load_json_file(tmp_path: Any) -> None:
    p = tmp_path / "job.json"
    p.write_text(json.dumps(BACKFILL))
    assert load_config(p) == parse_config(copy.deepcopy(BACKFILL))
    assert load_config(str(p)) == parse_config(copy.deepcopy(BACKFILL))


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_load_yaml_file(tmp_path: Any, suffix: str) -> None:
    p = tmp_path / f"job{suffix}"
    p.write_text(
        """\
name: rides-backfill
pipeline: pkg.pipelines:build
mode: backfill
catalogs:
  default: {type: sql, uri: "sqlite:///cat.db", warehouse: "file:///wh"}
sources:
  rides:
    kind: icebergBackfill
    table: db.rides
    split: {maxBundleSpan: 90s}
sinks:
  out: {kind: console}
checkpoint: {location: /tmp/ck}
window:
  start: 2026-11-01T02:00:00+02:00   # unquoted: YAML makes it a datetime
  end: "2026-11-02T00:00:00Z"
  warmup: 1h
alignment:
  maxDrift: 1h30m
"""
    )
    cfg = load_config(p)
    assert cfg.window is not None
    assert cfg.window.start == datetime(2026, 11, 1, 0, tzinfo=UTC)
    assert cfg.window.warmup == timedelta(hours=1)
    assert cfg.alignment.max_drift == timedelta(hours=1, minutes=30)
    assert cfg.sources["rides"].split.max_bundle_span == timedelta(seconds=90)  # type: ignore[union-attr]


def test_load_yaml_error_has_file_and_field(tmp_path: Any) -> None:
    p = tmp_path / "job.yaml"
    p.write_text(json.dumps(variant(BACKFILL, mode="fast")))  # JSON is YAML
    with pytest.raises(ConfigError) as info:
        load_config(p)
    msg = str(info.value)
    assert f"invalid job config {p}:" in msg
    assert "mode: allowed: 'live' or 'backfill'" in msg


@pytest.mark.parametrize(("text", "kind"), [("- a\n- b\n", "list"), ("just a string\n", "str"), ("", "NoneType")])
def test_non_mapping_yaml(tmp_path: Any, text: str, kind: str) -> None:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=rf"job config .*job\.yaml must be a mapping at the top level, got {kind}"):
        load_config(p)


def test_non_mapping_json(tmp_path: Any) -> None:
    p = tmp_path / "job.json"
    p.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must be a mapping at the top level, got list"):
        load_config(p)


def test_invalid_json(tmp_path: Any) -> None:
    p = tmp_path / "job.json"
    p.write_text('{"name": "x",')
    with pytest.raises(ConfigError) as info:
        load_config(p)
    msg = str(info.value)
    assert f"job config {p} is not valid JSON" in msg
    assert "line 1" in msg


def test_invalid_yaml(tmp_path: Any) -> None:
    p = tmp_path / "job.yaml"
    p.write_text("name: [unclosed\nmode: live\n")
    with pytest.raises(ConfigError, match=r"job config .*job\.yaml is not valid YAML"):
        load_config(p)


def test_missing_file(tmp_path: Any) -> None:
    p = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert str(info.value) == f"cannot read job config {p}: No such file or directory"


def test_parse_config_returns_jobconfig_types() -> None:
    cfg = parse_config(rich_live())
    assert isinstance(cfg, JobConfig)
    assert isinstance(cfg.alignment, AlignmentConfig)
    assert isinstance(cfg.sources["clicks"], KafkaSource)
    assert cfg.sources["rides"].starting_timestamp == datetime(2026, 11, 1, 10, tzinfo=UTC)  # type: ignore[union-attr]
