"""The coordinator as an HTTP service (aiohttp): thin handlers over the pure core.

Routes (JSON in and out; every route but the health checks needs ``Authorization: Bearer``),
with who may call them:

    GET    /healthz, /readyz                 anyone      liveness / readiness
    GET    /v1/groups                        admin       every group's view
    PUT    /v1/groups/{group}                admin       declare or update a group (GroupBody)
    GET    /v1/groups/{group}                its scope   the group's view, members and recent history
    DELETE /v1/groups/{group}                admin       remove it
    POST   /v1/groups/{group}/reports        its scope   a member's progress (ReportBody) -> AnswerBody
    GET    /metrics                          admin       Prometheus exposition

Two kinds of bearer token (scopes.py): the admin token the service is started with, which may
do everything (the operator's), and scoped tokens minted from it (``scoped_token``), one per
Backfill, which may only report to and read their own groups. Scoped tokens are denied by
default: a route is open to them only if listed in ``SCOPED_ROUTES``.

Errors are ``{"error": message}`` with 400 (bad body, group name, member id or watermark, see
names.py), 401 (missing or invalid token), 403 (a scoped token outside its groups, or on an
admin route), 404 (unknown group or member), 409 (watermark regression), 413 (body too large) or
503 (a replica of the operator that is not the leader).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from kappa_operator.coordinator.api import MAX_BODY_BYTES, AnswerBody, GroupBody, ReportBody, duration_micros
from kappa_operator.coordinator.core import Answer, Coordinator, MemberState, read_rate
from kappa_operator.coordinator.messages import (
    GroupSpec,
    Report,
    UnknownGroupError,
    UnknownMemberError,
    WatermarkRegressionError,
)
from kappa_operator.coordinator.metrics import CoordinatorMetrics
from kappa_operator.coordinator.names import check_group_name
from kappa_operator.coordinator.scopes import verify
from kappa_operator.coordinator.store import GroupStore
from kappa_operator.service.exposition import latest
from spark_app.contract.alignment import HELD

log = logging.getLogger("kappa.coordinator")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC = frozenset({"/healthz", "/readyz"})
SCOPED_ROUTES = frozenset({("GET", "/v1/groups/{group}"), ("POST", "/v1/groups/{group}/reports")})
"""(method, route) a scoped token may call, for a group in its scope; every other route is admin-only."""


SERVICE: web.AppKey[Service] = web.AppKey("service")


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class Service:
    """What the handlers share: the core, its metrics, the durable group store."""

    token: str
    store: GroupStore | None = None
    leading: bool = True
    """False on a replica that does not hold the operator's Lease (issue 62): it refuses every
    ``/v1/`` call with 503, which a driver answers by keeping its last bound and asking again,
    so no member is admitted by a coordinator whose groups are not the leader's."""
    declaring_until: float = 0.0
    """Until then (``time.monotonic``), an unknown group or member is answered 503, not 404: a
    new leader (or a restarted operator) declares the running Backfills' groups again as kopf
    resumes them, and a driver that asks first keeps its last bound and asks again instead of
    failing on a 404 its group will not deserve a moment later."""
    core: Coordinator = field(init=False)
    metrics: CoordinatorMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.core = Coordinator(on_event=self._event)
        self.metrics = CoordinatorMetrics(self.core)
        if self.store is not None:
            for spec in self.store.load():
                self.core.declare(spec, now_us())
                log.info(
                    "group %s restored with %d members (all hold until they re-report)", spec.name, len(spec.members)
                )

    def _event(self, group: str, kind: str, member: str) -> None:
        log.info("group %s: member %s %s", group, member, kind)

    def persist(self) -> None:
        if self.store is not None:
            self.store.save([s.spec for s in self.core.groups().values()])


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def denied(request: web.Request, service: Service) -> web.Response | None:
    """401 without a valid token, 403 for a scoped token off its groups; None: go ahead."""
    given = request.headers.get("Authorization", "")
    scope = verify(service.token, given[7:]) if given.startswith("Bearer ") else None
    if scope is None:
        service.metrics.rejected.labels("unauthorized").inc()
        return error(401, "missing or wrong bearer token (Authorization: Bearer <token>)")
    if request.match_info.http_exception is not None:  # no such route: the 404 or 405 says so
        return None
    group = request.match_info.get("group")
    if group is not None:
        try:
            check_group_name(group)
        except ValueError as exc:
            raise ValueError(f"group: {exc}") from None
    if scope.groups is None:
        return None
    route = request.match_info.route.resource.canonical if request.match_info.route.resource else request.path
    if (request.method, route) not in SCOPED_ROUTES or group is None:
        service.metrics.rejected.labels("forbidden").inc()
        return error(403, f"this token is {scope.describe()}; {request.method} {route} needs the admin token")
    if not scope.allows(group):
        service.metrics.rejected.labels("forbidden").inc()
        return error(403, f"this token is {scope.describe()}; group {group!r} is not one of them")
    return None


