"""The coordinator service over real HTTP (an embedded aiohttp server on 127.0.0.1) with the
Spark side's real client: auth, validation, the alignment answers, restart safety, metrics."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.coordinator.store import GroupStore
from kappa_operator.local.ports import free_port
from spark_app.alignment import http as alignment_http
from spark_app.alignment.http import CoordinatorRejectedError, CoordinatorUnavailableError
from spark_app.contract.alignment import HELD
from tests.unit.coordinator_http import MIN, TOKEN, call, declare, provider


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[EmbeddedCoordinator]:
    with EmbeddedCoordinator(Service(TOKEN, GroupStore(tmp_path / "groups.json"))) as c:
        yield c


def test_health_needs_no_token_everything_else_does(coordinator: EmbeddedCoordinator) -> None:
    assert call(coordinator.url, "GET", "/healthz", token=None) == (200, {"status": "ok"})
    assert call(coordinator.url, "GET", "/readyz", token=None)[0] == 200
    for token in (None, "wrong"):
        status, body = call(coordinator.url, "GET", "/v1/groups", token=token)
        assert status == 401 and "bearer token" in body["error"]
        assert call(coordinator.url, "GET", "/metrics", token=token)[0] == 401
    with pytest.raises(CoordinatorRejectedError, match="bearer token"):
        provider(coordinator.url, token="wrong").report("a", 0)


def test_a_missing_member_holds_then_the_global_is_the_min(coordinator: EmbeddedCoordinator) -> None:
    declare(coordinator.url)
    p = provider(coordinator.url)
    held = p.report("a", 10 * MIN)
    assert held.global_watermark == HELD and held.missing == ("b",) and held.holders == ("b",)
    assert held.bound(5 * MIN) is not None and held.bound(5 * MIN) < 0  # nothing is admissible
    v = p.report("b", 3 * MIN)
    assert (v.global_watermark, v.bound(5 * MIN), v.holders) == (3 * MIN, 8 * MIN, ("b",))
    assert p.report("b", None).global_watermark == 10 * MIN  # b finished: a sets the pace
    assert p.report("a", None).global_watermark is None  # everyone finished: no bound
    status, state = call(coordinator.url, "GET", "/v1/groups/g")
    assert status == 200 and state["finished"] and [h[1] for h in state["history"]] == ["a", "b", "b", "a"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "malformed JSON body"),
        (b"", "empty body"),
        (json.dumps({"watermark": 5}).encode(), "member"),
        (json.dumps({"member": "a", "watermark": "soon"}).encode(), "watermark"),
        (json.dumps({"member": "a", "extra": 1}).encode(), "extra"),
    ],
)
def test_malformed_reports_get_400_with_a_message(coordinator: EmbeddedCoordinator, raw: bytes, message: str) -> None:
    declare(coordinator.url)
    status, body = call(coordinator.url, "POST", "/v1/groups/g/reports", raw=raw)
    assert status == 400 and message in body["error"]


def test_bad_group_bodies_name_the_field(coordinator: EmbeddedCoordinator) -> None:
    status, body = call(coordinator.url, "PUT", "/v1/groups/g", {"members": ["a"], "maxDrift": "soon"})
    assert status == 400 and body["error"].startswith("maxDrift")
    status, body = call(coordinator.url, "PUT", "/v1/groups/g", {"members": ["a", "a"], "maxDrift": "1m"})
    assert status == 400 and "a" in body["error"]


def test_oversized_bodies_are_rejected(coordinator: EmbeddedCoordinator) -> None:
    declare(coordinator.url)
    raw = json.dumps({"member": "a" * 100_000, "watermark": 1}).encode()
    status, body = call(coordinator.url, "POST", "/v1/groups/g/reports", raw=raw)
    assert status == 413 and "larger than" in body["error"]


def test_regression_unknown_member_and_group(coordinator: EmbeddedCoordinator) -> None:
    declare(coordinator.url)
    p = provider(coordinator.url)
    p.report("a", 10 * MIN)
    with pytest.raises(CoordinatorRejectedError, match="reset"):
        p.report("a", 9 * MIN)
    assert p.report("a", 9 * MIN, reset=True).missing == ("b",)  # a rewind may go back
    with pytest.raises(CoordinatorRejectedError):
        p.report("intruder", 1)
    status, body = call(coordinator.url, "POST", "/v1/groups/nope/reports", {"member": "a", "watermark": 1})
    assert status == 404 and "nope" in body["error"]
    assert call(coordinator.url, "DELETE", "/v1/groups/g")[0] == 200
    assert call(coordinator.url, "GET", "/v1/groups/g")[0] == 404


def test_groups_survive_a_restart_and_hold_until_members_re_report(tmp_path: Path) -> None:
    store = GroupStore(tmp_path / "groups.json")
    with EmbeddedCoordinator(Service(TOKEN, store)) as c:
        declare(c.url, drift="2m")
        p = provider(c.url)
        p.report("a", 10 * MIN)
        assert p.report("b", 12 * MIN).global_watermark == 10 * MIN
        port = c.port
    alignment_http._REPORTED.clear()  # a new driver process: it never reported a (its own sources re-report)
    with EmbeddedCoordinator(Service(TOKEN, store), port=port) as c:
        p = provider(c.url)
        v = p.report("b", 12 * MIN)
        assert v.global_watermark == HELD and v.missing == ("a",), "a has not re-reported: nobody runs ahead"
        assert p.report("a", 10 * MIN).global_watermark == 10 * MIN


def test_the_client_keeps_the_last_bound_while_unreachable_then_fails(tmp_path: Path) -> None:
    never = provider(f"http://127.0.0.1:{free_port()}", timeout=0.3)
    first = never.report("a", 1)
    assert first.global_watermark == HELD and first.stale, "no answer yet: admit nothing"
    store = GroupStore(tmp_path / "groups.json")
    c = EmbeddedCoordinator(Service(TOKEN, store)).start()
    declare(c.url, members=("a",))
    p = provider(c.url, timeout=0.6)
    answered = p.report("a", 7 * MIN)
    assert answered.global_watermark == 7 * MIN and not answered.stale
    c.stop()
    started = time.monotonic()
    kept = p.report("a", 8 * MIN)
    assert kept.global_watermark == 7 * MIN and kept.stale, "the last bound, nothing beyond it, said stale"
    with pytest.raises(CoordinatorUnavailableError, match="unreachable"):
        while time.monotonic() - started < 10:
            p.report("a", 8 * MIN)


def test_metrics_expose_lag_global_watermark_and_membership(coordinator: EmbeddedCoordinator) -> None:
    declare(coordinator.url, members=("a", "b", "c"))
    p = provider(coordinator.url)
    p.report("a", 10 * MIN)
    p.report("b", 13 * MIN, throttled=True)
    p.report("c", None)
    status, text = call(coordinator.url, "GET", "/metrics")
    assert status == 200
    assert 'kappa_alignment_lag_seconds{group="g",member="b"} 180.0' in text
    assert 'kappa_alignment_global_watermark_seconds{group="g"} 600.0' in text
    assert 'kappa_alignment_member_throttled{group="g",member="b"} 1.0' in text
    assert 'kappa_alignment_group_members{group="g",state="finished"} 1.0' in text
    assert 'kappa_alignment_group_members{group="g",state="active"} 2.0' in text
    assert 'kappa_coordinator_reports_total{group="g"} 3.0' in text
    assert "kappa_coordinator_report_duration_seconds_bucket" in text
    assert 'job="' not in text


def test_kappa_coordinator_runs_standalone(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    port = free_port()
    state = tmp_path / "groups.json"
    cmd = [
        sys.executable,
        "-m",
        "kappa_operator.cli.commands",
        "coordinator",
        "--port",
        str(port),
        "--groups-file",
        str(state),
    ]
    proc = subprocess.Popen(cmd, env={**os.environ, "KAPPA_COORDINATOR_TOKEN": TOKEN}, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if call(url, "GET", "/healthz", token=None)[0] == 200:
                    break
            except OSError:
                assert time.monotonic() < deadline, "the coordinator did not start"
                time.sleep(0.1)
        declare(url, members=("a",))
        assert provider(url).report("a", 5 * MIN).global_watermark == 5 * MIN
        assert json.loads(state.read_text())["groups"][0]["name"] == "g"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    no_token = subprocess.run(
        [sys.executable, "-m", "kappa_operator.cli.commands", "coordinator", "--port", str(port)],
        env={k: v for k, v in os.environ.items() if k != "KAPPA_COORDINATOR_TOKEN"},
        capture_output=True,
        text=True,
    )
    assert no_token.returncode == 2 and "KAPPA_COORDINATOR_TOKEN" in no_token.stdout


def test_the_hot_path_answer_has_the_documented_shape() -> None:
    from kappa_operator.coordinator.api import AnswerBody
    from kappa_operator.coordinator.core import Answer
    from kappa_operator.coordinator.server import answer_json

    for a in (
        Answer("g", 5, 10, False, (), ("x",), False, 5, ("a",)),
        Answer("g", HELD, HELD + 5, True, ("b",), (), False, None, ("b",)),
        Answer("g", None, None, False, (), (), True),
    ):
        assert answer_json(a) == AnswerBody.of(a).model_dump(by_alias=True, exclude_unset=True)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/v1/groups/..%2F..%2Fetc", "group: '../../etc' is not a valid group name"),
        ("/v1/groups/Default.rmi", "group: 'Default.rmi' is not a valid group name"),
        ("/v1/groups/a..b", "must be labels of lowercase letters, digits, '-' and '_'"),
        ("/v1/groups/g%00", "group: 'g\\x00' is not a valid group name"),
        ("/v1/groups/" + "x" * 300, "at most 253 characters in all"),
    ],
)
def test_bad_group_names_in_the_path_get_400_naming_the_rule(
    coordinator: EmbeddedCoordinator, path: str, message: str
) -> None:
    for method, suffix, body in (("PUT", "", {"members": ["a"], "maxDrift": "1m"}), ("GET", "", None)):
        status, answer = call(coordinator.url, method, path + suffix, body)
        assert status == 400 and message in answer["error"], (method, answer)
    status, answer = call(coordinator.url, "POST", path + "/reports", {"member": "a", "watermark": 1})
    assert status == 400 and message in answer["error"]
    assert call(coordinator.url, "GET", "/v1/groups")[1] == {"groups": []}, "nothing was declared"


def test_valid_group_names_work_end_to_end(coordinator: EmbeddedCoordinator) -> None:
    for name in ("default.rmi-outage", "team_a.rmi_outage", "rmi"):
        declare(coordinator.url, group=name, members=("rmi-outage/attributed_plays/impressions",))
        assert (
            provider(coordinator.url, group=name)
            .report("rmi-outage/attributed_plays/impressions", MIN)
            .global_watermark
            == MIN
        )
    assert len(call(coordinator.url, "GET", "/v1/groups")[1]["groups"]) == 3


@pytest.mark.parametrize("member", ["../../etc", "a//b", "", "a\nb", "x" * 513])
def test_bad_member_ids_get_400_naming_the_field(coordinator: EmbeddedCoordinator, member: str) -> None:
    status, body = call(coordinator.url, "PUT", "/v1/groups/g", {"members": ["a", member], "maxDrift": "1m"})
    assert status == 400 and body["error"].startswith("members.1: ") and "member id" in body["error"]
    declare(coordinator.url)
    status, body = call(coordinator.url, "POST", "/v1/groups/g/reports", {"member": member, "watermark": 1})
    assert status == 400 and body["error"].startswith("member: ") and "member id" in body["error"]


@pytest.mark.parametrize("raw", [b"1e26", b"100000000000000000000000000", b"253402300800000000", b"-62135596800000001"])
def test_absurd_watermarks_get_400_and_change_nothing(coordinator: EmbeddedCoordinator, raw: bytes) -> None:
    declare(coordinator.url)
    provider(coordinator.url).report("a", 10 * MIN)
    status, body = call(
        coordinator.url, "POST", "/v1/groups/g/reports", raw=b'{"member": "a", "watermark": ' + raw + b"}"
    )
    assert status == 400 and body["error"].startswith("watermark: "), body  # 1e26 as a float: not even an int64
    assert raw == b"1e26" or "is not a timestamp" in body["error"]
    assert call(coordinator.url, "GET", "/v1/groups/g")[1]["members"]["a"]["watermark"] == 10 * MIN
    with pytest.raises(CoordinatorRejectedError, match="not a timestamp"):
        provider(coordinator.url).report("a", 10**26)


def test_a_history_that_is_not_a_number_is_a_400(coordinator: EmbeddedCoordinator) -> None:
    declare(coordinator.url)
    status, body = call(coordinator.url, "GET", "/v1/groups/g?history=lots")
    assert status == 400 and body["error"] == "history: must be an integer, got 'lots'"


def test_a_stored_group_with_a_now_invalid_name_is_dropped_not_fatal(tmp_path: Path) -> None:
    store = GroupStore(tmp_path / "groups.json")
    bad = {"name": "../../etc", "members": ["a"], "max_drift_us": 1}
    good = {"name": "g", "members": ["a"], "max_drift_us": 1}
    store.path.write_text(json.dumps({"groups": [bad, good]}))
    with EmbeddedCoordinator(Service(TOKEN, store)) as c:
        assert [g["group"] for g in call(c.url, "GET", "/v1/groups")[1]["groups"]] == ["g"]


def test_a_reporter_learns_the_watermark_outside_its_query(coordinator: EmbeddedCoordinator) -> None:
    """Admission rounds may not move members of other queries: the answer says where they are."""
    q1a, q1b, q2a = "job/q1/a", "job/q1/b", "job/q2/a"
    declare(coordinator.url, members=(q1a, q1b, q2a))
    p = provider(coordinator.url)
    assert p.report(q1a, 5 * MIN).outside == HELD, "held: nothing outside is known"
    p.report(q1b, 7 * MIN)
    view = p.report(q2a, 9 * MIN)
    assert (view.global_watermark, view.outside) == (5 * MIN, 5 * MIN)
    assert p.report(q1a, 6 * MIN).outside == 9 * MIN
    p.report(q2a, None)
    assert p.report(q1a, 6 * MIN).outside is None, "no unfinished member outside the query"


def test_an_answer_without_the_outside_watermark_allows_no_further_rounds() -> None:
    """A coordinator older than admission rounds: the client takes its global watermark (a lower
    bound of the outside one), so a query's rounds cannot run ahead of anyone."""
    p = provider("http://127.0.0.1:1")
    old = {"group": "g", "globalWatermark": 42, "bound": 52, "held": False, "missing": [], "idle": [],
           "finished": False, "holders": ["x"]}  # fmt: skip
    p._post = lambda body: old  # type: ignore[method-assign]
    assert p.report("job/q/a", 50).outside == 42


