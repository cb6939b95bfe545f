"""Lookups of a slowly changing table (a dimension) as of each row's event time, so that a
backfill or a rewound job joins the version the live job joined, not today's.

- Solution 1, a historical view (``as_of`` over ``snapshot_versions`` or
  ``validity_versions``): the dimension's versions with their validity intervals, built once
  per query from Iceberg snapshots or a validity-interval table, joined stream-static.
- Solution 2, an aligned stream (``join_changes``): the dimension's change log as a source of
  its own, read in event-time order with the facts, joined with state.

The trade-offs are in docs/lookups.md.
"""

from spark_app.lookups.as_of import as_of, checked, overlaps
from spark_app.lookups.history import Versions, interval_columns, snapshot_versions, validity_versions
from spark_app.lookups.versioned import join_changes

__all__ = [
    "Versions",
    "as_of",
    "checked",
    "interval_columns",
    "join_changes",
    "overlaps",
    "snapshot_versions",
    "validity_versions",
]
