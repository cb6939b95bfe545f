"""The lean diff-base (``kube.diffbase``) is kopf's own essence, field for field: a different
one would make kopf see every object as changed once after an upgrade of the operator."""

from __future__ import annotations

import copy
from typing import Any

import kopf
import pytest

from kappa_operator.kube.diffbase import LeanStatusDiffBase, lean
from kappa_operator.service.runner import settings
from tests.unit.watched_bodies import watched_job

FIELD = "status.kopf.lastHandled"


@pytest.mark.parametrize(
    "extra",
    [
        None,
        [("metadata", "annotations", "kappa.dev/paused")],
        ["status.phase"],
        [("status", "kopf")],
        ["metadata.generation"],
    ],
)
def test_the_essence_is_kopfs_own_and_the_body_is_not_changed(extra: list[Any] | None) -> None:
    body = watched_job()
    before = copy.deepcopy(body)
    ours = LeanStatusDiffBase(field=FIELD).build(body=kopf.Body(body), extra_fields=extra)
    theirs = kopf.StatusDiffBaseStorage(field=FIELD).build(body=kopf.Body(copy.deepcopy(body)), extra_fields=extra)
    assert ours == theirs
    assert body == before


def test_what_is_copied_leaves_out_managed_fields_and_an_unwatched_status() -> None:
    body = watched_job()
    out = lean(body, None)
    assert "managedFields" not in out["metadata"] and "status" not in out
    assert lean(body, ["status.phase"])["status"] is body["status"]


def test_the_operator_uses_it() -> None:
    storage = settings().persistence.diffbase_storage
    assert isinstance(storage, LeanStatusDiffBase) and storage.field == tuple(FIELD.split("."))
