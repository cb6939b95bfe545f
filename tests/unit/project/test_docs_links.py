"""The README and docs/ stay navigable and current (issue 30 item 6): every relative Markdown
link points at a file that exists, every anchor at a heading of that file (as GitHub makes
anchors), and the JobConfig example in the reference is one JobConfig accepts."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

from spark_app.contract.config import parse_config

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where a link is a link."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link targets and markup dropped, lowercase, punctuation
    but '-' and '_' removed, spaces made '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", path.read_text(), flags=re.S | re.M).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(doc: Path) -> list[str]:
    return [t for t in LINK.findall(prose(doc.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_docs_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/concepts.md", "docs/operations.md", "docs/reference.md", "docs/benchmarks.md"} <= names
    assert any(t.startswith("docs/") for t in links(ROOT / "README.md")), "the README links into docs/"


@pytest.mark.parametrize("doc", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in links(doc):
        where, _, anchor = target.partition("#")
        path = (doc.parent / unquote(where)).resolve() if where else doc
        if not path.exists():
            broken.append(f"{target}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif anchor and path.suffix == ".md" and unquote(anchor) not in anchors(path):
            broken.append(f"{target}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert broken == [], f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_slugs_follow_github() -> None:
    assert slug("Profile `dense`: 6 event-hours at 1M impressions/h (7.5M input rows)") == (
        "profile-dense-6-event-hours-at-1m-impressionsh-75m-input-rows"
    )
    assert slug("2. Your manifests, on your machine") == "2-your-manifests-on-your-machine"
    assert slug("The `kappa` command") == "the-kappa-command"


def test_the_jobconfig_example_in_the_reference_is_a_jobconfig() -> None:
    text = (ROOT / "docs" / "reference.md").read_text()
    (example,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("name: ")]
    cfg = parse_config(yaml.safe_load(example), origin="docs/reference.md")
    assert cfg.mode == "backfill" and cfg.alignment.max_drift.total_seconds() == 300
