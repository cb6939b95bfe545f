"""Events as Kubernetes users read them (issue 27, item 7): Normal or Warning only, reported by
kappa-operator, a repeat counted on the Event posted before, a duplicate within a second
dropped, kopf's own failures routed the same way. (The recorder writing through the Kubernetes
client to the real kube-apiserver: tests/cluster/test_events_on_server.py.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from kappa_operator.kube.events import (
    COMBINED,
    COMPONENT,
    KOPF_OBJECTS,
    MESSAGE_LIMIT,
    NAME_LIMIT,
    Aggregate,
    Correlator,
    Create,
    Drop,
    EventRecorder,
    KopfLogEvents,
    cut,
    event_type,
    object_ref,
    rfc3339,
    route_kopf_logs,
)
from kappa_operator.service import runner

T0 = 1_790_000_000.0
REF = {"apiVersion": "kappa.dev/v1alpha1", "kind": "Backfill", "name": "rmi", "namespace": "jobs", "uid": "u-1"}


def body(uid: str = "u-1", name: str = "rmi") -> dict[str, Any]:
    meta = {"name": name, "namespace": "jobs", "uid": uid}
    return {"apiVersion": "kappa.dev/v1alpha1", "kind": "Backfill", "metadata": meta, "spec": {}}


# --- the decisions ------------------------------------------------------------------------


def test_a_repeat_is_counted_on_the_event_posted_first() -> None:
    c = Correlator()
    first = c.observe(REF, "Warning", "RetryingAfterError", "boom", T0)
    assert isinstance(first, Create) and first.message == "boom"
    assert first.name == f"rmi.{int(T0 * 1e9):x}"  # client-go's naming: no generateName needed
    assert c.observe(REF, "Warning", "RetryingAfterError", "boom", T0 + 30) == Aggregate(first.name, 2, "boom")
    assert c.observe(REF, "Warning", "RetryingAfterError", "boom", T0 + 60) == Aggregate(first.name, 3, "boom")


def test_the_same_event_within_a_second_is_dropped_not_counted() -> None:
    c = Correlator()
    first = c.observe(REF, "Normal", "Submitted", "created", T0)
    assert isinstance(first, Create)
    assert c.observe(REF, "Normal", "Submitted", "created", T0 + 0.5) == Drop()
    assert c.observe(REF, "Normal", "Submitted", "created", T0 + 0.99) == Drop()
    # the second runs from the last one written: a steady stream is counted once a second,
    # not hidden for as long as it lasts
    assert c.observe(REF, "Normal", "Submitted", "created", T0 + 1.0) == Aggregate(first.name, 2, "created")
    assert c.observe(REF, "Normal", "Submitted", "created", T0 + 1.5) == Drop()
    assert c.observe(REF, "Normal", "Submitted", "created", T0 + 2.2) == Aggregate(first.name, 3, "created")


def test_anything_else_that_differs_is_another_event() -> None:
    c = Correlator()
    names = set()
    for ref, kind, reason, message in (
        (REF, "Warning", "InvalidSpec", "bad"),
        ({**REF, "uid": "u-2"}, "Warning", "InvalidSpec", "bad"),  # a namesake created later
        (REF, "Normal", "InvalidSpec", "bad"),
        (REF, "Warning", "NameConflict", "bad"),
        (REF, "Warning", "InvalidSpec", "worse"),
    ):
        decision = c.observe(ref, kind, reason, message, T0)  # one instant: no duplicate among them
        assert isinstance(decision, Create), (kind, reason, message)
        names.add(decision.name)
    assert len(names) == 5, "each its own Event object, even when created in one nanosecond"


def test_messages_that_change_every_time_are_combined_like_client_go() -> None:
    c = Correlator(similar_limit=4, similar_window=600)
    decisions = [c.observe(REF, "Warning", "Logging", f"failed (attempt {n})", T0 + 30 * n) for n in range(1, 7)]
    separate, combined = decisions[:3], decisions[3:]
    assert all(isinstance(d, Create) for d in separate) and len({d.name for d in separate}) == 3
    fourth = combined[0]
    assert fourth == Create(fourth.name, COMBINED + "failed (attempt 4)")
    assert combined[1:] == [
        Aggregate(fourth.name, 2, COMBINED + "failed (attempt 5)"),
        Aggregate(fourth.name, 3, COMBINED + "failed (attempt 6)"),
    ]
    # a message seen before the combining started is still counted on its own Event
    again = c.observe(REF, "Warning", "Logging", "failed (attempt 1)", T0 + 300)
    assert again == Aggregate(separate[0].name, 2, "failed (attempt 1)")
    # another reason is another group
    assert isinstance(c.observe(REF, "Warning", "Other", "failed (attempt 7)", T0 + 330), Create)


def test_similar_messages_are_counted_afresh_after_the_window() -> None:
    c = Correlator(similar_limit=3, similar_window=600)
    assert [type(c.observe(REF, "Warning", "Logging", f"m{n}", T0 + n * 10)) for n in range(4)] == [
        Create,
        Create,
        Create,  # m2: the combined Event
        Aggregate,  # m3, counted on it
    ]
    later = c.observe(REF, "Warning", "Logging", "m4", T0 + 700)  # the window (from m0) is over
    assert later == Create(later.name, "m4")


def test_the_cache_is_bounded_and_forgets_the_oldest() -> None:
    c = Correlator(limit=2)
    first = c.observe({**REF, "uid": "a"}, "Normal", "R", "m", T0)
    c.observe({**REF, "uid": "b"}, "Normal", "R", "m", T0)
    c.observe({**REF, "uid": "c"}, "Normal", "R", "m", T0)
    assert max(len(c._posted), len(c._last_seen), len(c._similar)) == 2
    again = c.observe({**REF, "uid": "a"}, "Normal", "R", "m", T0 + 10)
    assert isinstance(again, Create) and again.name != first.name, "forgotten: posted anew"
    assert isinstance(c.observe({**REF, "uid": "c"}, "Normal", "R", "m", T0 + 10), Aggregate)


def test_a_forgotten_event_is_created_again() -> None:
    c = Correlator()
    first = c.observe(REF, "Normal", "R", "m", T0)
    assert isinstance(first, Create)
    c.forget(first.name)
    again = c.observe(REF, "Normal", "R", "m", T0 + 5)
    assert isinstance(again, Create) and again.name != first.name


def test_names_fit_the_api_server() -> None:
    decision = Correlator().observe({**REF, "name": "x" * 253}, "Normal", "R", "m", T0)
    assert isinstance(decision, Create) and len(decision.name) == NAME_LIMIT
    assert decision.name.endswith(f".{int(T0 * 1e9):x}")


def test_types_and_messages() -> None:
    assert [event_type(t) for t in ("Normal", "Warning", "Error", "Fatal")] == ["Normal"] + ["Warning"] * 3
    long = "head " + "x" * 3000 + " the cause"
    assert len(cut(long)) == MESSAGE_LIMIT and cut(long).startswith("head ") and cut(long).endswith(" the cause")
    assert cut("short") == "short"
    assert rfc3339(T0) == "2026-09-21T14:13:20Z"
    assert object_ref(body()) == REF


# --- the recorder: what reaches the API server ---------------------------------------------


class FakeCluster:
    """``Cluster``'s event methods, recording the calls; ``gone`` names answer 404."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.gone: set[str] = set()
        self.fail_create = 0
        self.terminating = False

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        if self.terminating:  # what the API server answers in a namespace being deleted
            refused = ApiException(status=403, reason="Forbidden")
            refused.body = f"unable to create new content in namespace {namespace} because it is being terminated"
            raise refused
        if self.fail_create:
            self.fail_create -= 1
            raise RuntimeError("API server unavailable")
        self.calls.append(("create", namespace, body))

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        if name in self.gone:
            return False
        self.calls.append(("patch", f"{namespace}/{name}", patch))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def recorded() -> Iterator[tuple[EventRecorder, FakeCluster, Clock]]:
    cluster, clock = FakeCluster(), Clock()
    recorder = EventRecorder(lambda: cluster, instance="kappa-operator-7d9f-abcde", clock=clock)  # type: ignore[arg-type,return-value]
    yield recorder, cluster, clock
    assert recorder.flush()


