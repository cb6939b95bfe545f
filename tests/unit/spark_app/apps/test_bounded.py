"""What ``alignment.mode: bounded`` accepts (pure): the operators whose batch result is the
streaming one, and those it refuses by name; and what a bounded JobConfig may not ask for."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from spark_app.apps.bounded import BoundedState
from spark_app.apps.mode_choice import (
    ARRIVAL_COLUMN,
    LateArrivals,
    LatenessProbe,
    LateRowsFound,
    Proof,
    choose,
    late_bound,
)
from spark_app.apps.query_shape import Closing, WatermarkInput, end_column, joins, refusal
from spark_app.contract.alignment import ModeChoice
from spark_app.contract.config import parse_config
from spark_app.contract.errors import ConfigError

RANGE_JOIN = """Project [playback_id#1, impression_id#2]
+- Join Inner, ((profile_id#3 = profile_id#4) AND (impression_ts#5 <= playback_ts#6))
   :- EventTimeWatermark impression_ts#5: 30 minutes
   :  +- StreamingRelationV2 dev.kappa.source.KappaSource
   +- EventTimeWatermark playback_ts#6: 30 minutes
      +- StreamingRelationV2 dev.kappa.source.KappaSource"""


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        ("Aggregate [window#7], [window#7.start AS window_start#8, count(1) AS plays#9]", "aggregation"),
        ("Aggregate [session_window#7], [count(1)]\n+- SessionWindow", "aggregation"),
        ("DeduplicateWithinWatermark [playback_id#1]", "dropDuplicatesWithinWatermark"),
        ("Deduplicate [playback_id#1]", "dropDuplicates"),
        ("FlatMapGroupsInPandasWithState changes(key#1)", "arbitrary state"),
        ("Project [current_timestamp() AS now#1]", "processing-time"),
        (RANGE_JOIN.replace("Join Inner", "Join LeftOuter"), "LeftOuter join"),
    ],
)
def test_operators_whose_results_wait_for_the_watermark_are_refused_by_name(plan: str, named: str) -> None:
    said = refusal({"out": RANGE_JOIN, "other": plan})
    assert said is not None and said.startswith("sink other's pipeline has") and named in said, said


def test_stateless_steps_and_inner_joins_are_accepted() -> None:
    assert refusal({"out": RANGE_JOIN, "copy": "Project [a#1]\n+- Filter (b#2 > 0)"}) is None


LOOKUP = """Project [impression_id#1, campaign#9, cpm#10]
+- Join LeftOuter, ((title_id#2 = title_id#8) AND (event_ts#3 >= valid_from#11))
   :- Project [impression_id#1, title_id#2, event_ts#3]
   :  +- StreamingRelationV2 dev.kappa.source.KappaSource
   +- Project [title_id#8, campaign#9, cpm#10, valid_from#11]
      +- Join Inner, (title_id#8 = title_id#12)
         :- LocalRelation [title_id#8, campaign#9, cpm#10, valid_from#11]
         +- Relation [title_id#12] parquet"""


def test_an_outer_join_with_a_static_frame_is_accepted_and_one_of_two_streams_refused() -> None:
    """A lookup (stream LEFT OUTER JOIN a static frame of versions) emits every row as it
    arrives, as the batch join does; an outer join of two streams waits for the watermark."""
    assert joins(LOOKUP) == [("LeftOuter", False), ("Inner", False)]
    assert refusal({"priced": LOOKUP}) is None
    nested = "Project [a#1]\n+- Filter (a#1 > 0)\n   +- " + RANGE_JOIN.replace("Join Inner", "Join LeftOuter").replace(
        "\n", "\n      "
    )
    assert joins(nested) == [("LeftOuter", True)]
    said = refusal({"out": nested})
    assert said is not None and "LeftOuter join of two streams" in said


def test_the_fixed_snapshots_and_query_ids_read_back_as_written() -> None:
    state = BoundedState({"impressions": 7, "playbacks": 8}, {"out": "a-uuid"})
    assert BoundedState.from_json(state.to_json()) == state


def config(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "bf",
        "pipeline": "spark_app.examples.rmi:pipeline",
        "mode": "backfill",
        "window": {"start": "2026-11-01T12:00:00Z", "end": "2026-11-01T13:00:00Z"},
        "catalogs": {"default": {"type": "sql", "uri": "sqlite:///x.db", "warehouse": "file:///w"}},
        "sources": {"plays": {"kind": "icebergBackfill", "table": "ingest.plays"}},
        "sinks": {"out": {"kind": "iceberg", "table": "marts.out"}},
        "checkpoint": {"location": "/tmp/ckpt"},
        "alignment": {"mode": "bounded"},
    }
    base.update(changes)
    return base


def test_a_bounded_config_names_what_it_cannot_do() -> None:
    assert parse_config(config()).alignment.mode == "bounded" and not parse_config(config()).alignment.coordinated
    with pytest.raises(ConfigError, match="readRate cannot cap a bounded run"):
        parse_config(config(readRate={"maxBytesPerSecond": 1000}))
    with pytest.raises(ConfigError, match=r"sinks\.out is console: a bounded run writes Iceberg sinks"):
        parse_config(config(sinks={"out": {"kind": "console"}}))
    assert parse_config(config()).round_budget == 0


# --- alignment.mode: auto, the choice and its reasons (one test per reason) -------------------

SESSIONS = "Aggregate [session_window#7], [count(1)]\n+- SessionWindow"
LATE = [LateArrivals("playbacks", 12, timedelta(minutes=45))]


def auto(**changes: Any) -> Any:
    alignment = {"mode": "auto", **changes.pop("alignment", {})}
    return parse_config(config(alignment=alignment, **changes))


def test_auto_is_the_default_and_is_coordinated_until_it_has_chosen() -> None:
    cfg = parse_config(config(alignment={}))
    assert cfg.alignment.mode == "auto" and cfg.alignment.coordinated


def test_auto_runs_bounded_when_every_operator_is_the_same_and_no_row_came_late() -> None:
    chosen = choose(auto(), {"out": RANGE_JOIN}, [], [])
    assert (chosen.requested, chosen.mode) == ("auto", "bounded")
    assert "no row arrived behind the live watermark" in chosen.reason, chosen.reason


def test_auto_runs_bounded_and_says_so_when_a_source_cannot_tell_late_arrivals() -> None:
    chosen = choose(auto(), {"out": RANGE_JOIN}, [], ["plays"])
    assert chosen.mode == "bounded" and f"plays has no {ARRIVAL_COLUMN}" in chosen.reason, chosen.reason


@pytest.mark.parametrize(
    ("plan", "named"),
    [
        (SESSIONS, "aggregation"),
        ("FlatMapGroupsInPandasWithState changes(key#1)", "arbitrary state"),
        ("Project [current_timestamp() AS now#1]", "processing-time function"),
        (RANGE_JOIN.replace("Join Inner", "Join LeftOuter"), "LeftOuter join"),
        ("DeduplicateWithinWatermark [playback_id#1]", "dropDuplicatesWithinWatermark"),
    ],
)
def test_auto_falls_back_to_aligned_naming_the_operator(plan: str, named: str) -> None:
    chosen = choose(auto(), {"out": plan}, [], [])
    assert chosen.mode == "aligned" and chosen.reason.startswith("not bounded: sink out's pipeline has"), chosen
    assert named in chosen.reason, chosen.reason


def test_auto_falls_back_to_aligned_when_rows_arrived_behind_the_live_watermark() -> None:
    chosen = choose(auto(), {"out": RANGE_JOIN}, LATE, [])
    assert chosen.mode == "aligned", chosen
    assert "12 row(s) arrived behind the live watermark (source playbacks: ingestion up to 45m" in chosen.reason


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"readRate": {"maxBytesPerSecond": 1000}}, "readRate caps a streaming read"),
        ({"alignment": {"allowLateDrops": True}}, "allowLateDrops"),
        ({"sinks": {"out": {"kind": "console"}}}, "sink out is console"),
        ({"sinks": {"out": {"kind": "parquet", "path": "/o", "outputMode": "update"}}}, "outputMode update"),
    ],
)
def test_auto_falls_back_to_aligned_for_what_the_spec_asks_of_a_streaming_run(
    changes: dict[str, Any], said: str
) -> None:
    chosen = choose(auto(**changes), {"out": RANGE_JOIN}, [], [])
    assert chosen.mode == "aligned" and said in chosen.reason, chosen


@pytest.mark.parametrize("mode", ["aligned", "strict", "unordered", "bounded"])
def test_an_explicit_mode_is_obeyed_whatever_the_plan(mode: str) -> None:
    chosen = choose(parse_config(config(alignment={"mode": mode})), {"out": SESSIONS}, LATE, [])
    assert (chosen.requested, chosen.mode, chosen.reason) == (mode, mode, "set in the spec (alignment.mode)")


def test_the_choice_reads_back_as_written() -> None:
    chosen = ModeChoice("auto", "aligned", "not bounded: x")
    assert ModeChoice.from_json(chosen.to_json()) == chosen
    assert b"proving" not in chosen.to_json(), "a choice with nothing left to prove is written as before"
    pending = ModeChoice("auto", "bounded", "every operator ...", ("impressions", "playbacks"))
    assert ModeChoice.from_json(pending.to_json()) == pending


class Observed:
    def __init__(self, metrics: dict[str, Any] | None) -> None:
        self.get = metrics


@pytest.mark.parametrize(
    "metrics",
    [
        None,  # nothing observed: no row read
        {"rows": 0, "worst_lag_us": None, "worst_lead_us": None},
        # 20 min late at the worst, 5 min ahead at the worst: 20 + 5 <= 30, every row kept live
        {"rows": 9, "worst_lag_us": 1_200_000_000, "worst_lead_us": 300_000_000},
        # no event ahead of its arrival (lead negative): the bound is the delay itself
        {"rows": 9, "worst_lag_us": 1_800_000_000, "worst_lead_us": -60_000_000},
    ],
)
def test_the_writes_proof_passes_on_observed_maxima_within_the_delay(metrics: dict[str, Any] | None) -> None:
    proof = Proof({"plays": LatenessProbe("plays", "event_ts", 1_800_000_000)})
    proof.check({"plays": None}, {"plays": Observed(metrics)})  # no frame needed: nothing to count


def test_the_writes_proof_counts_the_late_rows_and_refuses_bounded_naming_them() -> None:
    class Frame:
        def where(self, condition: Any) -> Frame:
            return self

        def count(self) -> int:
            return 7

    class Probe(LatenessProbe):
        def lag(self) -> Any:  # the column needs a session; the count is the frame's
            return 0

    proof = Proof({"plays": Probe("plays", "event_ts", 1_800_000_000)})
    observed = {"rows": 9, "worst_lag_us": 2_400_000_000, "worst_lead_us": 0}
    with pytest.raises(LateRowsFound) as found:
        proof.check({"plays": Frame()}, {"plays": Observed(observed)})
    choice = found.value.choice
    assert (choice.requested, choice.mode) == ("auto", "aligned")
    assert "7 row(s) arrived behind the live watermark (source plays: ingestion up to 40m" in choice.reason


@pytest.mark.parametrize(
    ("spans", "clean"),
    [
        ([], True),
        # arrived within 10 minutes of event time, no event after its arrival: within a 30m delay
        ([(0, 60, 0, 600)], True),
        # a file whose newest arrival is 40 min after its oldest event: statistics cannot clear it
        ([(0, 60, 0, 600), (0, 2400, 0, 2400)], False),
        # 25 min late, but events up to 10 min ahead of their arrival (skewed clocks) push live's
        # watermark further: 25 + 10 > 30
        ([(0, 1500, 0, 1500), (2000, 2600, 2000, 2000)], False),
    ],
)
def test_file_statistics_clear_a_window_of_late_arrivals_only_when_they_prove_it(
    spans: list[tuple[int, int, int, int]], clean: bool
) -> None:
    seconds = [tuple(x * 1_000_000 for x in s) for s in spans]
    assert late_bound(seconds, 30 * 60 * 1_000_000) is clean  # type: ignore[arg-type]


# --- windows and sessions: the aligned run's open/written rule in one batch -------------------

WINDOWS = """~Project [w#6-T1800000ms.start AS window_start#17, w#6-T1800000ms.end AS window_end#18, plays#7L]
+- Aggregate [window#16, title_id#1L], [window#16 AS w#6, title_id#1L, count(1) AS plays#7L]
   +- EventTimeWatermark 3c1a, event_ts#5: timestamp, 30 minutes"""


def test_a_windowed_aggregation_with_its_end_in_the_output_is_accepted_and_its_end_found() -> None:
    assert refusal({"out": WINDOWS}) is None and end_column(WINDOWS) == "window_end"
    chained = WINDOWS.replace("+- EventTimeWatermark", "+- Aggregate [x#1], [x#1]\n+- EventTimeWatermark")
    assert "2 aggregations chained" in (refusal({"out": chained}) or "")


def test_the_final_watermark_is_the_least_over_the_operators_that_saw_rows_in_milliseconds() -> None:
    close = Closing(
        "window_end", (WatermarkInput("plays", "event_ts", 1_800_000), WatermarkInput("views", "view_ts", 600_000))
    )
    hour = 3_600_000_000
    # plays: newest 10:00:00.000999 -> 09:30:00.000 (ms: the µs below a ms are dropped)
    assert close.final_watermark_us({("plays", "event_ts"): 10 * hour + 999, ("views", "view_ts"): 11 * hour}) == (
        9 * hour + hour // 2
    )
    assert close.final_watermark_us({("plays", "event_ts"): None, ("views", "view_ts"): 11 * hour}) == (
        11 * hour - 600_000_000
    ), "an operator with no rows does not hold the watermark"
    assert close.final_watermark_us({}) is None
