"""Which module may import which: read from the sources' import statements (at any depth, a
function's own imports included), so a shortcut taken inside a function breaks a test too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_planning_never_imports_the_runtime() -> None:
    """``kappa plan`` builds the pipeline over the sources as a run does (``sources.frames``),
    but runs nothing: the planner must not reach back into what starts queries."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported(path) if m.startswith("spark_app.runtime"))
        for path in sorted((ROOT / "spark_app" / "planning").glob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_sources_frames_never_import_the_runtime() -> None:
    assert not {m for m in imported(ROOT / "spark_app" / "sources" / "frames.py") if m.startswith("spark_app.runtime")}


def test_the_rule_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from spark_app.runtime import run\n    return run\n")
    assert "spark_app.runtime" in imported(module)