def test_an_error_is_a_warning_reported_by_the_operator(recorded: tuple[EventRecorder, FakeCluster, Clock]) -> None:
    recorder, cluster, _ = recorded
    recorder.event(body(), "Error", "RetryingAfterError", "boom")
    assert recorder.flush()
    [(verb, namespace, event)] = cluster.calls
    assert verb == "create" and namespace == "jobs"
    assert event["type"] == "Warning" and event["reason"] == "RetryingAfterError" and event["message"] == "boom"
    assert event["source"] == {"component": COMPONENT} and event["reportingComponent"] == COMPONENT
    assert event["reportingInstance"] == "kappa-operator-7d9f-abcde"
    assert event["involvedObject"] == REF
    assert event["count"] == 1 and event["firstTimestamp"] == event["lastTimestamp"] == rfc3339(T0)
    assert event["metadata"] == {"name": f"rmi.{int(T0 * 1e9):x}", "namespace": "jobs"}


def test_repeats_patch_the_event_and_duplicates_are_not_written(
    recorded: tuple[EventRecorder, FakeCluster, Clock],
) -> None:
    recorder, cluster, clock = recorded
    for step in (0, 0.2, 30, 30.1, 60):  # a handler retried every 30 s, each also said twice
        clock.now = T0 + step
        recorder.event(body(), "Warning", "RetryingAfterError", "boom")
    assert recorder.flush()
    name = cluster.calls[0][2]["metadata"]["name"]
    assert [(verb, where) for verb, where, _ in cluster.calls] == [
        ("create", "jobs"),
        ("patch", f"jobs/{name}"),
        ("patch", f"jobs/{name}"),
    ]
    assert [c[2] for c in cluster.calls[1:]] == [
        {"count": 2, "lastTimestamp": rfc3339(T0 + 30), "message": "boom"},
        {"count": 3, "lastTimestamp": rfc3339(T0 + 60), "message": "boom"},
    ]


