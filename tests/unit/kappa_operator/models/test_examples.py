"""Every manifest under examples/ is one the API server stores and the operator accepts: a
user copies them, so a field renamed in the models must not leave an example behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.crd_validation import validate
from tests.unit.crd_documents import MODELS, crd

ROOT = Path(__file__).resolve().parents[4]
MANIFESTS = sorted((ROOT / "examples").rglob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") in MODELS]


def test_the_examples_hold_every_kind() -> None:
    kinds = {d["kind"] for p in MANIFESTS for d in documents(p)}
    assert kinds == set(MODELS)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_an_example_is_valid_for_the_server_and_the_models(path: Path) -> None:
    for doc in documents(path):
        assert validate(crd(doc["kind"]), doc) == [], f"{path.name}: {doc['kind']} {doc['metadata']['name']}"
        MODELS[doc["kind"]].model_validate(doc)
