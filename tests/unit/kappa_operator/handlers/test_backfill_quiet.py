"""A settled backfill's look decides on what it decided on last time (``handlers.backfill.Quiet``):
the same object version, job listing and group view again write nothing again, without parsing
the object; any of them changed, and the look parses and decides as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kappa_operator.coordinator.groups import GroupProgress
from kappa_operator.handlers import backfill as handler
from kappa_operator.handlers.context import configure

ROOT = Path(__file__).resolve().parents[4]


class GroupView:
    """The coordinator's view of one group, as ``Groups.progress`` answers it; counts the asks."""

    def __init__(self, seen: GroupProgress | None) -> None:
        self.seen = seen
        self.asked = 0

    def progress(self, group: str, owner: str) -> GroupProgress | None:
        self.asked += 1
        return self.seen


def running_backfill(resource_version: str = "10") -> dict[str, Any]:
    body = yaml.safe_load((ROOT / "examples" / "rmi-backfill.yaml").read_text())
    body["metadata"].update(uid="bf-uid", generation=1, resourceVersion=resource_version)
    body["status"] = {"phase": "Running", "observedGeneration": 1}
    return body


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> tuple[GroupView, list[str], list[dict[str, Any]]]:
    view = GroupView(GroupProgress(None, None, False))
    configure(None, groups=view)
    parsed: list[str] = []
    written: list[dict[str, Any]] = []
    real_parse = handler.parse

    def counting_parse(model: Any, body: Any) -> Any:
        parsed.append(body["metadata"]["resourceVersion"])
        return real_parse(model, body)

    monkeypatch.setattr(handler, "parse", counting_parse)
    monkeypatch.setattr(handler, "record", lambda kind, body, fields: written.append(fields))
    monkeypatch.setattr(handler, "observe", lambda *a: None)
    monkeypatch.setattr(handler, "QUIET", {})
    monkeypatch.setattr(handler, "_apps", lambda bf: (None, None))
    monkeypatch.setattr(handler, "_reconcile", lambda bf, body, apps: written.append({"reconciled": True}))
    return view, parsed, written


def test_the_same_inputs_again_are_not_parsed_or_written(looks: Any) -> None:
    view, parsed, written = looks
    body = running_backfill()
    jobs = {(body["metadata"]["namespace"], body["spec"]["jobRef"]["name"]): None}
    for _ in range(3):
        handler.follow.__wrapped__(body, jobs)  # type: ignore[attr-defined]
    assert parsed == ["10"] and written == []
    assert view.asked == 3, "the group is asked every look: its view is an input"


@pytest.mark.parametrize("change", ["object", "group", "job"])
def test_a_changed_input_is_decided_again(looks: Any, change: str) -> None:
    view, parsed, written = looks
    body = running_backfill()
    jobs: dict[tuple[str, str], None] = {(body["metadata"]["namespace"], body["spec"]["jobRef"]["name"]): None}
    handler.follow.__wrapped__(body, jobs)  # type: ignore[attr-defined]
    if change == "object":
        body = running_backfill(resource_version="11")
    elif change == "group":
        view.seen = GroupProgress(1_700_000_000_000_000, 5_000_000, False)
    else:
        jobs = {}
    handler.follow.__wrapped__(body, jobs)  # type: ignore[attr-defined]
    assert len(parsed) == 2, f"a changed {change} is parsed and decided again"
    if change == "group":
        assert written and written[0]["alignmentLag"] == "5s", "and what it shows is written"
    if change == "job":
        assert written == [{"reconciled": True}], "a running backfill whose job went is reconciled"
