"""Durable group definitions: after a restart no member may run ahead, so groups come back
(their members holding until they re-report). Watermarks are not stored: a member's
re-report is the only safe source of its progress.

A JSON file replaced atomically; in a cluster the operator re-declares groups from CRs
instead, and the file is optional.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from kappa_operator.coordinator.messages import GroupSpec

log = logging.getLogger("kappa.coordinator")


class GroupStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def load(self) -> list[GroupSpec]:
        if not self.path.exists():
            return []
        data = json.loads(self.path.read_text())
        specs = []
        for g in data.get("groups", []):
            try:
                specs.append(GroupSpec.model_validate(g))
            except ValidationError as exc:  # e.g. a name from before names were checked: the rest still load
                log.warning("dropping stored group %.100r: %s", g.get("name") if isinstance(g, dict) else g, exc)
        return specs

    def save(self, specs: list[GroupSpec]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"groups": [s.model_dump(mode="json") for s in sorted(specs, key=lambda s: s.name)]}
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".groups-")
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
