"""``spark_app.jars.once``: what is built once per machine (the jar bundles, the schema registry)
is built by one process while the others wait, and is there whole or not at all."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from spark_app.jars import once


def test_made_once_by_the_first_caller_while_the_second_waits(tmp_path: Path) -> None:
    target = tmp_path / "thing-abc"
    made: list[str] = []

    def make(partial: Path) -> None:
        made.append(partial.name)
        time.sleep(0.3)  # the second caller arrives while this one holds the lock
        (partial / "app.jar").write_text("built")

    found: list[bool] = []

    def call() -> None:
        found.append((once(target, "thing", make) / "app.jar").read_text() == "built")

    callers = [threading.Thread(target=call) for _ in range(2)]  # flock: per open file, so per caller
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    assert made == ["thing-abc.partial"]
    assert found == [True, True]
    assert (target / ".complete").exists() and not (tmp_path / "thing-abc.partial").exists()
    once(target, "thing", make)
    assert len(made) == 1, "made once: the marker is found"


def test_a_failed_make_leaves_nothing_and_the_next_call_makes_it_anew(tmp_path: Path) -> None:
    target = tmp_path / "thing-abc"

    def broken(partial: Path) -> None:
        (partial / "half.jar").write_text("half")
        raise RuntimeError("mvn failed")

    with pytest.raises(RuntimeError, match="mvn failed"):
        once(target, "thing", broken)
    assert not target.exists() and not (tmp_path / "thing-abc.partial").exists()

    once(target, "thing", lambda partial: (partial / "app.jar").write_text("built"))
    assert sorted(p.name for p in target.iterdir()) == [".complete", "app.jar"], "the half-made files are gone"
