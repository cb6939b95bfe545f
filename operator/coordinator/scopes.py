"""Credentials scoped to alignment groups, so one job cannot move another job's watermark.

The admin token (the one the service is started with) may do everything; the operator keeps
it. Each Backfill's driver gets a token minted from it that is good for its own group(s)
only: ``kappa-scope.v1.<payload>.<signature>``, where payload is the base64url (unpadded)
JSON list of group names, sorted, and signature the base64url HMAC-SHA256 of
``kappa-scope.v1.<payload>`` keyed with the admin token. Stateless on purpose: nothing to
store, so tokens survive operator and coordinator restarts, and any replica holding the admin
token verifies them. Rotating the admin token revokes every scoped token at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass

from kappa_operator.coordinator.names import check_group_name

PREFIX = "kappa-scope.v1"


@dataclass(frozen=True, slots=True)
class Scope:
    """Who a bearer token speaks for: every group (admin), or the listed ones."""

    groups: frozenset[str] | None
    """None: the admin token."""

    @property
    def admin(self) -> bool:
        return self.groups is None

    def allows(self, group: str) -> bool:
        return self.groups is None or group in self.groups

    def describe(self) -> str:
        return "the admin token" if self.groups is None else f"scoped to groups {sorted(self.groups)}"


ADMIN = Scope(None)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(admin: str, signed: str) -> str:
    return _b64(hmac.new(admin.encode(), signed.encode("ascii"), hashlib.sha256).digest())


def scoped_token(admin: str, groups: Iterable[str]) -> str:
    """A token good for reporting to (and reading) ``groups`` only; deterministic, so the
    operator can re-mint it on every reconcile and write the Secret only when it differs."""
    if not admin:
        raise ValueError("admin token: must not be empty (a scoped token is signed with it)")
    names = sorted({check_group_name(g) for g in groups})
    if not names:
        raise ValueError("groups: a scoped token needs at least one group")
    payload = _b64(json.dumps(names, separators=(",", ":")).encode())
    signed = f"{PREFIX}.{payload}"
    return f"{signed}.{_signature(admin, signed)}"


def verify(admin: str, token: str) -> Scope | None:
    """The scope ``token`` grants under ``admin``; None: neither the admin token nor a valid
    scoped token (unsigned, tampered, signed with another admin token, or malformed)."""
    if not admin:
        return None
    if hmac.compare_digest(token.encode(errors="surrogateescape"), admin.encode(errors="surrogateescape")):
        return ADMIN
    if not token.isascii():  # scoped tokens are ASCII
        return None
    signed, dot, signature = token.rpartition(".")
    if not dot or not signed.startswith(f"{PREFIX}.") or signed.count(".") != PREFIX.count(".") + 1:
        return None
    if not hmac.compare_digest(signature.encode(), _signature(admin, signed).encode()):
        return None
    try:  # signed by us, so well formed; checked anyway in case the format ever changes
        names = json.loads(_unb64(signed.removeprefix(f"{PREFIX}.")))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    return Scope(frozenset(names))
