"""The reader's walk through a path's modules (``bench.call_path.walk``)."""

from __future__ import annotations

import os

from bench.call_path import module_of, opened, walk


def test_a_walk_counts_each_step_back_into_a_module_already_left() -> None:
    # run -> config -> run (back) -> sources -> config (back) -> run (back); config twice in a row is one step
    counted = walk(["a.run", "a.config", "a.config", "a.run", "a.sources", "a.config", "a.run"])
    assert (counted.functions, counted.modules, counted.moves, counted.returns) == (7, 3, 5, 3)
    assert counted.revisited == {"a.run": 2, "a.config": 1}


def test_a_walk_that_never_comes_back_has_no_returns() -> None:
    counted = walk(["a.run", "a.run", "a.sources", "a.sinks"])
    assert (counted.modules, counted.moves, counted.returns, counted.revisited) == (3, 2, 0, {})
    assert walk([]).returns == 0


def test_a_project_file_is_named_by_its_module_and_anything_else_by_none() -> None:
    roots = {"spark_app": os.path.join("/r", "spark_app"), "kappa_operator": os.path.join("/r", "operator")}
    assert module_of(os.path.join("/r", "spark_app", "apps", "run.py"), roots) == "spark_app.apps.run"
    assert module_of(os.path.join("/r", "operator", "models", "__init__.py"), roots) == "kappa_operator.models"
    assert module_of(os.path.join("/r", "spark_app_extra", "x.py"), roots) is None
    assert module_of("/usr/lib/python3/json/__init__.py", roots) is None


def test_code_written_inside_the_function_being_read_is_not_a_function_opened() -> None:
    assert opened("run") and opened("Legs.plan") and opened("ReadLedger.members")
    for inline in ("resolve.<locals>.<listcomp>", "<genexpr>", "in_slices.<locals>.<lambda>",
                   "plan_splits.<locals>.flush", "<module>", "Legs.plan.<locals>.<genexpr>"):  # fmt: skip
        assert not opened(inline), inline
