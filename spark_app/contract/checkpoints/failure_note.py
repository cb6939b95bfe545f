"""The note a driver leaves beside a sink's snapshots while its last copy failed, and how the
operator reads it. Kept apart from ``driver`` (which runs in Spark) so the operator reads it
without importing PySpark."""

from __future__ import annotations

import json

from spark_app.contract.storage import REPORT_DIR, Location

FAILURE = f"{REPORT_DIR}/externalize-failure.json"
"""Beside a sink's snapshots while its last copy failed (the operator shows it in the job's
status: a log line in a driver pod is not where people look); removed by the next copy that
succeeds."""


def read_failure(external: Location) -> dict[str, str] | None:
    """The note of a failed copy at ``external`` (None: the last copy succeeded)."""
    if external.stat(FAILURE) is None:
        return None
    return dict(json.loads(external.read_bytes(FAILURE)))
