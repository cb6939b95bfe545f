"""The alignment rule (global_view) and the file-based provider shared by driver processes."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_app.alignment.local import LocalWatermarkProvider
from spark_app.contract.alignment import HELD, GroupView, WatermarkProvider, global_view

# --- global_view ------------------------------------------------------------------------


def test_missing_member_holds_at_held() -> None:
    view = global_view(("a", "b", "c"), {"b": 5})
    assert view == GroupView(HELD, ("a", "c"))
    assert view.bound(10) == HELD + 10


def test_missing_member_holds_even_if_others_finished() -> None:
    assert global_view(("a", "b"), {"a": None}) == GroupView(HELD, ("b",))


def test_min_over_unfinished_members() -> None:
    assert global_view(("a", "b", "c"), {"a": 30, "b": 10, "c": 20}) == GroupView(10, ())


def test_finished_members_do_not_hold() -> None:
    view = global_view(("a", "b", "c"), {"a": 30, "b": None, "c": 20})
    assert view.global_watermark == 20
    assert view.missing == ()


def test_all_finished_is_none_and_unbounded() -> None:
    view = global_view(("a", "b"), {"a": None, "b": None})
    assert view == GroupView(None, ())
    assert view.bound(10) is None


def test_reports_of_non_members_are_ignored() -> None:
    # e.g. a stale member of an earlier run of the group left in the state
    assert global_view(("a",), {"a": 50, "old": 1}).global_watermark == 50
    assert global_view(("a",), {"a": None, "old": 1}).global_watermark is None


def test_negative_and_zero_watermarks() -> None:
    assert global_view(("a", "b"), {"a": 0, "b": -5}).global_watermark == -5
    assert global_view(("a", "b"), {"a": 0, "b": None}).global_watermark == 0


def test_bound() -> None:
    assert GroupView(100).bound(0) == 100
    assert GroupView(100).bound(25) == 125


@given(
    st.lists(st.sampled_from("abcdefg"), unique=True, max_size=7),
    st.dictionaries(st.sampled_from("abcdefgxyz"), st.one_of(st.none(), st.integers(-(10**15), 10**15))),
)
def test_global_view_rule(members: list[str], reported: dict[str, int | None]) -> None:
    view = global_view(tuple(members), reported)
    missing = [m for m in members if m not in reported]
    assert list(view.missing) == missing
    if missing:
        assert view.global_watermark == HELD
        return
    live = [reported[m] for m in members if reported[m] is not None]
    if not live:
        assert view.global_watermark is None
    else:
        assert view.global_watermark == min(live)  # type: ignore[type-var]
        assert all(view.global_watermark <= w for w in live)  # type: ignore[operator]


# --- LocalWatermarkProvider: one process ------------------------------------------------


def test_provider_satisfies_protocol(tmp_path: Path) -> None:
    provider: WatermarkProvider = LocalWatermarkProvider(tmp_path / "wm.json", ("a",))
    assert provider.report("a", 1) == GroupView(1)


def test_report_and_view(tmp_path: Path) -> None:
    state = tmp_path / "sub" / "dir" / "wm.json"  # parent directories are created
    p = LocalWatermarkProvider(state, ("b", "a"))
    assert p.members == ("a", "b")
    assert p.view() == GroupView(HELD, ("a", "b"))
    assert p.report("a", 100) == GroupView(HELD, ("b",))
    assert p.report("b", 50) == GroupView(50)
    assert p.view() == GroupView(50)
    assert p.report("b", 200) == GroupView(100)
    assert p.report("a", None) == GroupView(200)
    assert p.report("b", None) == GroupView(None)
    assert p.view() == GroupView(None)
    data = json.loads(state.read_text())
    assert data["watermarks"] == {"a": None, "b": None}
    assert set(data["updated"]) == {"a", "b"}
    assert all(isinstance(t, float) and abs(t - time.time()) < 60 for t in data["updated"].values())


def test_state_is_shared_between_instances(tmp_path: Path) -> None:
    state = tmp_path / "wm.json"
    a = LocalWatermarkProvider(state, ("a", "b"))
    b = LocalWatermarkProvider(state, ("b", "a"))
    a.report("a", 7)
    assert b.report("b", 9) == GroupView(7)
    assert a.view() == GroupView(7)


def test_reset_forgets_every_report(tmp_path: Path) -> None:
    state = tmp_path / "wm.json"
    p = LocalWatermarkProvider(state, ("a", "b"))
    p.report("a", 10)
    p.report("b", 20)
    p.reset()
    assert json.loads(state.read_text()) == {}, "reset empties the state under the lock"
    assert p.view() == GroupView(HELD, ("a", "b"))
    assert p.report("b", 30) == GroupView(HELD, ("a",))
    p.reset()
    p.reset()  # idempotent, no file


def test_leftover_temp_file_does_not_corrupt_state(tmp_path: Path) -> None:
    state = tmp_path / "wm.json"
    p = LocalWatermarkProvider(state, ("a", "b"))
    p.report("a", 10)
    # a process killed mid-write leaves a partial temp file next to the state
    (tmp_path / ".wm-leftover").write_text('{"watermarks": {"a": 99')
    assert p.view() == GroupView(HELD, ("b",))
    assert p.report("b", 5) == GroupView(5)
    assert json.loads(state.read_text())["watermarks"] == {"a": 10, "b": 5}


def test_failed_write_keeps_previous_state(tmp_path: Path) -> None:
    state = tmp_path / "wm.json"
    p = LocalWatermarkProvider(state, ("a", "b"))
    p.report("a", 10)
    p.report("b", 20)
    before = state.read_text()
    with pytest.raises(TypeError):
        p.report("b", object())  # type: ignore[arg-type]  # json.dump fails half-way
    assert state.read_text() == before
    assert p.view() == GroupView(10)
    assert p.report("a", 15) == GroupView(15)  # the lock was released


def test_crash_before_replace_keeps_previous_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "wm.json"
    p = LocalWatermarkProvider(state, ("a",))
    p.report("a", 10)

    def crash(*_: Any) -> None:
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        p.report("a", 99)
    monkeypatch.undo()
    assert json.loads(state.read_text())["watermarks"] == {"a": 10}
    assert p.view() == GroupView(10)
    temps = [x for x in tmp_path.iterdir() if x.name.startswith(".wm-")]
    assert temps  # the full new state was written aside, never over the old one
    assert p.report("a", 11) == GroupView(11)


def test_state_written_with_atomic_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "wm.json"
    p = LocalWatermarkProvider(state, ("a",))
    calls: list[tuple[str, str]] = []
    real = os.replace

    def spy(src: Any, dst: Any) -> None:
        calls.append((str(src), str(dst)))
        real(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    p.report("a", 1)
    assert len(calls) == 1
    src, dst = calls[0]
    assert dst == str(state)
    assert Path(src).parent == tmp_path  # same filesystem, so the rename is atomic
    assert not Path(src).exists()


# --- LocalWatermarkProvider: several processes ------------------------------------------

N_PROCS = 4
N_KEYS = 50
N_REPORTS = 40


# The worker runs as `exec(_REPORTER, args)` in a spawned interpreter: it imports only the
# provider (fast start, and no dependence on how pytest named this test module).
_REPORTER = """
from spark_app.alignment.local import LocalWatermarkProvider

