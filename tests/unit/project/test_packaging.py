"""The package list in pyproject.toml is explicit (operator/ imports as kappa_operator):
a new subpackage missing from it would be left out of the installed distribution."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_every_package_in_the_tree_is_listed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, name in (("operator", "kappa_operator"), ("spark_app", "spark_app")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    assert found == listed


def test_operator_package_does_not_shadow_the_stdlib() -> None:
    import operator

    assert hasattr(operator, "itemgetter"), "the stdlib operator module must stay importable"
    import kappa_operator

    assert Path(kappa_operator.__file__).parent.name == "operator"