@web.middleware
async def errors_and_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    service: Service = request.app[SERVICE]
    try:
        if request.path not in PUBLIC and (refused := denied(request, service)) is not None:
            return refused
        if not service.leading and request.path.startswith("/v1/"):
            service.metrics.rejected.labels("not_leading").inc()
            return error(503, "this operator replica is not the leader: ask again (the Service routes to the leader)")
        return await handler(request)
    except web.HTTPRequestEntityTooLarge:
        service.metrics.rejected.labels("too_large").inc()
        return error(413, f"body larger than {MAX_BODY_BYTES} bytes")
    except ValidationError as exc:
        service.metrics.rejected.labels("bad_body").inc()
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            return error(400, f"malformed JSON body: {first['msg']}")
        where = ".".join(str(p) for p in first["loc"]) or "<body>"
        return error(400, f"{where}: {first['msg'].removeprefix('Value error, ')}")
    except ValueError as exc:  # not JSON, or a core validation error
        service.metrics.rejected.labels("bad_body").inc()
        return error(400, str(exc) or "malformed JSON body")
    except (UnknownGroupError, UnknownMemberError) as exc:
        if time.monotonic() < service.declaring_until:
            service.metrics.rejected.labels("declaring").inc()
            return error(503, f"{exc} yet: the coordinator is declaring its groups again (a new leader): ask again")
        service.metrics.rejected.labels("unknown").inc()
        return error(404, str(exc))
    except web.HTTPException:
        raise


async def raw_body(request: web.Request) -> bytes:
    """The body, parsed and validated by pydantic in one pass (``model_validate_json``)."""
    raw = await request.read()
    if not raw:
        raise ValueError("empty body: send a JSON object")
    return raw


def answer_json(a: Answer) -> dict[str, Any]:
    """AnswerBody's shape, built directly: this is the hot path (AnswerBody documents it)."""
    body = {
        "group": a.group,
        "globalWatermark": None if a.held else a.global_watermark,
        "bound": None if a.held else a.bound,
        "held": a.held,
        "missing": list(a.missing),
        "idle": list(a.idle),
        "finished": a.finished,
        "holders": list(a.holders),
    }
    if not a.held and a.outside != HELD:  # a reporter's answer; absent, a client allows no rounds
        body["outsideWatermark"] = a.outside
    return body


def member_json(m: MemberState, lag: int | None, now: int) -> dict[str, Any]:
    """A member in ``GET /v1/groups/{group}``; its reads only when it reports them."""
    out: dict[str, Any] = {"watermark": m.watermark, "finished": m.finished, "reports": m.reports, "lagUs": lag}
    if m.reads is not None:
        rate = read_rate(m, now)
        out.update(
            readBytes=m.reads.bytes,
            readFiles=m.reads.files,
            readBytesPerSecond=None if rate is None else round(rate[0], 1),
            readFilesPerSecond=None if rate is None else round(rate[1], 3),
        )
    return out


