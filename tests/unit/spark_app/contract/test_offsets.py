"""Source offsets: deterministic JSON values that survive a restart (pure Python)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_app.contract.errors import KappaError, PlanChangedError
from spark_app.contract.offsets import VERSION, BackfillOffset, LiveOffset

snapshot_ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)
positions = st.integers(min_value=0, max_value=10**9)
plans = st.text(alphabet="0123456789abcdef", min_size=16, max_size=16)


def primitives_only(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and primitives_only(v) for k, v in value.items())
    return value is None or type(value) in (int, str, bool)


def through_json(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, sort_keys=True))


@given(snapshot_ids, positions, plans)
def test_backfill_round_trip(sid: int, pos: int, plan: str) -> None:
    off = BackfillOffset(sid, pos, plan)
    d = off.to_dict()
    assert primitives_only(d)
    # 64-bit snapshot ids travel as strings: no JSON reader on the way can round them
    assert d == {"v": VERSION, "kind": "backfill", "snapshot_id": str(sid), "position": pos, "plan": plan}
    assert BackfillOffset.from_dict(through_json(d)) == off
    assert BackfillOffset.from_dict(d) == off


@given(st.one_of(st.none(), snapshot_ids), positions, st.booleans())
def test_live_round_trip(sid: int | None, pos: int, complete: bool) -> None:
    off = LiveOffset(sid, pos, complete)
    d = off.to_dict()
    assert primitives_only(d)
    wire_sid = None if sid is None else str(sid)
    assert d == {"v": VERSION, "kind": "live", "snapshot_id": wire_sid, "position": pos, "complete": complete}
    back = LiveOffset.from_dict(through_json(d))
    assert back == off
    assert type(back.complete) is bool


@pytest.mark.parametrize("sid", [2**63 - 1, -(2**63), 9_007_199_254_740_993])
def test_big_snapshot_ids_survive_a_float_json_reader(sid: int) -> None:
    # a reader that parses every number as a double (JavaScript, jq) must not round the id
    for off in (BackfillOffset(sid, 1, "p"), LiveOffset(sid, 1, False)):
        text = json.dumps(off.to_dict())
        lossy = json.loads(text, parse_int=float)
        assert type(off).from_dict(lossy).snapshot_id == sid  # type: ignore[attr-defined]


def test_from_dict_accepts_integer_snapshot_ids() -> None:
    d = {"v": VERSION, "kind": "live", "snapshot_id": 42, "position": 0, "complete": True}
    assert LiveOffset.from_dict(d) == LiveOffset(42, 0, True)


def test_serialisation_is_deterministic() -> None:
    a = json.dumps(BackfillOffset(5, 3, "abcd").to_dict(), sort_keys=True)
    b = json.dumps(BackfillOffset(5, 3, "abcd").to_dict(), sort_keys=True)
    assert a == b
    assert a != json.dumps(BackfillOffset(5, 4, "abcd").to_dict(), sort_keys=True)


def test_offsets_are_values() -> None:
    assert BackfillOffset(1, 2, "p") == BackfillOffset(1, 2, "p")
    assert BackfillOffset(1, 2, "p") != BackfillOffset(1, 2, "q")
    assert hash(LiveOffset(None, 0, False)) == hash(LiveOffset(None, 0, False))
    with pytest.raises(AttributeError):
        BackfillOffset(1, 2, "p").position = 3  # type: ignore[misc]


def test_from_dict_coerces_types() -> None:
    # from_dict normalises field types (int(), str()) rather than trusting the stored JSON
    off = BackfillOffset.from_dict({"v": 1, "kind": "backfill", "snapshot_id": "7", "position": "2", "plan": "x"})
    assert off == BackfillOffset(7, 2, "x")
    assert type(off.snapshot_id) is int


@pytest.mark.parametrize(
    ("reader", "data", "held"),
    [
        (LiveOffset, BackfillOffset(1, 2, "p").to_dict(), "backfill"),
        (BackfillOffset, LiveOffset(1, 2, True).to_dict(), "live"),
        (BackfillOffset, {**BackfillOffset(1, 2, "p").to_dict(), "v": VERSION + 1}, "backfill"),
        (LiveOffset, {**LiveOffset(None, 0, False).to_dict(), "v": 0}, "live"),
        (BackfillOffset, {"snapshot_id": 1, "position": 2, "plan": "p"}, "unknown"),
    ],
    ids=["backfill-as-live", "live-as-backfill", "newer-version", "older-version", "no-header"],
)
def test_mismatch_raises_plan_changed(reader: Any, data: dict[str, Any], held: str) -> None:
    with pytest.raises(PlanChangedError) as info:
        reader.from_dict(data)
    msg = str(info.value)
    assert isinstance(info.value, KappaError)
    assert f"the checkpoint holds a {held} offset (v{data.get('v')})" in msg
    wanted = "live" if reader is LiveOffset else "backfill"
    assert f"reads the source as {wanted} (v{VERSION})" in msg
    assert "fresh checkpoint location" in msg
