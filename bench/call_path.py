"""How far a reader walks to follow a job's config through ``spark_app.apps.run.run``, call by
call (issue 60's "returns to a module already left").

Why a count and not a picture: a reader following the code opens each function the first time
it is called, and every time the next one lives in a module already read and left, they go
back to a file they had closed. That count says how scattered one path through the code is,
and it can be taken the same way on any commit.

How: ``kappa demo`` runs (its first ``run`` of a backfill config is the path walked) under a
profiler that sees every call of a project function (``spark_app``, ``kappa_operator``) on the
thread that entered ``run``, from that entry to its return. Each function counts once, where it
is first called (a function a reader opens: not a comprehension, lambda or nested function,
read with the function around it: ``opened``); the walk is the modules of those functions in
that order, with repeats in a row merged (staying in a file is not a move). ``returns`` counts
the steps into a module the walk already entered before (and left). Threads ``run`` starts (the session's, Py4J's
callbacks for each batch) are not followed: their order is the scheduler's.

    .venv/bin/python -m bench.call_path --json            # this tree
    .venv/bin/python -m bench.call_path --json --tree D   # the tree of another commit (a git worktree)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spark_app", "kappa_operator")


@dataclass(frozen=True)
class Walk:
    """What following one path costs a reader."""

    functions: int
    """Project functions called on the path, each counted once."""
    modules: int
    """Distinct modules the walk enters."""
    moves: int
    """Steps from one module to another."""
    returns: int
    """Steps into a module the walk had already entered and left."""
    revisited: dict[str, int]
    """Per module, how many times the walk came back to it (the most first)."""


def walk(modules_called: Sequence[str]) -> Walk:
    """The walk over the modules of each function in first-call order. Pure."""
    steps = [m for i, m in enumerate(modules_called) if i == 0 or modules_called[i - 1] != m]
    seen: set[str] = set()
    revisited: dict[str, int] = {}
    for module in steps:
        if module in seen:
            revisited[module] = revisited.get(module, 0) + 1
        seen.add(module)
    ordered = dict(sorted(revisited.items(), key=lambda kv: (-kv[1], kv[0])))
    return Walk(len(modules_called), len(seen), max(0, len(steps) - 1), sum(revisited.values()), ordered)


def opened(qualname: str) -> bool:
    """Whether a reader opens this code to follow a call to it: a function or method of a
    module, not code written inside the function being read (a comprehension, a generator
    expression, a lambda, a nested function, a module's body run by an import). Python 3.11
    runs comprehensions as functions of their own and 3.12 inlines them (PEP 709): counted,
    they made the same code's walk depend on the interpreter (75 returns on 3.11, 25 of them
    into comprehensions of the function just read). Pure."""
    return "<locals>" not in qualname and not qualname.rsplit(".", 1)[-1].startswith("<")


def module_of(filename: str, roots: dict[str, str]) -> str | None:
    """The dotted module of a project file (``roots``: package name to its directory), else None.
    Pure."""
    for package, directory in roots.items():
        if filename.startswith(directory + os.sep):
            rel = Path(filename[len(directory) + 1 :]).with_suffix("")
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    return None


class FirstCalls:
    """The profiler: records each project function the first time it is called on the thread
    that entered ``run``, while that call of ``run`` lasts."""

    def __init__(self, roots: dict[str, str]) -> None:
        self.roots = roots
        self.run_file = os.path.join(roots["spark_app"], "apps", "run.py")
        self.thread: int | None = None
        self.depth = 0
        self.done = False
        self.seen: set[Any] = set()
        self.modules: list[str] = []
        self.functions: list[str] = []

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if self.done or event not in ("call", "return"):
            return
        code = frame.f_code
        ident = threading.get_ident()
        if self.thread is None:
            if event == "call" and code.co_name == "run" and code.co_filename == self.run_file:
                cfg = frame.f_locals.get("cfg")
                if getattr(cfg, "mode", None) == "backfill":
                    self.thread, self.depth = ident, 0
            if self.thread is None:
                return
        if ident != self.thread:
            return
        if event == "return":
            self.depth -= 1
            if self.depth == 0:
                self.done = True
            return
        self.depth += 1
        if code in self.seen:
            return
        self.seen.add(code)
        if opened(code.co_qualname) and (module := module_of(code.co_filename, self.roots)) is not None:
            self.modules.append(module)
            self.functions.append(f"{module}:{code.co_qualname}")


def traced_demo(out: Path) -> tuple[list[str], list[str]]:
    """``kappa demo`` of the imported tree, profiled; the modules of its backfill run's walk, and
    the functions (``module:qualname``) behind them."""
    import kappa_operator
    import spark_app
    from kappa_operator.cli.commands import main

    roots = {p.__name__: str(Path(p.__file__).parent) for p in (spark_app, kappa_operator)}
    profiler = FirstCalls(roots)
    threading.setprofile(profiler)
    sys.setprofile(profiler)
    try:
        code = main(["demo", "--hours", "0.75", "--out", str(out)])
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    if code not in (0, None):
        raise SystemExit(f"kappa demo exited {code}: the walk is not of a finished run")
    if not profiler.modules:
        raise SystemExit("no backfill run was entered: kappa demo no longer runs spark_app.apps.run.run")
    return profiler.modules, profiler.functions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--tree", type=Path, help="walk another checkout (its sources, this interpreter)")
    parser.add_argument("--modules", action="store_true", help="print the walk's functions, in order")
    args = parser.parse_args(argv)
    if args.tree is not None:
        # the other tree's packages (linked, as the editable install maps them) first on the path,
        # in a process of their own; never the tree's root, whose operator/ would shadow the stdlib
        packages = Path(tempfile.mkdtemp(prefix="kappa-call-path-tree-"))
        (packages / "kappa_operator").symlink_to(args.tree.resolve() / "operator")
        (packages / "spark_app").symlink_to(args.tree.resolve() / "spark_app")
        env = {**os.environ, "PYTHONPATH": str(packages)}
        flags = [flag for flag, on in (("--json", args.json), ("--modules", args.modules)) if on]
        here = [sys.executable, str(Path(__file__)), *flags]
        return subprocess.run(here, env=env, cwd=args.tree, check=False).returncode
    with tempfile.TemporaryDirectory(prefix="kappa-call-path-") as tmp:
        modules, functions = traced_demo(Path(tmp) / "demo")
    result = asdict(walk(modules))
    if args.modules:
        result["walk"] = functions
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['functions']} functions in {result['modules']} modules: {result['moves']} moves, "
              f"{result['returns']} returns to a module already left")  # fmt: skip
        for module, times in result["revisited"].items():
            print(f"  {times:3d}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
