"""The coordinator service as its clients call it over HTTP in the tests: the token, a minute
in microseconds, a raw call, a group declared, and the Spark side's real provider."""

from __future__ import annotations

import http.client
import json
from typing import Any

from spark_app.alignment.http import HttpWatermarkProvider

TOKEN = "s3cret"


MIN = 60_000_000


def call(
    url: str, method: str, path: str, body: Any = None, token: str | None = TOKEN, raw: bytes | None = None
) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    conn.request(method, path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    conn.close()
    try:
        return resp.status, json.loads(payload)
    except json.JSONDecodeError:
        return resp.status, payload.decode()


def declare(url: str, group: str = "g", members: tuple[str, ...] = ("a", "b"), drift: str = "5m", **extra: Any) -> None:
    status, body = call(url, "PUT", f"/v1/groups/{group}", {"members": list(members), "maxDrift": drift, **extra})
    assert status == 200, body


def provider(url: str, group: str = "g", timeout: float = 5.0, token: str | None = TOKEN) -> HttpWatermarkProvider:
    return HttpWatermarkProvider(url, group, token, unavailable_timeout=timeout, request_timeout=2.0)
