"""Copies of objects kept for as long as the objects exist (kopf's indexes), as compact JSON.

A body kept as decoded dicts is some thousands of small strings and dicts per object, each
living as long as the object and scattered among the arenas that a burst of watch events
allocated: at 1,000 objects the allocator held 48 MB of free blocks it could not give back
(issue 62, ``bench/RESULTS.md``). One bytes object per copy is one allocation, a quarter of the
size. Decoded for each read (tens of µs, beside the decision's milliseconds); each reader gets a
copy of its own to change as it likes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def packed(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def unpacked(copy: bytes) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(copy)
    return body