def test_a_driver_reports_its_other_sources_again_when_the_coordinator_restarted(tmp_path: Path) -> None:
    """Two sources of one query (a provider each, one process), b ahead of a. The coordinator
    restarts on the same address and forgets their progress (never stored). The first source
    asked (a) gets an answer naming b missing: the process reports b's last watermark again at
    once, so a is not held by its own sibling, which Spark asks only after a has answered (under
    AvailableNow, both held in one batch ends the query)."""
    store, port = GroupStore(tmp_path / "groups.json"), free_port()
    first = EmbeddedCoordinator(Service(TOKEN, store), port=port).start()
    declare(first.url, members=("a", "b"), drift="5m")
    a, b = provider(first.url), provider(first.url)
    a.report("a", 10 * MIN)
    assert b.report("b", 15 * MIN).global_watermark == 10 * MIN
    first.stop()
    again = EmbeddedCoordinator(Service(TOKEN, store), port=port).start()
    try:
        a.report("a", 11 * MIN)  # its kept connection is broken: the last bound, and a new connection
        view = a.report("a", 11 * MIN)
        assert view.global_watermark == 11 * MIN and not view.missing, view
        b.report("b", 15 * MIN)  # its connection, too
        assert b.report("b", 15 * MIN).global_watermark == 11 * MIN, "b's own report: no regression refused"
    finally:
        again.stop()


