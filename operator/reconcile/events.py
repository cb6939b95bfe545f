"""An Event a decision asks the handler to post on its object (``kube.events`` posts it,
counting repeats): the same for every kind the operator decides on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str
