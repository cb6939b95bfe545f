"""The operator killed in the middle of a reconcile, right after it created a SparkApplication
and before it recorded anything (``KAPPA_OPERATOR_FAULT=exit-after-create-app``), then
started again: nothing is created twice, status catches up, and a backfill's alignment group
is declared again in the new process's coordinator.

The operator runs as ``kappa operator`` in a subprocess against the kmock emulator: a real
process exit, as a pod restart would be."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest

from tests.operator.apiserver import ApiServer
from tests.operator.kube import APPS, BACKFILLS, CMS, JOBS, Api, eventually, manifest, register

TOKEN = "restart-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def creates(emulator: kmock.KubernetesEmulator, collection: str) -> int:
    """POSTs the operator sent to create objects in ``collection`` (successful or not)."""
    return sum(1 for r in list(emulator) if str(r.method).upper().endswith("POST") and r.url.path == collection)


def watching(emulator: kmock.KubernetesEmulator, since: int) -> set[str]:
    """Resources a process started after request ``since`` watches."""
    return {r.url.path.rsplit("/", 1)[-1] for r in list(emulator)[since:] if r.params.get("watch") in ("true", "1")}


async def start(
    base: str,
    port: int,
    log: Path,
    emulator: kmock.KubernetesEmulator,
    fault: str | None = None,
    refused: Path | None = None,
    flags: tuple[str, ...] = (),
) -> Any:
    """``kappa operator`` as its own process; with ``refused``, every function that reads rows
    or copies files raises in it and the refused calls are listed in that file."""
    since = len(list(emulator))
    env = {**os.environ, "KAPPA_COORDINATOR_TOKEN": TOKEN}
    env.pop("KAPPA_OPERATOR_FAULT", None)
    if fault:
        env["KAPPA_OPERATOR_FAULT"] = fault
    args = ["-m", "kappa_operator.cli", "operator", "--server", base, "--namespace", "default", *flags]
    if refused is not None:  # the repository on the path last: its operator/ must not shadow the stdlib's
        env["KAPPA_TEST_REFUSED"] = str(refused)
        root = str(Path(__file__).resolve().parents[2])
        run = (
            f"import runpy, sys; sys.path.append({root!r}); "
            "runpy.run_module('tests.operator.refusing_operator', run_name='__main__')"
        )
        args = ["-c", run, *args[2:]]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        "--coordinator-bind",
        f"127.0.0.1:{port}",
        env=env,
        stdout=log.open("ab"),
        stderr=asyncio.subprocess.STDOUT,
    )

    async def ready() -> bool:
        assert proc.returncode is None, f"the operator exited early: {log.read_text()[-2000:]}"
        return {"streamingjobs", "backfills", "sparkapplications"} <= watching(emulator, since)

    await eventually(ready, "the operator's watches", 60)
    return proc


async def stop(proc: Any) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@pytest.mark.asyncio
@pytest.mark.kmock(cls=ApiServer)
async def test_restart_mid_reconcile_creates_nothing_twice(kmock: kmock.KubernetesEmulator, tmp_path: Path) -> None:
    register(kmock)
    base = str(kmock.url).rstrip("/")
    log = tmp_path / "operator.log"
    procs: list[Any] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        api = Api(base, http)

        async def status(path: str) -> dict[str, Any]:
            return ((await api.get(path)) or {}).get("status") or {}

        try:
            # 1. a StreamingJob: the first process dies right after creating the application
            procs.append(first := await start(base, free_port(), log, kmock, "exit-after-create-app"))
            await api.post(JOBS, manifest("rmi-streamingjob.yaml", "uid-rmi"))
            assert await asyncio.wait_for(first.wait(), 60) == 137
            assert await api.get(f"{APPS}/rmi") is not None and await status(f"{JOBS}/rmi") == {}

            procs.append(second := await start(base, free_port(), log, kmock))
            await eventually(lambda: _phase(status, f"{JOBS}/rmi", "Submitted"), "the job's status after restart")
            assert creates(kmock, APPS) == 1, "the restarted operator did not create the application again"
            assert creates(kmock, CMS) == 1
            await stop(second)

            # 2. a Backfill: the same, and the new process declares its alignment group again
            port = free_port()
            procs.append(third := await start(base, port, log, kmock, "exit-after-create-app"))
            await api.post(BACKFILLS, manifest("rmi-backfill.yaml", "uid-bf-restart"))
            assert await asyncio.wait_for(third.wait(), 60) == 137
            assert (
                await api.get(f"{APPS}/rmi-outage-backfill") is not None
                and await status(f"{BACKFILLS}/rmi-outage") == {}
            )

            port = free_port()
            procs.append(await start(base, port, log, kmock))
            await eventually(lambda: _phase(status, f"{BACKFILLS}/rmi-outage", "Running"), "the backfill after restart")
            assert creates(kmock, APPS) == 2, "one application per resource, none twice"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with http.get(f"http://127.0.0.1:{port}/v1/groups/default.rmi-outage", headers=headers) as r:
                assert r.status == 200, await r.text()
                group = await r.json()
            assert sorted(group["declared"]) == [
                "rmi-outage/attributed_plays/impressions",
                "rmi-outage/attributed_plays/playbacks",
            ]
        finally:
            for p in procs:
                await stop(p)


async def _phase(status: Any, path: str, phase: str) -> bool:
    return (await status(path)).get("phase") == phase
