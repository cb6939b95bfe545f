"""Snapshots the operator asks a running job for (``spec.snapshotTriggerNonce``, or the snapshot
before an upgrade), like Flink's triggered savepoints.

The operator writes the open requests into the job's control ConfigMap, which Kubernetes
mounts into the driver (``REQUESTS_FILE``): the operator needs no write access to the job's
storage, and the driver's own externalizer stays the only writer of its snapshots (a second
copier would race its garbage collection). The driver answers each request, per sink, next
to the snapshots (``<externalLocation>/<sink>/requests/<nonce>.json``: the batch it took); the
operator reads the answers into ``status.snapshots``. A requested snapshot is pinned: the
interval's retention never removes it (``pinned_batches``).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from spark_app.contract.storage import Location

log = logging.getLogger("kappa.checkpoints")
REQUESTS_FILE = "/etc/kappa/control/snapshot-requests"
"""Where the driver finds the operator's open requests (the control ConfigMap's key)."""
REQUESTS_KEY = "snapshot-requests"
ANSWERS = "requests"
NONCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class Answer(BaseModel):
    """One sink's snapshot for one request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nonce: str
    sink: str
    batch_id: int
    committed_at: datetime
    taken_at: datetime


def requests_text(nonces: list[str]) -> str:
    """The control ConfigMap's value for ``nonces`` (what ``read_requests`` parses)."""
    return json.dumps({"nonces": sorted(nonces)})


def read_requests(path: str | Path) -> list[str]:
    """The open requests (none when the file is absent: a local run, or no request yet). A
    malformed file is logged and read as none: a request never fails the live query."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("cannot read the snapshot requests at %s: %s", p, exc)
        return []
    return [n for n in data.get("nonces") or [] if isinstance(n, str) and NONCE.match(n)]


def answer_path(nonce: str) -> str:
    return f"{ANSWERS}/{nonce}.json"


def write_answer(external: Location, answer: Answer) -> None:
    external.write_bytes(answer_path(answer.nonce), answer.model_dump_json().encode())


def read_answer(external: Location, nonce: str) -> Answer | None:
    if external.stat(answer_path(nonce)) is None:
        return None
    try:
        return Answer.model_validate_json(external.read_bytes(answer_path(nonce)))
    except ValueError:
        log.warning("unreadable snapshot answer %s at %s", nonce, external.uri)
        return None


def pinned_batches(external: Location) -> set[int]:
    """Batches of answered requests: kept by retention however old."""
    out = set()
    for rel in external.list_files(ANSWERS):
        if rel.endswith(".json"):
            answer = read_answer(external, rel.rsplit("/", 1)[-1][: -len(".json")])
            if answer is not None:
                out.add(answer.batch_id)
    return out
