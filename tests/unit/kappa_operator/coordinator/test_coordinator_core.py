"""The coordinator's pure core: holding, finishing, regression, idleness, re-declaration, and
simulated alignment groups (any interleaving of members) that must finish within the drift."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kappa_operator.coordinator.core import (
    Accepted,
    Answer,
    Coordinator,
    GroupState,
    MemberState,
    apply_report,
    declare,
    lag_us,
    refresh,
    view,
)
from kappa_operator.coordinator.messages import (
    CoordinatorError,
    GroupSpec,
    Report,
    UnknownGroupError,
    UnknownMemberError,
    WatermarkRegressionError,
)
from spark_app.contract.alignment import HELD, global_view
from spark_app.planning.admission import Limits, admit, source_watermark
from spark_app.planning.splits import FilePiece, Split

A, B, C = "job/sink/a", "job/sink/b", "job/sink/c"


def spec(members: tuple[str, ...] = (A, B), drift: int = 10, **kw: object) -> GroupSpec:
    return GroupSpec(name="g", members=members, max_drift_us=drift, **kw)  # type: ignore[arg-type]


def group(*reports: tuple[str, int | None], s: GroupSpec | None = None, now_us: int = 0) -> GroupState:
    state = declare(None, s or spec(), 0)
    for member, wm in reports:
        state, _, _ = apply_report(state, Report.of(member, wm), now_us)
    return state


def report(state: GroupState, member: str, wm: int | None, now_us: int = 0, reset: bool = False) -> Answer:
    return apply_report(state, Report.of(member, wm, reset=reset), now_us)[1]


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"name": "", "members": (A,), "max_drift_us": 1}, "name"),
        ({"name": "g", "members": (A,), "max_drift_us": 0}, "max_drift_us"),
        ({"name": "g", "members": (A,), "max_drift_us": 1, "idle_timeout_us": 0}, "idle_timeout_us"),
        ({"name": "g", "members": (A, A), "max_drift_us": 1}, "members"),
        ({"name": "g", "members": (A, ""), "max_drift_us": 1}, "members"),
        ({"name": "g", "members": (), "max_drift_us": 1}, "members"),
        ({"name": "g", "members": (A,), "max_drift_us": 1, "maxDrift": 1}, "maxDrift"),
    ],
)
def test_spec_validation_names_the_field(kwargs: dict[str, object], field_name: str) -> None:
    with pytest.raises(ValidationError, match=field_name):
        GroupSpec(**kwargs)  # type: ignore[arg-type]


def test_spec_is_frozen_and_defaults_are_safe() -> None:
    s = GroupSpec(name="g", members=[A], max_drift_us=5)  # type: ignore[arg-type]
    assert s.members == (A,)
    assert s.idle_timeout_us is None and s.self_register is False
    assert GroupSpec(name="g", max_drift_us=5, self_register=True).members == ()
    with pytest.raises(ValidationError):
        s.max_drift_us = 1  # type: ignore[misc]


def test_report_needs_a_watermark_unless_finished() -> None:
    with pytest.raises(ValidationError, match="watermark"):
        Report(member=A)
    with pytest.raises(ValidationError, match="watermark"):
        Report(member=A, watermark=5, finished=True)
    assert Report.of(A, None) == Report(member=A, finished=True)
    assert Report.of(A, 7, reset=True) == Report(member=A, watermark=7, reset=True)


VALID_GROUPS = [
    "g",
    "rmi",
    "default.rmi-outage",
    "team_a.rmi_outage",
    "a1.b-2.c_3",
    "x" * 63,
    ".".join(["y" * 63] * 3 + ["z" * 61]),
]
INVALID_GROUPS = [
    "",
    "../../etc",
    "..",
    ".g",
    "g.",
    "a..b",
    "default/rmi",
    "Default.rmi",
    "-g",
    "g-",
    "g\n",
    "g\x00",
    "g h",
    "x" * 64,
    ".".join(["y" * 63] * 3 + ["z" * 62]),  # 254 characters
    "grüße",
]
VALID_MEMBERS = ["a", "job/sink/source", "rmi-outage/attributed_plays/impressions", "Job/Sink.v2/SRC-1", "_x"]
INVALID_MEMBERS = [
    "",
    "/a",
    "a/",
    "a//b",
    "../../etc",
    "a/../b",
    "./a",
    ".hidden",
    "a b",
    "a\tb",
    "a\x7f",
    "é",
    "a" * 513,
]


@pytest.mark.parametrize("name", VALID_GROUPS)
def test_group_names_the_operator_and_local_runs_produce_are_accepted(name: str) -> None:
    assert GroupSpec(name=name, members=(A,), max_drift_us=1).name == name


@pytest.mark.parametrize("name", INVALID_GROUPS)
def test_group_names_are_dns_label_like_and_bounded(name: str) -> None:
    with pytest.raises(ValidationError, match=r"name\n.*not a valid group name: it must be labels of lowercase"):
        GroupSpec(name=name, members=(A,), max_drift_us=1)


@pytest.mark.parametrize("member", VALID_MEMBERS)
def test_member_ids_like_job_sink_source_are_accepted(member: str) -> None:
    assert GroupSpec(name="g", members=(member,), max_drift_us=1).members == (member,)
    assert Report(member=member, watermark=0).member == member


@pytest.mark.parametrize("member", INVALID_MEMBERS)
def test_member_ids_refuse_traversal_control_characters_and_length(member: str) -> None:
    with pytest.raises(ValidationError, match="not a valid member id: it must be segments"):
        GroupSpec(name="g", members=(member,), max_drift_us=1)
    with pytest.raises(ValidationError, match="member"):
        Report(member=member, watermark=0)


def test_watermarks_are_spark_timestamps() -> None:
    from kappa_operator.coordinator.names import MAX_WATERMARK_US, MIN_WATERMARK_US

    assert datetime.fromtimestamp(0, UTC) + timedelta(microseconds=MAX_WATERMARK_US) == datetime.max.replace(tzinfo=UTC)
    assert datetime.fromtimestamp(0, UTC) + timedelta(microseconds=MIN_WATERMARK_US) == datetime.min.replace(tzinfo=UTC)
    for ok in (MIN_WATERMARK_US, -50, 0, 1_700_000_000_000_000, MAX_WATERMARK_US):
        assert Report(member=A, watermark=ok).watermark == ok
    for absurd in (10**26, MAX_WATERMARK_US + 1, MIN_WATERMARK_US - 1, HELD):
        with pytest.raises(ValidationError, match=r"watermark\n.*is not a timestamp"):
            Report(member=A, watermark=absurd)


# --- holding and finishing ----------------------------------------------------------------


def test_missing_member_holds_the_group() -> None:
    state = group((A, 100))
    answer = view(state, 0)
    assert answer.global_watermark == HELD
    assert answer.bound == HELD + 10
    assert answer.held and answer.missing == (B,)
    assert not answer.finished
    assert view(declare(None, spec(), 0), 0).missing == (A, B)


def test_min_over_members_and_the_reporters_answer() -> None:
    state = group((A, 100))
    state, answer, events = apply_report(state, Report.of(B, 40), 5)
    assert answer == Answer(
        group="g",
        global_watermark=40,
        bound=50,
        held=False,
        missing=(),
        idle=(),
        finished=False,
        member_watermark=40,
        holders=(B,),
    )
    assert events == []
    assert state.members[B] == MemberState(watermark=40, finished=False, last_report_us=5, last_advance_us=5, reports=1)


def test_finished_members_stop_holding() -> None:
    state = group((A, 100), (B, 40), s=spec((A, B, C)))
    assert view(state, 0).held  # C missing
    assert view(state, 0).holders == (C,)
    state = group((A, 100), (B, 40), (C, None), s=spec((A, B, C)))  # finished before ever reporting
    assert view(state, 0).global_watermark == 40
    state, answer, events = apply_report(state, Report.of(B, None), 0)
    assert (answer.global_watermark, answer.bound, answer.member_watermark) == (100, 110, None)
    assert events == [("finished", B)]
    assert state.members[B].watermark == 40  # kept for diagnosis


def test_all_finished_is_unbounded() -> None:
    state = group((A, 100), (B, None), (A, None))
    answer = view(state, 0)
    assert (answer.global_watermark, answer.bound, answer.finished, answer.held) == (None, None, True, False)


def test_finished_is_idempotent() -> None:
    state = group((A, 100), (B, None))
    again, answer, events = apply_report(state, Report.of(B, None), 1)
    assert answer == view(again, 1)
    assert (answer.global_watermark, answer.member_watermark) == (100, None)
    assert events == []
    assert again.members[B].finished and again.members[B].reports == 2


def test_matches_the_spark_side_alignment_rule_without_idleness() -> None:
    state = group((A, 30), (B, None), s=spec((A, B, C)))
    assert view(state, 0).group_view() == global_view((A, B, C), {A: 30, B: None})
    state, _, _ = apply_report(state, Report.of(C, 20), 0)
    assert view(state, 0).group_view() == global_view((A, B, C), {A: 30, B: None, C: 20})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([A, B, C]), st.none() | st.integers(-50, 50)), max_size=12))
def test_view_agrees_with_global_view(reports: list[tuple[str, int | None]]) -> None:
    """The coordinator and the local state file must compute the same rule."""
    state = declare(None, spec((A, B, C)), 0)
    last: dict[str, int | None] = {}
    for member, wm in reports:
        try:
            state, _, _ = apply_report(state, Report.of(member, wm), 0)
        except WatermarkRegressionError:
            prev = state.members[member]
            assert wm is not None and (prev.finished or (prev.watermark is not None and wm < prev.watermark))
            continue
        last[member] = wm
    assert view(state, 0).group_view() == global_view((A, B, C), last)


# --- regression and reset -----------------------------------------------------------------


def test_regression_is_rejected_with_a_message_that_says_what_to_do() -> None:
    state = group((A, 100), (B, 40))
    with pytest.raises(WatermarkRegressionError) as err:
        apply_report(state, Report.of(A, 99), 0)
    message = str(err.value)
    for part in ("'g'", repr(A), "100", "99", "reset"):
        assert part in message
    assert isinstance(err.value, CoordinatorError)


def test_equal_watermark_is_accepted() -> None:
    state = group((A, 100), (B, 40), (A, 100))
    assert state.members[A].reports == 2


def test_reset_replaces_the_member_state() -> None:
    state = group((A, 100), (B, 40), now_us=3)
    state, answer, events = apply_report(state, Report.of(A, 10, reset=True), 7)
    assert (answer.global_watermark, answer.bound, answer.member_watermark) == (10, 20, 10)
    assert events == [("reset", A)]
    assert state.members[A] == MemberState(10, False, 7, 7, 1)


def test_finished_member_reporting_again_needs_a_reset() -> None:
    state = group((A, 100), (B, 40), (A, None))
    with pytest.raises(WatermarkRegressionError, match="after finishing"):
        apply_report(state, Report.of(A, 200), 0)
    state, answer, events = apply_report(state, Report.of(A, 5, reset=True), 0)
    assert answer.global_watermark == 5
    assert not state.members[A].finished
    assert events == [("reset", A)]


# --- membership ---------------------------------------------------------------------------


def test_unknown_member_is_rejected() -> None:
    with pytest.raises(UnknownMemberError, match="job/sink/x"):
        apply_report(group(), Report.of("job/sink/x", 1), 0)


def test_self_registration_adds_members_on_first_report() -> None:
    state = declare(None, GroupSpec(name="local", max_drift_us=10, self_register=True), 0)
    assert view(state, 0).held  # nobody joined yet: no bound to hand out
    state, answer, events = apply_report(state, Report.of(A, 50), 0)
    assert (answer.global_watermark, answer.held, events) == (50, False, [("registered", A)])
    state, answer, events = apply_report(state, Report.of(B, 20), 0)
    assert (answer.global_watermark, state.roster, events) == (20, (A, B), [("registered", B)])
    state, _, events = apply_report(state, Report.of(B, 30), 0)
    assert events == []


def test_redeclare_keeps_the_state_of_remaining_members() -> None:
    state = group((A, 100), (B, 40), s=spec((A, B)), now_us=1)
    state = declare(state, spec((A, C), drift=5), 9)
    assert set(state.members) == {A}
    assert state.members[A] == MemberState(100, False, 1, 1, 1)
    assert state.declared_us == 0
    answer = view(state, 9)
    assert answer.missing == (C,)  # the new member holds
    state, answer, _ = apply_report(state, Report.of(C, 60), 9)
    assert (answer.global_watermark, answer.bound) == (60, 65)  # B dropped, new drift
    with pytest.raises(UnknownMemberError):
        apply_report(state, Report.of(B, 50), 9)
    with pytest.raises(ValueError, match="re-declare"):
        declare(state, GroupSpec(name="other", members=(A,), max_drift_us=5), 9)


def test_redeclare_drops_self_registered_members_when_no_longer_accepted() -> None:
    s = spec((A,), self_register=True)
    state = group((A, 1), (B, 2), s=s)
    assert set(declare(state, s, 1).members) == {A, B}
    assert set(declare(state, spec((A,)), 1).members) == {A}


# --- idleness -----------------------------------------------------------------------------


def test_idle_member_stops_holding_and_comes_back_when_it_advances() -> None:
    s = spec((A, B, C), idle_timeout_us=100)
    state = group((A, 10), (B, 50), (C, 60), s=s, now_us=0)
    state, _, _ = apply_report(state, Report.of(C, 61), 99)
    state, answer, events = apply_report(state, Report.of(B, 55), 99)
    assert (answer.global_watermark, answer.idle, events) == (10, (), [])  # 99 < 100: A still holds
    state, answer, events = apply_report(state, Report.of(B, 56), 100)
    assert (answer.global_watermark, answer.bound, answer.idle) == (56, 66, (A,))
    assert events == [("idle", A)]
    # re-reporting the same watermark is not advancing: A stays idle, no new event
    state, answer, events = apply_report(state, Report.of(A, 10), 150)
    assert (answer.global_watermark, answer.idle, events) == (56, (A,), [])
    assert state.members[A].last_advance_us == 0
    state, answer, events = apply_report(state, Report.of(A, 11), 160)
    assert (answer.global_watermark, answer.idle, events) == (11, (), [("active", A)])


def test_all_idle_members_give_the_min_over_them() -> None:
    s = spec((A, B), idle_timeout_us=5)
    state = group((A, 10), (B, 50), s=s)
    answer = view(state, 1000)
    assert (answer.global_watermark, answer.idle) == (10, (A, B))
    state = group((A, 10), (B, 50), (A, None), s=s)
    assert view(state, 1000).global_watermark == 50  # a finished member is never idle
    assert view(state, 1000).idle == (B,)


def test_missing_members_are_never_idle() -> None:
    state = group((A, 10), s=spec((A, B), idle_timeout_us=5))
    answer = view(state, 10**9)
    assert (answer.global_watermark, answer.missing, answer.idle) == (HELD, (B,), (A,))


def test_no_idle_timeout_means_never_idle() -> None:
    state = group((A, 10), (B, 50))
    answer = view(state, 10**15)
    assert (answer.global_watermark, answer.idle) == (10, ())


def test_refresh_turns_time_into_events() -> None:
    state = group((A, 10), (B, 50), s=spec((A, B), idle_timeout_us=5))
    state, events = refresh(state, 5)
    assert events == [("idle", A), ("idle", B)]
    assert refresh(state, 6)[1] == []
    state, _, events = apply_report(state, Report.of(B, None), 7)
    assert events == [("finished", B)]  # no longer idle, but not "active" either
    assert state.idle == frozenset({A})


def test_lag() -> None:
    state = group((A, 100), s=spec((A, B, C), idle_timeout_us=50))
    assert lag_us(state, A, 0) is None  # held
    state, _, _ = apply_report(state, Report.of(B, 40), 0)
    state, _, _ = apply_report(state, Report.of(C, None), 0)
    assert (lag_us(state, A, 0), lag_us(state, B, 0), lag_us(state, C, 0)) == (60, 0, None)
    state, _, _ = apply_report(state, Report.of(A, 120), 60)
    assert lag_us(state, B, 60) == -80  # B idle: the global moved past it
    with pytest.raises(UnknownMemberError):
        lag_us(state, "job/sink/x", 0)


# --- the shell ----------------------------------------------------------------------------


def test_coordinator_shell() -> None:
    events: list[tuple[str, str, str]] = []
    coord = Coordinator(history=2, on_event=lambda *e: events.append(e))
    coord.declare(spec((A, B), idle_timeout_us=10), 0)
    with pytest.raises(UnknownGroupError):
        coord.report("nope", Report.of(A, 1), 0)
    with pytest.raises(UnknownGroupError):
        coord.view("nope", 0)
    coord.report("g", Report.of(A, 1), 0)
    coord.report("g", Report.of(B, 5), 0)
    with pytest.raises(WatermarkRegressionError):
        coord.report("g", Report.of(B, 4), 1)
    assert coord.state("g").members[B].watermark == 5  # a rejected report changes nothing
    answer = coord.report("g", Report.of(B, 6), 10)
    assert answer.global_watermark == 6
    assert events == [("g", "idle", A)]
    assert coord.history("g") == (Accepted(0, B, 5, 1, 11), Accepted(10, B, 6, 6, 16))  # bounded
    assert coord.view("g", 10) == view(coord.state("g"), 10)
    assert coord.lag_us("g", A, 10) == -5
    assert list(coord.groups()) == ["g"]
    assert coord.delete("g") and not coord.delete("g")
    with pytest.raises(UnknownGroupError):
        coord.history("g")


# --- simulated alignment groups -----------------------------------------------------------


def sp(lower: int) -> Split:
    return Split(lower, lower, (FilePiece(f"f{lower}", None, 1, 1),), 1, 1)


@dataclass
class Sim:
    """Members of one group reading their splits through the coordinator, as sources do."""

    lowers: list[list[int]]
    drift: int
    limits: Limits
    idle_timeout_us: int | None = None
    names: list[str] = field(init=False)
    splits: list[list[Split]] = field(init=False)
    pos: list[int] = field(init=False)
    reported: list[bool] = field(init=False)
    last_advance: list[int] = field(init=False)
    last_reported: list[int | None] = field(init=False)
    events: list[tuple[str, str]] = field(init=False, default_factory=list)
    coord: Coordinator = field(init=False)
    now: int = 0
    steps: int = 0
    admitted: int = 0

    def __post_init__(self) -> None:
        n = len(self.lowers)
        self.names = [f"job/sink/s{i}" for i in range(n)]
        self.splits = [[sp(x) for x in sorted(ls)] for ls in self.lowers]
        self.pos, self.reported, self.last_advance, self.last_reported = [0] * n, [False] * n, [0] * n, [None] * n
        self.coord = Coordinator(on_event=lambda _g, kind, member: self.events.append((kind, member)))
        names, timeout = tuple(self.names), self.idle_timeout_us
        self.coord.declare(GroupSpec(name="g", members=names, max_drift_us=self.drift, idle_timeout_us=timeout), 0)

    def wm(self, i: int) -> int | None:
        return source_watermark(self.splits[i], self.pos[i])

    def live(self) -> list[int]:
        return [i for i in range(len(self.splits)) if self.wm(i) is not None]

    def true_min(self) -> int | None:
        return min((w for i in self.live() if (w := self.wm(i)) is not None), default=None)

    def done(self) -> bool:
        return all(self.reported) and not self.live()

    def report(self, i: int) -> Answer:
        before = self.wm(i)
        answer = self.coord.report("g", Report.of(self.names[i], before), self.now)
        last = self.last_reported[i]
        if not self.reported[i] or (before is not None and last is not None and before > last):
            self.last_advance[i] = self.now  # what the coordinator counts as advancing
        self.reported[i], self.last_reported[i] = True, before
        return answer

    def step(self, i: int) -> None:
        """Report, admit up to the bound, report again: one micro-batch of member ``i``."""
        self.steps += 1
        answer = self.report(i)
        wm = self.wm(i)
        if wm is None:
            assert answer.member_watermark is None
            return
        adm = admit(self.splits[i], self.pos[i], answer.bound, self.limits)
        admitted = self.splits[i][adm.start : adm.end]
        true_min = self.true_min()
        assert true_min is not None
        if self.idle_timeout_us is None:
            # (b) the drift holds against the members' real positions, including those the
            # coordinator has not heard of yet, not just against what it answered
            assert all(s.lower <= true_min + self.drift for s in admitted), (admitted, true_min, answer)
        else:
            assert answer.bound is not None and all(s.lower <= answer.bound for s in admitted)
        # (c) the slowest member always progresses once nobody is missing
        if all(self.reported) and wm == true_min:
            assert admitted, f"slowest member {self.names[i]} at {wm} admitted nothing: {answer}"
        if admitted:
            self.pos[i] = adm.end
            self.admitted += len(admitted)
        self.report(i)

    def expected_global(self) -> int | None:
        if not all(self.reported):
            return HELD
        live = {i: w for i in self.live() if (w := self.wm(i)) is not None}
        if not live:
            return None
        timeout = self.idle_timeout_us
        active = [w for i, w in live.items() if timeout is None or self.now - self.last_advance[i] < timeout]
        return min(active or live.values())

    def run(self, choices: list[int], ticks: list[int]) -> None:
        total = sum(len(s) for s in self.splits)
        n = len(self.splits)
        for k, i in enumerate(choices):
            self.now += ticks[k % len(ticks)] if ticks else 0
            self.step(i)
            assert self.coord.view("g", self.now).global_watermark == self.expected_global()
        # round-robin fallback: every unfinished member keeps getting turns
        budget = n * (total + 2)
        turn = 0
        while not self.done():
            assert budget > 0, f"deadlock: positions {self.pos} of {[len(s) for s in self.splits]}"
            budget -= 1
            i = turn % n
            turn += 1
            if self.reported[i] and self.wm(i) is None:
                continue
            self.now += 1 if ticks else 0
            self.step(i)
            assert self.coord.view("g", self.now).global_watermark == self.expected_global()
        assert self.admitted == total
        final = self.coord.view("g", self.now)
        assert (final.finished, final.global_watermark, final.bound) == (True, None, None)


@st.composite
def sims(draw: st.DrawFn, idle: bool = False) -> tuple[Sim, list[int], list[int]]:
    n = draw(st.integers(2, 5))
    lowers = [draw(st.lists(st.integers(0, 200), max_size=8)) for _ in range(n)]
    drift = draw(st.integers(1, 60))
    limits = Limits(max_files=draw(st.none() | st.integers(1, 3)))
    choices = draw(st.lists(st.integers(0, n - 1), max_size=40))
    timeout = draw(st.integers(1, 30)) if idle else None
    ticks = draw(st.lists(st.integers(0, 20), min_size=1, max_size=10)) if idle else []
    return Sim(lowers, drift, limits, timeout), choices, ticks


@settings(max_examples=200, deadline=None)
@given(sims())
def test_any_interleaving_finishes_within_the_drift(case: tuple[Sim, list[int], list[int]]) -> None:
    sim, choices, ticks = case
    sim.run(choices, ticks)
    # without resets and idleness the global watermark never goes back (None: past everything)
    seen = [a.global_watermark for a in sim.coord.history("g")]
    as_key = [float("inf") if g is None else g for g in seen]
    assert as_key == sorted(as_key)


@settings(max_examples=200, deadline=None)
@given(sims(idle=True))
def test_with_idleness_every_interleaving_finishes_and_transitions_are_reported(
    case: tuple[Sim, list[int], list[int]],
) -> None:
    sim, choices, ticks = case
    idle_before: set[str] = set()
    original = sim.coord.report

    def checked(group: str, r: Report, now_us: int) -> Answer:
        nonlocal idle_before
        sim.events.clear()
        answer = original(group, r, now_us)
        idle_now = set(answer.idle)
        finished = {m for m, s in sim.coord.state(group).members.items() if s.finished}
        assert {m for k, m in sim.events if k == "idle"} == idle_now - idle_before
        assert {m for k, m in sim.events if k == "active"} == idle_before - idle_now - finished
        idle_before = idle_now
        return answer

    sim.coord.report = checked  # type: ignore[method-assign]
    sim.run(choices, ticks)
