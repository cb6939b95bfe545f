"""What the coordinator accepts as group names, member ids and watermarks.

Names become URL path segments, Prometheus labels, keys of the durable store and entries of
scoped tokens, so they are kept to what the operator and the Spark side produce: group names
are ``<namespace>.<group>`` (DNS labels joined by '.'), member ids ``<job>/<sink>/<source>``.
Anything else (``../../etc``, control characters, kilobytes of name) is a client bug or an
attack, refused with a message naming the rule.

Watermarks are Spark timestamps in microseconds, so the accepted range is Spark's (and
Python's ``datetime``): years 1 to 9999. Every split bound a driver can compute lies in it;
1e26 does not, and would make every lag gauge and status timestamp meaningless.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator

GROUP_NAME_MAX = 253
LABEL_MAX = 63
MEMBER_ID_MAX = 512

_LABEL = r"[a-z0-9](?:[-_a-z0-9]*[a-z0-9])?"
GROUP_NAME_PATTERN = rf"^{_LABEL}(?:\.{_LABEL})*$"
"""DNS-label-like parts joined by '.' (also allows '_' inside a part), e.g. ``default.rmi-outage``."""
_SEGMENT = r"[A-Za-z0-9_][-_.A-Za-z0-9]*"
MEMBER_ID_PATTERN = rf"^{_SEGMENT}(?:/{_SEGMENT})*$"
"""Segments joined by '/'; a segment never starts with '.', so '.' and '..' are not segments."""

GROUP_RULE = (
    f"must be labels of lowercase letters, digits, '-' and '_' (starting and ending with a letter or digit, "
    f"at most {LABEL_MAX} characters each) joined by '.', at most {GROUP_NAME_MAX} characters in all, "
    f"e.g. 'default.rmi-outage'"
)
MEMBER_RULE = (
    f"must be segments of letters, digits, '_', '-' and '.' (not starting with '.') joined by '/', "
    f"at most {MEMBER_ID_MAX} characters in all, e.g. 'job/sink/source'"
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_WATERMARK_US = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // datetime.resolution
"""0001-01-01T00:00:00Z, the earliest Spark timestamp."""
MAX_WATERMARK_US = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _EPOCH) // datetime.resolution
"""9999-12-31T23:59:59.999999Z, the latest Spark timestamp."""


def check_group_name(name: str) -> str:
    if len(name) > GROUP_NAME_MAX or not re.fullmatch(GROUP_NAME_PATTERN, name):
        raise ValueError(f"{_shown(name)} is not a valid group name: it {GROUP_RULE}")
    if any(len(label) > LABEL_MAX for label in name.split(".")):
        raise ValueError(f"{_shown(name)} is not a valid group name: it {GROUP_RULE}")
    return name


def check_member_id(member: str) -> str:
    if len(member) > MEMBER_ID_MAX or not re.fullmatch(MEMBER_ID_PATTERN, member):
        raise ValueError(f"{_shown(member)} is not a valid member id: it {MEMBER_RULE}")
    return member


def check_watermark(us: int) -> int:
    if not MIN_WATERMARK_US <= us <= MAX_WATERMARK_US:
        raise ValueError(
            f"{us} is not a timestamp: watermarks are microseconds since the epoch between "
            f"{MIN_WATERMARK_US} (0001-01-01) and {MAX_WATERMARK_US} (9999-12-31), Spark's timestamp range"
        )
    return us


def _shown(value: str) -> str:
    """Bounded, so a megabyte of name does not come back in the error."""
    return repr(value) if len(value) <= 80 else f"{value[:60]!r}... ({len(value)} characters)"


GroupName = Annotated[str, AfterValidator(check_group_name)]
MemberId = Annotated[str, AfterValidator(check_member_id)]
WatermarkUs = Annotated[int, AfterValidator(check_watermark)]
"""Microseconds since the epoch within Spark's timestamp range."""