provider = LocalWatermarkProvider(watermark_file, members)
barrier.wait(60)  # every process imported and ready: start together
# every report adds a key to the shared state: a read-modify-write that races with another
# process (no lock) drops the other's key for good
for k in range(n_keys):
    provider.report(f"extra{me}-{k}", k)
seen = []
for k in range(n_reports):
    wm = k * 10 + me
    view = provider.report(members[me], wm)
    seen.append((wm, view.global_watermark, list(view.missing)))
if me == 0:
    view = provider.report(members[me], None)  # finished
    seen.append((None, view.global_watermark, list(view.missing)))
out.put((me, seen))
"""


def test_concurrent_processes(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    state = tmp_path / "group" / "wm.json"
    members = tuple(f"src{i}" for i in range(N_PROCS))
    barrier = ctx.Barrier(N_PROCS)
    out = ctx.Queue()
    procs = []
    for i in range(N_PROCS):
        env = {
            "watermark_file": str(state),
            "members": members,
            "me": i,
            "barrier": barrier,
            "out": out,
            "n_keys": N_KEYS,
            "n_reports": N_REPORTS,
        }
        procs.append(ctx.Process(target=exec, args=(_REPORTER, env)))
    for proc in procs:
        proc.start()

    # meanwhile, the state file must always be valid JSON (atomic replace, never a partial write)
    reads = 0
    results: dict[int, list[Any]] = {}
    deadline = time.monotonic() + 60
    while len(results) < N_PROCS:
        assert time.monotonic() < deadline, "workers did not finish"
        assert all(proc.exitcode in (None, 0) for proc in procs), [proc.exitcode for proc in procs]
        if state.exists():
            try:
                text = state.read_text()
            except FileNotFoundError:
                text = None
            if text is not None:
                json.loads(text)  # raises on a torn write
                reads += 1
        while not out.empty():
            me, seen = out.get()
            results[me] = seen
        time.sleep(0.0005)
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0

    assert reads > 0
    for me, seen in results.items():
        assert len(seen) == N_REPORTS + (me == 0)
        globals_ = [g for _, g, _ in seen if g is not None]
        # watermarks only grow, so the view a process gets never goes back (no lost update)
        assert globals_ == sorted(globals_), me
        for wm, g, missing in seen:
            if missing:
                assert g == HELD
            elif wm is not None:
                assert g is not None
                assert g <= wm  # the min includes this member's own fresh report

    final = json.loads(state.read_text())
    last = (N_REPORTS - 1) * 10
    extras = {f"extra{i}-{k}": k for i in range(N_PROCS) for k in range(N_KEYS)}
    lost = sorted(set(extras) - set(final["watermarks"]))
    assert lost == [], f"{len(lost)} reports lost to concurrent writers"
    assert final["watermarks"] == {
        "src0": None,
        **{f"src{i}": last + i for i in range(1, N_PROCS)},
        **extras,
    }
    assert set(final["updated"]) == set(members) | set(extras)
    provider = LocalWatermarkProvider(state, members)
    assert provider.view() == GroupView(last + 1)
    leftovers = [x.name for x in state.parent.iterdir() if x.name.startswith(".wm-")]
    assert leftovers == []
