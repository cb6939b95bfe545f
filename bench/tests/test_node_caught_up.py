"""When bench/node.py takes the live job as caught up (issue 58): it measures the Backfill only
once the job has read the history, not while its catch-up shares the two cores."""

from __future__ import annotations

from typing import Any

from bench.node import caught_up


def job(*progress: dict[str, Any]) -> dict[str, Any]:
    return {"status": {"progress": list(progress)}}


def sink(batch: int | None, at: str, heartbeat: str | None) -> dict[str, Any]:
    return {"sink": "attributed_plays", "batchId": batch, "at": at, "lastHeartbeat": heartbeat}


def test_a_query_idle_after_its_last_batch_is_caught_up() -> None:
    assert caught_up(job(sink(7, "2026-11-30T05:00:00Z", "2026-11-30T05:00:31Z")))
    # restarted with nothing left to read: it idles without a batch of its own
    assert caught_up(job(sink(None, "2026-11-30T05:00:00Z", "2026-11-30T05:01:30Z")))


def test_a_query_still_reading_batch_after_batch_is_not() -> None:
    assert not caught_up(job(sink(3, "2026-11-30T05:00:00Z", "2026-11-30T05:00:00Z")))  # its first batch
    assert not caught_up(job(sink(3, "2026-11-30T05:00:00Z", None)))


def test_every_sink_query_must_be_idle_and_a_job_without_progress_is_not() -> None:
    idle = sink(7, "2026-11-30T05:00:00Z", "2026-11-30T05:00:31Z")
    reading = sink(2, "2026-11-30T05:00:30Z", "2026-11-30T05:00:30Z")
    assert not caught_up(job(idle, {**reading, "sink": "other"}))
    assert not caught_up(job()) and not caught_up({"status": None}) and not caught_up({})