def test_an_expired_event_is_created_again_with_its_count(recorded: tuple[EventRecorder, FakeCluster, Clock]) -> None:
    recorder, cluster, clock = recorded
    recorder.event(body(), "Normal", "Queued", "waiting")
    assert recorder.flush()
    name = cluster.calls[0][2]["metadata"]["name"]
    cluster.gone.add(name)
    clock.now = T0 + 4000
    recorder.event(body(), "Normal", "Queued", "waiting")
    assert recorder.flush()
    verb, _, again = cluster.calls[-1]
    assert verb == "create" and again["metadata"]["name"] == name and again["count"] == 2


def test_a_failed_create_is_logged_and_the_next_one_tried_afresh(
    recorded: tuple[EventRecorder, FakeCluster, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    recorder, cluster, clock = recorded
    cluster.fail_create = 1
    with caplog.at_level(logging.WARNING, "kappa.operator"):
        recorder.event(body(), "Warning", "NameConflict", "taken")
        assert recorder.flush()
    assert cluster.calls == [] and "could not post the event Warning NameConflict" in caplog.text
    clock.now = T0 + 60
    recorder.event(body(), "Warning", "NameConflict", "taken")
    assert recorder.flush()
    assert [(verb, e["count"]) for verb, _, e in cluster.calls] == [("create", 1)], "not a patch of nothing"


def test_a_namespace_being_deleted_is_no_warning(
    recorded: tuple[EventRecorder, FakeCluster, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    """Its 403 is the API server refusing new objects there, not a gap in the chart's RBAC."""
    recorder, cluster, _ = recorded
    cluster.terminating = True
    with caplog.at_level(logging.INFO, "kappa.operator"):
        recorder.event(body(), "Normal", "Stopped", "deleted")
        assert recorder.flush()
    assert [r.levelname for r in caplog.records] == ["INFO"], caplog.text
    assert "its namespace is being deleted" in caplog.text


def test_no_event_about_an_event(recorded: tuple[EventRecorder, FakeCluster, Clock]) -> None:
    recorder, cluster, _ = recorded
    recorder.record({"apiVersion": "v1", "kind": "Event", "name": "x", "namespace": "jobs"}, "Normal", "R", "m")
    assert recorder.flush() and cluster.calls == []


def test_the_pod_name_is_the_reporting_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", "kappa-operator-5c8b-xk2lq")
    assert EventRecorder(lambda: FakeCluster()).instance == "kappa-operator-5c8b-xk2lq"  # type: ignore[arg-type,return-value]
    monkeypatch.delenv("HOSTNAME")
    cluster = FakeCluster()
    recorder = EventRecorder(lambda: cluster)  # type: ignore[arg-type,return-value]
    recorder.event(body(), "Normal", "R", "m")
    assert recorder.flush() and "reportingInstance" not in cluster.calls[0][2]


# --- kopf's own log lines ------------------------------------------------------------------


class Recorded:
    def __init__(self) -> None:
        self.records: list[tuple[dict[str, str], str, str, str]] = []

    def record(self, ref: dict[str, str], kind: str, reason: str, message: str) -> None:
        self.records.append((dict(ref), kind, reason, message))


@pytest.fixture
def kopf_events() -> Iterator[Recorded]:
    sink = Recorded()
    handler = route_kopf_logs(lambda: sink)  # type: ignore[arg-type,return-value]
    yield sink
    logging.getLogger(KOPF_OBJECTS).removeHandler(handler)


def test_a_handler_failure_logged_by_kopf_is_a_warning_event(kopf_events: Recorded) -> None:
    settings = kopf.OperatorSettings()
    logger = kopf.ObjectLogger(body=kopf.Body(body()), settings=settings)
    logger.error("Handler 'backfill_timer' failed temporarily: boom")
    logger.warning("Patching failed with inconsistencies")
    logger.info("Handler 'backfill_timer' succeeded.")  # routine: not an Event
    kopf.LocalObjectLogger(body=kopf.Body(body()), settings=settings).error("kept to the log")
    logging.getLogger(KOPF_OBJECTS).error("about no object")
    assert [(r[1], r[2], r[3]) for r in kopf_events.records] == [
        ("Warning", "Logging", "Handler 'backfill_timer' failed temporarily: boom"),
        ("Warning", "Logging", "Patching failed with inconsistencies"),
    ]
    assert all(r[0]["uid"] == "u-1" and r[0]["kind"] == "Backfill" for r in kopf_events.records)


def test_settings_leave_kopf_posting_nothing_and_route_its_logs_once() -> None:
    logger = logging.getLogger(KOPF_OBJECTS)
    before = [h for h in logger.handlers if isinstance(h, KopfLogEvents)]
    try:
        runner.settings()
        s = runner.settings()
        assert s.posting.enabled is False
        assert len([h for h in logger.handlers if isinstance(h, KopfLogEvents)]) == 1
    finally:
        for h in [h for h in logger.handlers if isinstance(h, KopfLogEvents)]:
            logger.removeHandler(h)
        for h in before:
            logger.addHandler(h)
