"""What the API server keeps for the operator, kept in files for `kappa run`: per object its
uid, generation, annotations and status.

The operator's decisions read these (a Rewind's phase and chosen restore points, the
``kappa.dev/checkpoint-location`` a Rewind leaves on its job, a Backfill's phase and
restartNonce), so a local run needs them across invocations too: after `kappa run` of a Rewind,
`kappa run` of its StreamingJob resumes from the restored checkpoint, as the operator's job
would. Records are JSON files ``<root>/<kind>/<namespace>/<name>.json``; like the API server,
a record gets a new uid when created and a new generation when the spec changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, TypeVar

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob

R = TypeVar("R", StreamingJob, Backfill, Rewind)


def merge_patch(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386, as the operator's status patches are applied: None removes a key."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        else:
            out[k] = v
    return out


def spec_hash(obj: StreamingJob | Backfill | Rewind) -> str:
    return hashlib.sha256(json.dumps(obj.spec.model_dump(by_alias=True), sort_keys=True).encode()).hexdigest()[:16]


class LocalObjects:
    """The local records, one JSON file per object."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, obj: StreamingJob | Backfill | Rewind) -> Path:
        return self.root / obj.kind.lower() / obj.metadata.namespace / f"{obj.metadata.name}.json"

    def record(self, obj: StreamingJob | Backfill | Rewind) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.path(obj).read_text()))
        except FileNotFoundError:
            return None

    def _write(self, obj: StreamingJob | Backfill | Rewind, rec: dict[str, Any]) -> None:
        path = self.path(obj)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(rec, indent=1, sort_keys=True))
        os.replace(tmp, path)  # a run killed mid-write leaves the previous record

    def apply(self, obj: R) -> R:
        """The manifest as the server would hold it: recorded uid, generation, annotations and
        status added (created on first sight; a changed spec bumps the generation)."""
        rec = self.record(obj)
        digest = spec_hash(obj)
        if rec is None:
            rec = {"uid": str(uuid.uuid4()), "generation": 1, "specHash": digest, "annotations": {}, "status": {}}
            self._write(obj, rec)
        elif rec.get("specHash") != digest:
            rec = {**rec, "generation": int(rec.get("generation", 1)) + 1, "specHash": digest}
            self._write(obj, rec)
        return self._merged(obj, rec)

    def _merged(self, obj: R, rec: dict[str, Any]) -> R:
        data = obj.model_dump(by_alias=True, exclude_none=True)
        meta = data["metadata"]
        meta["uid"], meta["generation"] = rec["uid"], rec["generation"]
        meta["annotations"] = merge_patch(meta.get("annotations") or {}, rec.get("annotations") or {})
        data.pop("status", None)
        if rec.get("status"):
            data["status"] = rec["status"]
        return type(obj).model_validate(data)

    def patch_status(self, obj: R, patch: dict[str, Any]) -> R:
        rec = self._current(obj)
        rec["status"] = merge_patch(rec.get("status") or {}, patch)
        self._write(obj, rec)
        return self._merged(obj, rec)

    def annotate(self, obj: R, changes: dict[str, str | None]) -> R:
        """None removes an annotation (it is kept as null, so it also hides the manifest's own)."""
        rec = self._current(obj)
        rec["annotations"] = {**rec.get("annotations", {}), **changes}
        self._write(obj, rec)
        return self._merged(obj, rec)

    def forget(self, obj: StreamingJob | Backfill | Rewind) -> None:
        self.path(obj).unlink(missing_ok=True)

    def _current(self, obj: StreamingJob | Backfill | Rewind) -> dict[str, Any]:
        rec = self.record(obj)
        if rec is None:
            self.apply(obj)
            rec = self.record(obj)
        assert rec is not None
        return rec
