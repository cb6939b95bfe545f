"""One Iceberg sink's table with green's branch of it: what the comparison and the switch both
work on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyiceberg.table import Table


@dataclass(frozen=True)
class GreenBranch:
    sink: str
    load: Callable[[], Table]
    catalog_properties: dict[str, str]
    time_column: str
    branch: str
    """Green's branch of the table (main is blue's)."""
    key: list[str] = field(default_factory=list)
