"""A patch the API server refuses is reported and retried, never a silent wait (issue 27,
Fix 2 and 3).

kopf adds and removes its finalizer with a JSON patch guarded by a ``test`` of the
resourceVersion, and reads every 422 answer to it as that test failing: "conflicts with newer
changes, will try on the next cycle". But kube-apiserver answers 422 also when it refuses the
update itself (a CEL rule, the schema, a ValidatingAdmissionPolicy). Nothing then changes on the
object, no next cycle comes, and kopf logs only at DEBUG: the object is ignored for good, with
no status, event or log, and a deleted one keeps its finalizer forever.

The two answers differ: a failed ``test`` is a bare ``Invalid`` Status without details, a
refusal names the object and its causes. :func:`install` wraps kopf's patch call: a refused
JSON patch is logged as a warning on the object's logger (our events module makes it a Warning
Event on the object, counted, not repeated) and sent again with backoff, in that object's own
worker, until the server takes it (the finalizer is added or goes), the object is gone, or it
changed (the guard's ``test`` then fails and kopf handles the change as usual).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from kopf._cogs.clients import api, errors

JSON_PATCH = "application/json-patch+json"


BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""Seconds between sends of a refused patch; the last repeats."""


def is_refusal(error: errors.APIUnprocessableEntityError) -> bool:
    """A 422 with details (the object, causes): the update was refused; a bare one without
    details is a failed JSON-patch ``test`` (someone changed the object first)."""
    details = error.details or {}
    return bool(details.get("causes") or details.get("name"))


def report(logger: Any, exc: errors.APIError) -> None:
    """A warning about the object, also as an Event: kopf hands its patching a logger that keeps
    to the log (``k8s_skip``), so the record goes to the logger beneath it with the object."""
    message = (
        f"the API server refuses the operator's patch: {exc.message}; it is sent again with backoff "
        "until taken (the finalizer cannot be added or removed before)"
    )
    extra = dict(getattr(logger, "extra", None) or {})
    target = getattr(logger, "logger", logger)
    if target is not None:
        target.warning(message, extra={**extra, "k8s_skip": False})


def refusing(
    patch: Callable[..., Awaitable[Any]], sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(patch)
    async def retried(url: str, *, headers: dict[str, str] | None = None, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            try:
                return await patch(url, headers=headers, **kwargs)
            except errors.APIUnprocessableEntityError as exc:
                if (headers or {}).get("Content-Type") != JSON_PATCH or not is_refusal(exc):
                    raise
                delay = BACKOFF[min(attempt, len(BACKOFF) - 1)]
                attempt += 1
                report(kwargs.get("logger"), exc)
                await sleep(delay)

    retried.__kappa_refusing__ = True  # type: ignore[attr-defined]
    return retried


def install() -> None:
    """Idempotent: kopf's patching module calls ``api.patch`` through the module."""
    if not getattr(api.patch, "__kappa_refusing__", False):
        api.patch = refusing(api.patch)  # type: ignore[assignment]
