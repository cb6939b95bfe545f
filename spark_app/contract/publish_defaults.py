"""The publish gate's default, in a module that imports nothing: the operator's Backfill model
shares it without paying for pyarrow and pyiceberg (importing ``publish`` costs ~1.2 s)."""

from __future__ import annotations

DEFAULT_MIN_MATCH_RATIO = 0.999
"""Publish replaces main's rows in the window with the branch's only when at least this share
of them match (the Netflix anchor: backfill output matched production 99.9%). A partial branch
(a run that ended early, a window with missing input) then never replaces good rows. Every
entry point defaults to it; ``0.0`` is the explicit opt-out (publish whatever the match)."""
