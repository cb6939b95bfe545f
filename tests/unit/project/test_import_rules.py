"""Which module may import which: read from the sources' import statements (at any depth, a
function's own imports included), so a shortcut taken inside a function breaks a test too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


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
        str(path.relative_to(ROOT)): sorted(m for m in imported(path) if m.startswith("spark_app.apps.run"))
        for path in sorted((ROOT / "spark_app" / "planning").glob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_sources_frames_never_import_the_runtime() -> None:
    assert not {m for m in imported(ROOT / "spark_app" / "sources" / "frames.py") if m.startswith("spark_app.apps.run")}


def test_the_rule_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from spark_app.apps.run import run\n    return run\n")
    assert "spark_app.apps.run" in imported(module)


HEAVY = ("pyspark", "py4j", "pyiceberg", "kopf", "kubernetes")
"""What the contract never imports: Spark (and its bridge), pyiceberg, and the operator's
Kubernetes libraries."""

ROW_FILTER_PARSER = {"pyiceberg.expressions.parser", "pyiceberg.expressions.parser.parse"}
"""The one exception: a source's ``filter`` is checked by pyiceberg's own expression parser
(imported inside the validator, when a filter is given), so the operator refuses at apply
time the filter the driver could not parse. It loads no catalog and no Spark."""

RUNS_SPARK = ("local", "demo", "local_cluster")
"""The operator's folders that run Spark or seed its data on this machine (``kappa run``, the
demo, the dev cluster's example tables): not the control plane."""

READS_TABLES = ("cli/tables.py",)
"""What ``kappa checkpoints`` and a Rewind's dry run print (``kappa rewind --dry-run``): run on
the user's machine with the job's catalog, they read the sink's Iceberg history with the Spark
side's own readers (``spark_app.catalogs``, ``spark_app.sinks.iceberg.undo``), never Spark
itself (``test_what_the_cli_reads_of_tables_never_imports_spark``). Not the control plane:
the operator's process never loads them (``tests/unit/project/test_images.py``)."""


def module_file(module: str) -> Path | None:
    parts = module.split(".")
    top = {"spark_app": "spark_app", "kappa_operator": "operator"}.get(parts[0])
    if top is None:
        return None
    base = ROOT / top / Path(*parts[1:]) if parts[1:] else ROOT / top
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def closure(module: str) -> tuple[set[str], set[str]]:
    """The project's modules ``module`` reaches through imports at any depth (its packages'
    ``__init__`` included), and the outside packages they import."""
    seen: set[str] = set()
    outside: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            if path is None and name.split(".")[0] not in ("spark_app", "kappa_operator"):
                outside.add(name.split(".")[0])
            continue
        seen.add(name)
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        todo += [m for m in imported(path) | set(parents) if module_file(m) or not m.startswith("spark_app")]
    return seen, outside


