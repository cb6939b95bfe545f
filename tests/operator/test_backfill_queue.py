"""Backfills sharing a cluster, through the operator (``kappa operator
--max-concurrent-backfills 2``, its own process, killed and started again as a pod would be)
against API-server semantics: five Backfills run two at a time in priority order (then age),
wait in phase Queued with their position, keep the same queue across the restart (it is read
from the objects), and a Backfill deleted while queued leaves the queue consistent."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from tests.operator.apiserver import ApiServer, events
from tests.operator.kube import (
    APPS,
    BACKFILLS,
    JOBS,
    Api,
    eventually,
    manifest,
    register,
    spark_state,
)
from tests.operator.test_operator_restart import free_port, start, stop

PRIORITIES = {"b1": 0, "b2": 0, "b3": 5, "b4": 1, "b5": 5}


def backfill(name: str, priority: int) -> dict[str, Any]:
    bf = manifest("rmi-backfill.yaml", f"uid-{name}", priority=priority, publish={"enabled": False})
    bf["metadata"]["name"] = name
    return bf


async def phases(api: Api) -> dict[str, tuple[str | None, int | None]]:
    listed = (await api.get(BACKFILLS)) or {}
    out = {}
    for item in listed.get("items") or []:
        status = item.get("status") or {}
        out[item["metadata"]["name"]] = (status.get("phase"), status.get("queuePosition"))
    return out


async def settled(api: Api, want: dict[str, tuple[str, int | None]]) -> bool:
    now = await phases(api)
    running = [n for n, (p, _) in now.items() if p == "Running"]
    assert len(running) <= 2, f"more than maxConcurrent running: {now}"
    return now == want


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_five_backfills_two_at_a_time_in_priority_order_through_a_restart(
    kmock: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    register(kmock)
    base = str(kmock.url).rstrip("/")
    log, flags = tmp_path / "operator.log", ("--max-concurrent-backfills", "2")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)
        proc = await start(base, free_port(), log, kmock, flags=flags)
        try:
            await api.post(JOBS, manifest("rmi-streamingjob.yaml", "uid-rmi"))
            for name, priority in PRIORITIES.items():
                await api.post(BACKFILLS, backfill(name, priority))
                await asyncio.sleep(1.1)  # creation times one second apart: age breaks priority ties
            queue = {
                "b1": ("Running", None),
                "b2": ("Running", None),
                "b3": ("Queued", 1),  # priority 5, older
                "b5": ("Queued", 2),  # priority 5
                "b4": ("Queued", 3),  # priority 1
            }
            await eventually(lambda: settled(api, queue), f"the queue {queue}", 60)
            assert await api.get(f"{APPS}/b3-backfill") is None, "a queued backfill has no application"
            b4 = ((await api.get(f"{BACKFILLS}/b4")) or {})["status"]
            assert "backfills.maxConcurrent 2 reached" in b4["message"] and b4["queuedSince"]
            assert "Queued" in [e.get("reason") for e in events(kmock, "b4")]

            # the operator restarts mid-queue: the queue is read from the objects, same order
            proc.kill()
            await proc.wait()
            proc = await start(base, free_port(), log, kmock, flags=flags)
            await asyncio.sleep(6.0)  # a timer round of the new process
            assert await settled(api, queue), await phases(api)

            # deleted while queued: the ones behind it move up
            await api.delete(f"{BACKFILLS}/b5")
            queue = {"b1": ("Running", None), "b2": ("Running", None), "b3": ("Queued", 1), "b4": ("Queued", 2)}
            await eventually(lambda: settled(api, queue), f"the queue without b5 {queue}", 30)

            # one finishes: the head of the queue starts, nobody else
            await spark_state(api, "b1-backfill", "COMPLETED")
            queue = {"b1": ("Succeeded", None), "b2": ("Running", None), "b3": ("Running", None), "b4": ("Queued", 1)}
            await eventually(lambda: settled(api, queue), f"b3 admitted {queue}", 30)
            assert await api.get(f"{APPS}/b3-backfill") is not None
            b3 = ((await api.get(f"{BACKFILLS}/b3")) or {})["status"]
            assert b3["startedAt"] >= b3["queuedSince"]

            await spark_state(api, "b2-backfill", "FAILED", "executor lost")
            queue = {
                "b1": ("Succeeded", None),
                "b2": ("Failed", None),
                "b3": ("Running", None),
                "b4": ("Running", None),
            }
            await eventually(lambda: settled(api, queue), f"b4 admitted {queue}", 30)
        finally:
            await stop(proc)