async def health(_: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def put_group(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    name = request.match_info["group"]
    body = GroupBody.model_validate_json(await raw_body(request))
    spec = GroupSpec(
        name=name,
        members=tuple(body.members),
        max_drift_us=duration_micros(body.max_drift),
        idle_timeout_us=duration_micros(body.idle_timeout) if body.idle_timeout is not None else None,
        self_register=body.self_register,
    )
    t = now_us()
    service.core.declare(spec, t)
    service.persist()
    return web.json_response(AnswerBody.of(service.core.view(name, t)).model_dump(by_alias=True))


async def get_group(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    name = request.match_info["group"]
    t = now_us()
    answer = service.core.view(name, t)
    state = service.core.state(name)
    members = {m: member_json(s, service.core.lag_us(name, m, t), t) for m, s in state.members.items()}
    try:
        limit = int(request.query.get("history", "1000"))
    except ValueError:
        raise ValueError(f"history: must be an integer, got {request.query['history']!r}") from None
    history = [list(h) for h in service.core.history(name)[-limit:]] if limit > 0 else []
    return web.json_response(
        {
            **AnswerBody.of(answer).model_dump(by_alias=True),
            "declared": list(state.spec.members),
            "maxDriftUs": state.spec.max_drift_us,
            "members": members,
            "history": history,
        }
    )


async def list_groups(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    t = now_us()
    return web.json_response(
        {"groups": [AnswerBody.of(service.core.view(n, t)).model_dump(by_alias=True) for n in service.core.groups()]}
    )


async def delete_group(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    name = request.match_info["group"]
    state = service.core.groups().get(name)
    if not service.core.delete(name):
        return error(404, f"no alignment group {name!r}")
    service.persist()
    service.metrics.forget(name, list(state.roster) if state else [])
    return web.json_response({"deleted": name})


async def post_report(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    started = time.perf_counter()
    name = request.match_info["group"]
    body = ReportBody.model_validate_json(await raw_body(request))
    report = Report(
        member=body.member,
        watermark=body.watermark,
        finished=body.finished,
        reset=body.reset,
        read_bytes=body.read_bytes,
        read_files=body.read_files,
    )
    t = now_us()
    try:
        answer = service.core.report(name, report, t)
    except WatermarkRegressionError as exc:
        service.metrics.rejected.labels("regression").inc()
        return error(409, str(exc))
    service.metrics.observe(name, body.member, body.throttled, time.time())
    service.metrics.report_latency.observe(time.perf_counter() - started)
    return web.json_response(answer_json(answer))


async def metrics(request: web.Request) -> web.Response:
    service: Service = request.app[SERVICE]
    resp = web.Response(body=latest(service.metrics.registry))
    resp.content_type = CONTENT_TYPE_LATEST.split(";")[0]
    return resp


def make_app(service: Service) -> web.Application:
    app = web.Application(middlewares=[errors_and_auth], client_max_size=MAX_BODY_BYTES)
    app[SERVICE] = service
    app.router.add_get("/healthz", health)
    app.router.add_get("/readyz", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/groups", list_groups)
    app.router.add_put("/v1/groups/{group}", put_group)
    app.router.add_get("/v1/groups/{group}", get_group)
    app.router.add_delete("/v1/groups/{group}", delete_group)
    app.router.add_post("/v1/groups/{group}/reports", post_report)
    return app


class EmbeddedCoordinator:
    """The service on its own event loop in a daemon thread (local runs, tests, the operator)."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0) -> None:
        self.service, self.host, self.port = service, host, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="kappa-coordinator", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> EmbeddedCoordinator:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        log.info("coordinator listening on %s", self.url)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(make_app(self.service), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server  # the bound port when 0 was asked for
        if server is not None and server.sockets:  # type: ignore[union-attr]
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> EmbeddedCoordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(service: Service, host: str, port: int) -> None:
    """Run in the foreground (``kappa coordinator``)."""
    web.run_app(make_app(service), host=host, port=port, access_log=None, print=lambda *_: None)
