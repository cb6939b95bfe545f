"""Scoped coordinator tokens: minted from the admin token, good for their own groups only, so
one job cannot move another's watermark; checked over real HTTP with the Spark side's client."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kappa_operator.coordinator.scopes import ADMIN, PREFIX, Scope, scoped_token, verify
from kappa_operator.coordinator.server import EmbeddedCoordinator, Service
from kappa_operator.coordinator.store import GroupStore
from spark_app.alignment.http import CoordinatorRejectedError
from tests.unit.coordinator_http import MIN, TOKEN, call, declare, provider

MINE, THEIRS = "team-a.rmi-outage", "team-b.rmi-outage"

# --- minting and verifying ----------------------------------------------------------------


def test_the_token_format() -> None:
    token = scoped_token(TOKEN, [MINE])
    prefix, version, payload, signature = token.split(".")
    assert f"{prefix}.{version}" == PREFIX == "kappa-scope.v1"
    assert json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))) == [MINE]
    assert len(base64.urlsafe_b64decode(signature + "=")) == 32  # HMAC-SHA256
    assert token.isascii() and "=" not in token


def test_tokens_are_deterministic_and_verify_to_their_groups() -> None:
    token = scoped_token(TOKEN, [THEIRS, MINE, MINE])
    assert token == scoped_token(TOKEN, (MINE, THEIRS)), "the operator can re-mint and compare"
    scope = verify(TOKEN, token)
    assert scope == Scope(frozenset({MINE, THEIRS})) and not scope.admin
    assert scope.allows(MINE) and not scope.allows("team-c.rmi-outage")
    assert verify(TOKEN, TOKEN) == ADMIN and ADMIN.admin and ADMIN.allows("anything")


def _tampered(token: str) -> list[str]:
    prefix, version, payload, signature = token.split(".")
    other = base64.urlsafe_b64encode(json.dumps([THEIRS]).encode()).rstrip(b"=").decode()
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    return [
        f"{prefix}.{version}.{other}.{signature}",  # someone else's group, old signature
        f"{prefix}.{version}.{payload}.{flipped}",
        f"{prefix}.{version}.{payload}",
        f"{prefix}.v2.{payload}.{signature}",
        f"{prefix}.{version}.{payload}.{signature}.x",
        f"{prefix}.{version}.{payload}.",
        token + "x",
        "",
        "kappa-scope.v1...",
        scoped_token("another-admin-token", [MINE]),
        f"{prefix}.{version}.{payload}.é{signature[1:]}",
    ]


def test_tampered_or_foreign_tokens_do_not_verify() -> None:
    for bad in _tampered(scoped_token(TOKEN, [MINE])):
        assert verify(TOKEN, bad) is None, bad
    assert verify("", "") is None, "no admin token: nothing verifies"


@pytest.mark.parametrize(("admin", "groups", "message"), [("", [MINE], "admin"), (TOKEN, [], "at least one")])
def test_minting_needs_an_admin_token_and_groups(admin: str, groups: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scoped_token(admin, groups)


@pytest.mark.parametrize("group", ["../../etc", "Team-A.rmi", "", "a/b"])
def test_minting_refuses_bad_group_names(group: str) -> None:
    with pytest.raises(ValueError, match="not a valid group name"):
        scoped_token(TOKEN, [MINE, group])


# --- over HTTP ----------------------------------------------------------------------------


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[EmbeddedCoordinator]:
    with EmbeddedCoordinator(Service(TOKEN, GroupStore(tmp_path / "groups.json"))) as c:
        declare(c.url, group=MINE)
        declare(c.url, group=THEIRS)
        yield c


def test_a_scoped_token_reports_to_and_reads_its_group(coordinator: EmbeddedCoordinator) -> None:
    mine = scoped_token(TOKEN, [MINE])
    p = provider(coordinator.url, group=MINE, token=mine)
    assert p.report("a", 10 * MIN).missing == ("b",)
    assert p.report("b", 12 * MIN).global_watermark == 10 * MIN
    status, body = call(coordinator.url, "GET", f"/v1/groups/{MINE}", token=mine)
    assert status == 200 and body["globalWatermark"] == 10 * MIN


def test_a_scoped_token_gets_403_on_another_groups_members(coordinator: EmbeddedCoordinator) -> None:
    mine = scoped_token(TOKEN, [MINE])
    expected = f"this token is scoped to groups ['{MINE}']; group '{THEIRS}' is not one of them"
    with pytest.raises(CoordinatorRejectedError, match="is not one of them"):
        provider(coordinator.url, group=THEIRS, token=mine).report("a", 10 * MIN)
    status, body = call(coordinator.url, "POST", f"/v1/groups/{THEIRS}/reports", {"member": "a", "watermark": 1}, mine)
    assert (status, body) == (403, {"error": expected})
    assert call(coordinator.url, "GET", f"/v1/groups/{THEIRS}", token=mine) == (403, {"error": expected})
    status, body = call(coordinator.url, "GET", f"/v1/groups/{THEIRS}")
    assert body["members"] == {}, "their group never saw the report"
    status, body = call(coordinator.url, "GET", "/v1/groups/team-c.unknown", token=mine)
    assert status == 403, "an unknown group outside the scope is forbidden, not revealed as missing"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", f"/v1/groups/{MINE}", {"members": ["a", "b", "intruder"], "maxDrift": "24h"}),
        ("DELETE", f"/v1/groups/{MINE}", None),
        ("PUT", f"/v1/groups/{THEIRS}", {"members": ["a"], "maxDrift": "24h"}),
        ("DELETE", f"/v1/groups/{THEIRS}", None),
        ("GET", "/v1/groups", None),
        ("GET", "/metrics", None),
    ],
)
def test_a_scoped_token_cannot_declare_delete_or_list(
    coordinator: EmbeddedCoordinator, method: str, path: str, body: object
) -> None:
    mine = scoped_token(TOKEN, [MINE])
    status, answer = call(coordinator.url, method, path, body, token=mine)
    assert status == 403 and answer["error"].startswith(f"this token is scoped to groups ['{MINE}']; ")
    assert "needs the admin token" in answer["error"] or "is not one of them" in answer["error"]
    for group in (MINE, THEIRS):
        status, state = call(coordinator.url, "GET", f"/v1/groups/{group}")
        assert status == 200 and state["declared"] == ["a", "b"] and state["maxDriftUs"] == 5 * MIN


def test_tampered_tokens_get_401(coordinator: EmbeddedCoordinator) -> None:
    for bad in _tampered(scoped_token(TOKEN, [MINE])):
        if not bad.isascii():
            continue  # http.client will not send it
        status, body = call(coordinator.url, "POST", f"/v1/groups/{MINE}/reports", {"member": "a", "watermark": 1}, bad)
        assert status == 401 and "bearer token" in body["error"], bad
    status, body = call(coordinator.url, "GET", f"/v1/groups/{MINE}")
    assert body["members"] == {}


def test_a_token_for_several_groups_reaches_each_of_them(coordinator: EmbeddedCoordinator) -> None:
    both = scoped_token(TOKEN, [MINE, THEIRS])
    for group in (MINE, THEIRS):
        assert provider(coordinator.url, group=group, token=both).report("a", MIN).missing == ("b",)


def test_the_admin_token_still_does_everything(coordinator: EmbeddedCoordinator) -> None:
    for group in (MINE, THEIRS):
        assert provider(coordinator.url, group=group).report("a", MIN).missing == ("b",)
        assert call(coordinator.url, "GET", f"/v1/groups/{group}")[0] == 200
    assert len(call(coordinator.url, "GET", "/v1/groups")[1]["groups"]) == 2
    assert call(coordinator.url, "GET", "/metrics")[0] == 200
    assert call(coordinator.url, "DELETE", f"/v1/groups/{THEIRS}")[0] == 200
    declare(coordinator.url, group=THEIRS)


def test_scoped_tokens_survive_a_restart(tmp_path: Path) -> None:
    """Stateless: the same admin token verifies them in a new process, nothing is stored."""
    store = GroupStore(tmp_path / "groups.json")
    mine = scoped_token(TOKEN, [MINE])
    with EmbeddedCoordinator(Service(TOKEN, store)) as c:
        declare(c.url, group=MINE, members=("a",))
    assert mine not in store.path.read_text()
    with EmbeddedCoordinator(Service(TOKEN, store)) as c:
        assert provider(c.url, group=MINE, token=mine).report("a", MIN).global_watermark == MIN
    with (
        EmbeddedCoordinator(Service("rotated", store)) as c,
        pytest.raises(CoordinatorRejectedError, match="bearer token"),
    ):
        provider(c.url, group=MINE, token=mine).report("a", MIN)


def test_a_scoped_token_on_an_unknown_route_or_bad_name(coordinator: EmbeddedCoordinator) -> None:
    mine = scoped_token(TOKEN, [MINE])
    assert call(coordinator.url, "GET", "/v1/nothing", token=mine)[0] == 404
    status, body = call(coordinator.url, "GET", "/v1/groups/..%2Fetc", token=mine)
    assert status == 400 and body["error"].startswith("group: ")
    assert call(coordinator.url, "GET", "/v1/groups", token=None)[0] == 401


def test_refusals_are_counted(coordinator: EmbeddedCoordinator) -> None:
    mine = scoped_token(TOKEN, [MINE])
    call(coordinator.url, "GET", f"/v1/groups/{THEIRS}", token=mine)
    call(coordinator.url, "GET", "/v1/groups", token="wrong")
    text = call(coordinator.url, "GET", "/metrics")[1]
    assert 'kappa_coordinator_rejected_reports_total{reason="forbidden"} 1.0' in text
    assert 'kappa_coordinator_rejected_reports_total{reason="unauthorized"} 1.0' in text