def test_a_follower_replica_answers_no_report_and_a_new_leader_asks_again_while_it_declares(tmp_path: Path) -> None:
    """Issue 62. A replica that does not hold the Lease refuses every /v1/ call with 503; the
    driver's client keeps its last bound. A new leader's coordinator answers an unknown group
    with 503 while it declares the running Backfills' groups again, then with 404."""
    with EmbeddedCoordinator(Service(TOKEN, leading=False)) as follower:
        status, body = call(follower.url, "GET", "/v1/groups")
        assert status == 503 and "not the leader" in body["error"]
        assert call(follower.url, "GET", "/healthz", token=None)[0] == 200, "alive and ready to take over"
        p = provider(follower.url)
        assert p.report("a", 10 * MIN).global_watermark == HELD, "no answer: held, never admitted past a bound"
        follower.service.leading = True
        follower.service.declaring_until = time.monotonic() + 60
        status, body = call(follower.url, "POST", "/v1/groups/g/reports", {"member": "a", "watermark": 0})
        assert status == 503 and "declaring its groups again" in body["error"]
        declare(follower.url)
        assert p.report("a", 10 * MIN).missing == ("b",)
        follower.service.declaring_until = 0.0
        status, body = call(follower.url, "POST", "/v1/groups/other/reports", {"member": "a", "watermark": 0})
        assert status == 404
