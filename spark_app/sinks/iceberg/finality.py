"""Whether a backfill branch is final, recorded on the table itself.

The driver knows at the end of a backfill whether every result in the window was emitted
(the history reached ``end + drain``, and no window or session starting inside was still
open). Publish runs elsewhere (today the operator, later its own application), so the answer
travels with the data: a table property per branch, read back from metadata alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from pyiceberg.table import Table

PREFIX = "kappa.backfill-notices."


def mark(load: Callable[[], Table], branch: str, notices: list[str], retries: int = 20) -> None:
    """Record ``branch``'s not-final notices (an empty list: final), retrying on conflicts
    with concurrent writers of the table."""
    from pyiceberg.exceptions import CommitFailedException

    for attempt in range(retries + 1):
        table = load()
        try:
            with table.transaction() as tx:
                tx.set_properties({PREFIX + branch: json.dumps(notices)})
            return
        except CommitFailedException:
            if attempt == retries:
                raise


def notices(table: Table, branch: str) -> list[str]:
    """What the backfill that wrote ``branch`` said is not final (empty: final, or unknown)."""
    raw = table.properties.get(PREFIX + branch)
    return list(json.loads(raw)) if raw else []
