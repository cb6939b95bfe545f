"""A watermark provider over HTTP: the coordinator service (groups spanning queries and jobs).

The source reports after each admission decision and uses the answer; a report after an
admission also carries the member's cumulative read bytes and files (the read rate). When the
coordinator cannot be reached, the source keeps the last view it was given (so it admits
nothing beyond the last bound), retries with backoff on its next call, logs, and fails the
query only once the coordinator has been unreachable for ``unavailable_timeout``.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
from dataclasses import replace
from urllib.parse import quote, urlsplit

from spark_app.contract.alignment import HELD, GroupView, ReadCount
from spark_app.contract.errors import KappaError

log = logging.getLogger("kappa.alignment")

_REPORTED: dict[tuple[str, str], dict[str, dict[str, object]]] = {}
"""The last report of each member this process made, by coordinator and group. A restarted coordinator has lost
its members' progress (it is never stored) and answers them `missing`: the process reports them
again at once, since a sibling source of the same query is asked again only in the next batch,
and under AvailableNow a batch in which every source was held ends the query unread."""


class CoordinatorUnavailableError(KappaError):
    """The coordinator stayed unreachable for longer than the configured timeout."""


class CoordinatorRejectedError(KappaError):
    """The coordinator refused a report (bad token, unknown group or member, regression)."""


class HttpWatermarkProvider:
    def __init__(
        self,
        url: str,
        group: str,
        token: str | None,
        unavailable_timeout: float,
        request_timeout: float = 5.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"coordinator.url {url!r}: expected http(s)://host:port")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.path = f"{parts.path.rstrip('/')}/v1/groups/{quote(group, safe='')}/reports"
        # In a cluster the token comes from a Secret through the driver's environment.
        self.group, self.token = group, token or os.environ.get("KAPPA_COORDINATOR_TOKEN")
        self.unavailable_timeout, self.request_timeout = unavailable_timeout, request_timeout
        self._conn: http.client.HTTPConnection | None = None
        self._last: GroupView | None = None
        self._failing_since: float | None = None
        self._attempt = 0
        self._send_reads = True

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self.host, self.port, timeout=self.request_timeout)
        return self._conn

    def _post(self, body: dict[str, object]) -> dict[str, object]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = self._connection()
        try:
            conn.request("POST", self.path, body=json.dumps(body), headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            self._conn = None
            raise
        if resp.status >= 500:
            raise OSError(f"coordinator answered {resp.status}")
        data = json.loads(payload or b"{}")
        if resp.status != 200:
            raise CoordinatorRejectedError(f"coordinator refused the report of group {self.group}: {data.get('error')}")
        return data

    def report(
        self,
        member: str,
        watermark: int | None,
        throttled: bool = False,
        reset: bool = False,
        read: ReadCount | None = None,
    ) -> GroupView:
        body: dict[str, object] = {
            "member": member,
            "watermark": watermark,
            "finished": watermark is None,
            "throttled": throttled,
        }
        if reset:
            body["reset"] = True
        if read is not None and self._send_reads:
            body["readBytes"], body["readFiles"] = read.bytes, read.files
        try:
            try:
                data = self._reported_again(member, body, self._post(body))
            except CoordinatorRejectedError as exc:
                if "readBytes" not in body or not any(f"{f}:" in str(exc) for f in ("readBytes", "readFiles")):
                    raise  # a refusal of something else (a group or member name may well hold "read")
                # A coordinator older than the read counts refuses unknown fields: alignment
                # matters, the counts do not, so report without them from now on.
                log.warning("the coordinator does not take read counts (%s); reporting without them", exc)
                self._send_reads = False
                del body["readBytes"], body["readFiles"]
                data = self._post(body)
        except (OSError, http.client.HTTPException, json.JSONDecodeError) as exc:
            return self._unreachable(exc)
        self._failing_since, self._attempt = None, 0
        held = bool(data.get("held"))
        gw = data.get("globalWatermark")
        global_watermark = HELD if held else (int(gw) if gw is not None else None)  # type: ignore[call-overload]
        # A coordinator older than admission rounds does not say: its global watermark is a
        # lower bound of the outside one, which allows no further rounds (safe).
        out = data.get("outsideWatermark", global_watermark) if not held else HELD
        self._last = GroupView(
            global_watermark,
            tuple(data.get("missing") or ()),  # type: ignore[arg-type]
            tuple(data.get("holders") or ()),  # type: ignore[arg-type]
            None if out is None else int(out),  # type: ignore[call-overload]
        )
        return self._last

    def _reported_again(self, member: str, body: dict[str, object], data: dict[str, object]) -> dict[str, object]:
        """The answer to ``body``; when it names members this process reported before as
        missing (the coordinator restarted), the answer after reporting them again."""
        mine = _REPORTED.setdefault((self.path, f"{self.host}:{self.port}"), {})
        mine[member] = {k: body[k] for k in ("member", "watermark", "finished", "throttled")}
        lost = [m for m in data.get("missing") or () if m in mine and m != member]  # type: ignore[attr-defined]
        if not lost:
            return data
        log.warning("the coordinator has no report of %s (restarted): reporting them again", ", ".join(lost))
        for m in lost:
            self._post(mine[m])
        return self._post(mine[member])

    def _unreachable(self, exc: BaseException) -> GroupView:
        now = time.monotonic()
        self._failing_since = self._failing_since or now
        down = now - self._failing_since
        if down > self.unavailable_timeout:
            raise CoordinatorUnavailableError(
                f"coordinator at {self.scheme}://{self.host}:{self.port} unreachable for {down:.0f}s "
                f"(coordinator.timeout {self.unavailable_timeout:.0f}s): {exc}"
            ) from exc
        pause = min(5.0, 0.1 * 2**self._attempt)
        self._attempt += 1
        log.warning("coordinator unreachable (%s); keeping the last bound, retrying in %.1fs", exc, pause)
        time.sleep(pause)
        # Nothing beyond the last bound: the last view, or held if there never was one.
        return replace(self._last, stale=True) if self._last is not None else GroupView(HELD, stale=True)
