"""Which 403s in the API server's audit log say the chart's RBAC lacks a right (the cluster tests'
``never_forbidden``), and which a namespace's end brings: its RoleBindings go before the objects
the operator still reconciles there."""

from __future__ import annotations

from typing import Any

from kappa_operator.local_cluster.rest import namespaces_deleted, refused

OPERATOR = "system:serviceaccount:kappa-system:kappa-kappa-operator"


TERMINATING = 'events "x" is forbidden: unable to create new content in namespace q because it is being terminated'


def event(
    verb: str, uri: str, code: int, at: str, *, user: str = OPERATOR, message: str = "", **ref: str
) -> dict[str, Any]:
    status: dict[str, Any] = {"code": code, **({"message": message} if message else {})}
    return {
        "verb": verb,
        "requestURI": uri,
        "user": {"username": user},
        "objectRef": ref,
        "responseStatus": status,
        "requestReceivedTimestamp": f"2026-11-30T00:{at}Z",
    }


SECRET = "/api/v1/namespaces/q/secrets/b3-backfill-coordinator"
DELETE_Q = event("delete", "/api/v1/namespaces/q", 200, "50:00.000100", user="admin", resource="namespaces", name="q")


def test_a_read_refused_after_its_namespace_was_deleted_is_the_namespace_s_end_not_a_missing_right() -> None:
    late_read = event("get", SECRET, 403, "50:02.500000", resource="secrets", namespace="q")
    assert refused([DELETE_Q, late_read], OPERATOR, namespaces_deleted([DELETE_Q, late_read])) == []


def test_a_read_refused_before_the_deletion_or_in_another_namespace_is_a_missing_right() -> None:
    early = event("get", SECRET, 403, "49:59.000000", resource="secrets", namespace="q")
    elsewhere = event("get", "/api/v1/namespaces/p/secrets/s", 403, "50:03.000000", resource="secrets", namespace="p")
    events = [early, DELETE_Q, elsewhere]
    assert refused(events, OPERATOR, namespaces_deleted(events)) == [
        f"get {SECRET}",
        "get /api/v1/namespaces/p/secrets/s",
    ]


def test_a_refused_deletion_does_not_date_a_namespace_s_end_and_other_users_are_not_the_operator() -> None:
    denied = {**DELETE_Q, "responseStatus": {"code": 403}}
    late_read = event("get", SECRET, 403, "50:02.500000", resource="secrets", namespace="q")
    someone = event("get", SECRET, 403, "50:02.500000", user="bob", resource="secrets", namespace="q")
    events = [denied, late_read, someone]
    assert namespaces_deleted(events) == {}
    assert refused(events, OPERATOR, {}) == [f"get {SECRET}"]


def test_a_write_into_a_terminating_namespace_is_known_by_its_message_alone() -> None:
    write = event(
        "create",
        "/api/v1/namespaces/q/events",
        403,
        "50:01.000000",
        resource="events",
        namespace="q",
        message=TERMINATING,
    )
    assert refused([write], OPERATOR, {}) == []
