"""Issue 60: one meaning per name. docs/concepts.md's glossary names each term's code names; this
keeps it in step with the code: every name it gives exists, every decision and every intent the
code defines is in it, and the names retired for another meaning do not come back."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RETIRED = {"JobPlan", "BackfillPlan", "RewindPlan", "plan_streaming_job", "plan_backfill", "plan_rewind", "Progress"}
"""A decision's result was a "plan" (the dry run's word) and two classes were ``Progress``."""


def glossary() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "concepts.md").read_text().split("## Glossary", 1)[1]
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ") and not line.startswith("| term")]
    return {row[1].strip(): set(re.findall(r"`([A-Za-z_]+)`", row[3])) for row in rows if len(row) > 3}


def public_names() -> set[str]:
    found: set[str] = set()
    for path in [*(ROOT / "operator").rglob("*.py"), *(ROOT / "spark_app").rglob("*.py")]:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                found.add(node.name)
    return found


def test_every_code_name_of_the_glossary_exists() -> None:
    terms = glossary()
    assert "intent" in terms and "plan" in terms
    named = set().union(*terms.values())
    assert sorted(named - public_names()) == []


def test_every_decision_and_intent_is_in_the_glossary_and_the_retired_names_are_gone() -> None:
    names = public_names()
    named = set().union(*glossary().values())
    ours = {n for n in names if n.endswith("Intent") or n.startswith("decide_")}
    assert ours and sorted(ours - named) == []
    assert sorted(names & RETIRED) == []