def contract_modules() -> list[str]:
    root = ROOT / "spark_app" / "contract"
    return sorted(
        "spark_app.contract" + ".".join(("", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        for p in root.rglob("*.py")
    )


def test_the_contract_imports_only_itself_and_neither_spark_nor_pyiceberg() -> None:
    found = contract_modules()
    assert "spark_app.contract.config" in found and "spark_app.contract.reports.run" in found
    for module in found:
        reached, _ = closure(module)
        assert {m for m in reached if not m.startswith("spark_app.contract")} <= {"spark_app"}, module
        heavy = {m for r in reached for m in imported(module_file(r)) if m.split(".")[0] in HEAVY}  # type: ignore[arg-type]
        assert heavy <= ROW_FILTER_PARSER, (module, sorted(heavy))


def control_plane_files() -> list[Path]:
    return [
        p
        for p in sorted((ROOT / "operator").rglob("*.py"))
        if p.relative_to(ROOT / "operator").parts[0] not in RUNS_SPARK
        and str(p.relative_to(ROOT / "operator")) not in READS_TABLES
    ]


def spark_side(path: Path) -> list[str]:
    return sorted(m for m in imported(path) if m.startswith("spark_app.") and module_file(m))


def test_the_control_plane_imports_only_the_contract_from_the_spark_side() -> None:
    offenders = {
        str(path.relative_to(ROOT)): [m for m in spark_side(path) if not m.startswith("spark_app.contract")]
        for path in control_plane_files()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_what_the_cli_reads_of_tables_never_imports_spark() -> None:
    for name in READS_TABLES:
        for module in spark_side(ROOT / "operator" / name):
            reached, outside = closure(module)
            assert not outside & {"pyspark", "py4j"}, (module, sorted(outside & {"pyspark", "py4j"}))
            assert not {m for m in reached if m.startswith("spark_app.apps.run")}, module


def test_the_rule_sees_an_import_of_the_spark_side_from_the_control_plane() -> None:
    assert module_file("spark_app.apps.run") is not None
    _, outside = closure("spark_app.apps.run")
    assert "pyspark" in outside, "the closure follows imports to Spark"


def test_benchmarks_and_tests_never_import_each_other() -> None:
    """What both start is in ``harness/``; a bench's own measures are tested in ``bench/tests``."""
    crossing = {
        str(path.relative_to(ROOT)): sorted(m for m in imported(path) if m.split(".")[0] == other)
        for folder, other in (("bench", "tests"), ("tests", "bench"), ("harness", "tests"), ("harness", "bench"))
        for path in sorted((ROOT / folder).rglob("*.py"))
    }
    assert {k: v for k, v in crossing.items() if v} == {}


PY4J = re.compile(r"\._(?:jdf|jvm|jsc|jsq|jc|jconf|jwrite|jreader|jseq|gateway|jsparkSession)\b|\bpy4j\b")
"""What reaches into the JVM behind PySpark's public API: py4j itself, or the private handles
of a DataFrame, a session or a context."""

THROUGH_THE_JVM = ("spark_app/jvm/calls.py", "spark_app/sources/iceberg/bridge.py")
"""Where py4j calls are made: Spark's own objects in ``spark_app/jvm/calls.py``, the kappa
source's callback in its bridge."""


def py4j_calls(path: Path) -> list[int]:
    """Lines of ``path``'s code (not its docstrings or comments) that reach into the JVM."""
    tree = ast.parse(path.read_text(), str(path))
    texts = {
        line
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for line in range(n.value.lineno, (n.value.end_lineno or n.value.lineno) + 1)
    }
    lines = path.read_text().splitlines()
    return [i for i, line in enumerate(lines, 1) if i not in texts and PY4J.search(line.split("#", 1)[0])]


def test_py4j_is_called_only_through_the_jvm_module_and_the_sources_bridge() -> None:
    offenders = {
        str(path.relative_to(ROOT)): py4j_calls(path)
        for folder in ("spark_app", "operator")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in THROUGH_THE_JVM
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_py4j_rule_sees_a_private_handle(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Reads the plan (py4j)."""\n\n\ndef f(df):\n    return df._jdf.queryExecution()\n')
    assert py4j_calls(module) == [5]


def test_the_drivers_session_starts_before_pyiceberg_and_the_sources_are_imported() -> None:
    """``python -m spark_app`` starts the session first and imports the rest while it starts
    (on Kubernetes, while the executor pods start: issue 58): the session's module reaches
    neither pyiceberg nor the sources' and sinks' machinery."""
    reached, _ = closure("spark_app.apps.session")
    iceberg = {m for r in reached for m in imported(module_file(r)) if m.startswith("pyiceberg")}  # type: ignore[arg-type]
    assert iceberg <= ROW_FILTER_PARSER, sorted(iceberg)
    assert not {m for m in reached if m.startswith(("spark_app.apps.run", "spark_app.sources.frames"))}, sorted(reached)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = [{"spark_app": "spark_app", "operator": "kappa_operator"}[rel.parts[0]], *rel.with_suffix("").parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def depends_on(path: Path) -> set[str]:
    """The project's modules ``path`` imports, at any depth of its code. ``from pkg import sub``
    of a submodule is a dependency on ``sub``, not on ``pkg``'s ``__init__`` (which Python loads
    first, whoever imports a submodule: no design choice of the importer's)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if module_file(sub) is not None else node.module)
    return {module_name(f) for m in found if (f := module_file(m)) is not None and f != path}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_module_reaches_itself_through_its_imports_at_any_depth() -> None:
    """Issue 60: no import circle between the project's modules, direct or through others
    (``planning.plan`` -> ``apps.bounded`` -> ``apps.run`` -> ``apps.bounded`` was one), imports
    inside functions included: a circle hidden in a function is still two modules that cannot
    be understood or changed one without the other."""
    files = [p for top in ("spark_app", "operator") for p in sorted((ROOT / top).rglob("*.py"))]
    graph = {module_name(p): depends_on(p) for p in files}
    assert "spark_app.apps.result" in graph["spark_app.apps.bounded"], "the graph follows imports inside functions"
    assert import_circles(graph) == []


def test_the_circle_finder_finds_a_circle_through_a_third_module() -> None:
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
