"""The periodic looks (``handlers.followers``): the schedule's timing is kopf's timers' (first
look after the initial delay, the next an interval after a look ends, a retry's delay, nothing
once the look no longer applies), and the loop runs looks over an index as kopf keeps it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import kopf
import pytest

from kappa_operator.handlers.followers import Look, LookLoop, Schedule, Stopped, trimmed
from kappa_operator.kube.packed import packed, unpacked
from tests.unit.watched_bodies import watched_job


def test_a_followed_object_is_due_after_the_initial_delay_then_an_interval_after_each_run() -> None:
    s = Schedule(interval=5.0, initial_delay=2.0)
    s.seen("a", True, now=100.0)
    assert s.next_due() == 102.0
    assert s.take(101.9, limit=10) == []
    assert s.take(102.0, limit=10) == ["a"]
    s.seen("a", True, now=103.0)  # an event while it runs: not scheduled twice
    assert s.next_due() is None and s.take(200.0, 10) == []
    s.finished("a", now=104.0, followed=True, retry_after=None)
    assert s.next_due() == 109.0, "the interval counts from the run's end"


def test_a_retry_waits_its_delay_and_counts_until_a_run_succeeds() -> None:
    s = Schedule(interval=30.0)
    s.seen("a", True, now=0.0)
    assert s.take(0.0, 1) == ["a"]
    s.finished("a", now=1.0, followed=True, retry_after=3.0)
    assert s.next_due() == 4.0 and s.retries["a"] == 1
    assert s.take(4.0, 1) == ["a"]
    s.finished("a", now=5.0, followed=True, retry_after=3.0)
    assert s.retries["a"] == 2
    assert s.take(8.0, 1) == ["a"]
    s.finished("a", now=9.0, followed=True, retry_after=None)
    assert "a" not in s.retries and s.next_due() == 39.0


def test_an_object_no_longer_followed_is_dropped_and_starts_over_when_it_is_again() -> None:
    s = Schedule(interval=5.0, initial_delay=1.0)
    s.seen("a", True, now=0.0)
    s.seen("a", False, now=0.5)
    assert s.next_due() is None and s.take(10.0, 1) == []
    s.seen("a", True, now=10.0)
    assert s.next_due() == 11.0, "followed again: the initial delay again, as a new kopf timer"
    assert s.take(11.0, 1) == ["a"]
    s.seen("a", False, now=11.5)  # stops applying while it runs: not scheduled after
    s.finished("a", now=12.0, followed=False, retry_after=None)
    assert s.next_due() is None


def test_at_most_the_limit_runs_at_once_oldest_due_first() -> None:
    s = Schedule(interval=5.0)
    for i, key in enumerate("cba"):
        s.seen(key, True, now=float(i), spread=0.0)
    assert s.take(10.0, limit=2) == ["c", "b"]
    assert s.take(10.0, limit=2) == ["a"]


def test_the_trimmed_copy_keeps_what_a_look_reads_and_drops_the_copies_of_the_spec() -> None:
    body = watched_job()
    t = trimmed(body)
    meta = body["metadata"]
    kept = {k: v for k, v in meta.items() if k not in ("managedFields", "annotations")}
    light = {k: v for k, v in meta["annotations"].items() if "kubectl" not in k}
    assert t["metadata"] == {**kept, "annotations": light}
    assert "kappa.dev/paused" in t["metadata"]["annotations"] and "finalizers" in t["metadata"]
    assert t["status"] == {"phase": "Running"} and t["spec"] is body["spec"]
    assert body["metadata"]["managedFields"] and "kopf" in body["status"], "the event's own body is not changed"
    copy = packed(t)
    assert unpacked(copy) == t and unpacked(copy) is not unpacked(copy), "each look decodes a copy of its own"
    assert b" " not in copy and len(copy) < len(json.dumps(body)) / 3, "compact, and without what it drops"


def _body(name: str, phase: str = "Running", deleting: bool = False, uid: str = "u1") -> bytes:
    meta: dict[str, Any] = {"name": name, "namespace": "n", "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    return packed(trimmed({"metadata": meta, "status": {"phase": phase}}))


def _loop(look: Look, index: dict[Any, list[bytes]]) -> LookLoop:
    loop = LookLoop(look, index, None, {}, asyncio.get_running_loop().time)
    loop.started -= 100.0  # not a (re)start: no spread
    return loop


def test_the_loop_runs_each_followed_object_never_two_at_once_and_stops_a_deleted_ones_look() -> None:
    async def scenario() -> None:
        calls: list[tuple[str, int]] = []
        inside: set[str] = set()
        overlap: list[str] = []
        release = asyncio.Event()

        async def look(body: dict[str, Any], stopped: Stopped, retry: int, **_: Any) -> None:
            name = body["metadata"]["name"]
            if name in inside:
                overlap.append(name)
            inside.add(name)
            calls.append((name, retry))
            try:
                if name == "slow":
                    await stopped.wait()  # until its object is being deleted
                    release.set()
                elif name == "flaky" and retry < 2:
                    raise kopf.TemporaryError("not yet", delay=0.05)
            finally:
                inside.discard(name)

        index = {("n", k): [_body(k)] for k in ("a", "slow", "flaky")}
        index[("n", "done")] = [_body("done", phase="Succeeded")]
        when = lambda b: b["status"]["phase"] == "Running"  # noqa: E731
        loop = _loop(Look("backfills", look, interval=0.2, when=when), index)
        task = asyncio.create_task(loop.run())
        await asyncio.sleep(0.7)
        index[("n", "slow")] = [_body("slow", deleting=True)]
        loop.changed(("n", "slow"))
        await asyncio.wait_for(release.wait(), 2.0)
        task.cancel()
        names = [n for n, _ in calls]
        assert "done" not in names, "`when` does not hold: never looked at"
        assert names.count("slow") == 1 and overlap == [], "one look at a time per object"
        assert 2 <= names.count("a") <= 5, "every interval after the last run ended"
        assert [r for n, r in calls if n == "flaky"][:3] == [0, 1, 2], "retried after its delay, counted"

    asyncio.run(scenario())


def test_a_sync_look_runs_in_the_executor_and_wait_idle_waits_for_it() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kappa_operator.handlers.followers import Following

    async def scenario() -> None:
        started, finish = threading.Event(), threading.Event()
        threads: list[str] = []

        def look(body: dict[str, Any], **_: Any) -> None:
            threads.append(threading.current_thread().name)
            started.set()
            finish.wait(5)

        index = {("n", "a"): [_body("a")]}
        following = Following(asyncio.get_running_loop())
        look_loop = LookLoop(Look("rewinds", look, 10.0), index, ThreadPoolExecutor(1, "looks"), {}, time.monotonic)
        look_loop.started -= 100.0  # not a (re)start: no spread
        following.start([look_loop])
        await asyncio.to_thread(started.wait, 5)
        assert threads and threads[0].startswith("looks")
        assert not await asyncio.to_thread(following.wait_idle, "rewinds", ("n", "a"), 0.1), "still running"
        threading.Timer(0.2, finish.set).start()
        assert await asyncio.to_thread(following.wait_idle, "rewinds", ("n", "a"), 5.0)
        await following.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_an_interval_must_be_positive(interval: float) -> None:
    from kappa_operator.handlers.followers import every

    with pytest.raises(ValueError, match="interval"):
        every("backfills", interval)


def test_a_loop_whose_slots_are_all_taken_waits_for_a_run_to_end_instead_of_spinning() -> None:
    async def scenario() -> None:
        release = asyncio.Event()
        ran: list[str] = []

        async def look(body: dict[str, Any], **_: Any) -> None:
            ran.append(body["metadata"]["name"])
            await release.wait()

        index = {("n", k): [_body(k)] for k in ("a", "b", "c")}
        loop = LookLoop(Look("backfills", look, 0.01), index, None, {}, asyncio.get_running_loop().time, running=1)
        loop.started -= 100.0
        passes = 0
        observe = loop._observe

        def counting(now: float) -> None:
            nonlocal passes
            passes += 1
            observe(now)

        loop._observe = counting  # type: ignore[method-assign]
        task = asyncio.create_task(loop.run())
        await asyncio.sleep(0.5)
        assert len(loop.runs) == 1 and len(ran) == 1 and passes <= 3, f"{passes} passes while the one slot was taken"
        release.set()
        for _ in range(200):  # a loaded machine (the whole suite on 2 cores) may take seconds, not 0.5
            if set(ran) == {"a", "b", "c"}:
                break
            await asyncio.sleep(0.05)
        task.cancel()
        assert set(ran) == {"a", "b", "c"}, "a run's end wakes the loop, which starts the next due"

    asyncio.run(scenario())
