"""The generated CRDs and the examples as the tests read them (a fresh copy each call), the
models by kind, and an example with dotted-path edits applied."""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pydantic
import yaml

from kappa_operator.models.backfill import Backfill
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from tests.crd_validation import (
    load_crd,
)

ROOT = Path(__file__).resolve().parents[2]


CRD_FILES = {
    "StreamingJob": "streamingjobs.kappa.dev.yaml",
    "Backfill": "backfills.kappa.dev.yaml",
    "Rewind": "rewinds.kappa.dev.yaml",
}


EXAMPLES = {"StreamingJob": "rmi-streamingjob.yaml", "Backfill": "rmi-backfill.yaml", "Rewind": "rmi-rewind.yaml"}


MODELS: dict[str, type[pydantic.BaseModel]] = {"StreamingJob": StreamingJob, "Backfill": Backfill, "Rewind": Rewind}


KINDS = sorted(CRD_FILES)


@cache
def _crd(kind: str) -> dict[str, Any]:
    return load_crd(ROOT / "crds" / CRD_FILES[kind])


@cache
def _example(kind: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / EXAMPLES[kind]).read_text())


def crd(kind: str) -> dict[str, Any]:
    return copy.deepcopy(_crd(kind))


def example(kind: str) -> dict[str, Any]:
    return copy.deepcopy(_example(kind))


DELETE = object()


def edited(kind: str, edits: dict[str, Any]) -> dict[str, Any]:
    """The example with ``edits`` ({"spec.window.end": value or DELETE}) applied; a dotted
    path walks dict keys, so map keys (source and sink names) are path components too."""
    doc = example(kind)
    for path, value in edits.items():
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return doc
