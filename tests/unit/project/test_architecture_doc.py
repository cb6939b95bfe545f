"""Issue 60: docs/architecture.md names the modules and folders a maintainer opens first; each
name it gives must exist (a file, a folder, or a module's function), so the doc cannot drift from
the tree unnoticed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "architecture.md"
HOMES = ("", "operator", "spark_app", "tests", "bench", "spark_app/jvm")
"""Where a path in the doc may start: the repository, or one of its halves (the doc's tables
name paths inside ``operator/`` and ``spark_app/`` without the prefix)."""
NOT_CODE = {"job.json", "pyarrow.fs", "reports/__init__"}
"""Named in the doc and not a file of ours: a file the operator writes, a library's module, a
package's ``__init__`` said as Python says it."""
STORAGE = ("_kappa", "<checkpoint>", "offsets/")
"""Paths in a job's checkpoint and reports (the layout the doc describes), not in the tree."""


def named(text: str) -> set[str]:
    """Backticked names that look like a path (``a/b``, ``x.py``) or a module's function
    (``module.function``)."""
    out = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if token in NOT_CODE or token.startswith(STORAGE) or "<" in token or "*" in token:
            continue
        if "/" in token or token.endswith((".py", ".sh")) or re.fullmatch(r"[a-z_]+\.[a-z_]+", token):
            out.add(token)
    return out


def exists(token: str) -> bool:
    if token.endswith((".py", ".sh")) and "/" not in token:
        return any(ROOT.glob(f"**/{token}"))
    if "/" in token:
        if any((ROOT / home / token.rstrip("/")).exists() for home in HOMES):
            return True  # a folder said by its own name inside its parent's row: anywhere in a half
        return (
            token.count("/") == 1
            and token.endswith("/")
            and any(
                p.is_dir() for half in ("operator", "spark_app") for p in (ROOT / half).glob(f"**/{token.rstrip('/')}")
            )
        )
    module, function = token.split(".")
    for path in ROOT.glob(f"**/{module}.py"):
        tree = ast.parse(path.read_text())
        if any(getattr(node, "name", None) == function for node in tree.body):
            return True
    return False


def test_every_file_folder_and_function_the_architecture_doc_names_exists() -> None:
    found = named(DOC.read_text())
    assert "apps/run.py" in found and "reconcile/backfill/" in found
    assert sorted(t for t in found if not exists(t)) == []


def test_a_name_that_is_gone_is_caught() -> None:
    assert not exists("apps/gone.py") and not exists("frame.no_such_function") and exists("apps/run.py")
