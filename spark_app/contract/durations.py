"""Durations as users write them: one grammar for the custom resources and for JobConfig.

A duration written in a Backfill is copied into the JobConfig the driver reads, and users
copy durations between the two, so both must read the same strings and refuse the same
strings with the same words. The grammar is the one Kubernetes users already know, Go's
``time.ParseDuration`` (which the API server's CEL ``duration()`` also reads), narrowed to what
Go and Python read as the same value:

* units ``h``, ``m``, ``s``, ``ms``, combined largest first or not (``1h30m``, ``90s``,
  ``1.5h``, ``250ms``); no days (Go has none), no ISO 8601, no bare numbers (is ``90`` seconds
  or milliseconds?), no spaces;
* whole milliseconds: a fraction of a unit has at most as many digits as keep it whole
  (``0.25s``, not ``0.0001ms``, which Go reads as 100ns while Python's timedelta rounds it
  to 0), and at most 9 digits before it;
* no sign: every duration field is a length of time, never negative; a field that must be
  above zero says so itself (:func:`check_positive`);
* at most :data:`DURATION_MAX` and :data:`DURATION_LENGTH_MAX` characters, far below what
  Go's int64 nanoseconds and Python's timedelta hold, so arithmetic on them never overflows.

This module is the only definition: the CRD models take :data:`DURATION_PATTERN` for the
schema and :func:`check_duration` for their message; JobConfig parses with
:func:`parse_duration` and writes with :func:`format_duration`. It imports nothing of the
operator (spark_app never does).
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

DURATION_PATTERN = r"^([0-9]{1,9}ms|[0-9]{1,9}(\.[0-9]{1,3})?s|[0-9]{1,9}(\.[0-9]{1,4})?m|[0-9]{1,9}(\.[0-9]{1,5})?h)+$"
DURATION_LENGTH_MAX = 32
DURATION_MAX = "87600h"
"""The longest duration accepted anywhere (10 years)."""
DURATION_HELP = "a duration such as 90s, 10m, 1h30m (units ms, s, m, h)"

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_PART = re.compile(r"([0-9.]+)(ms|s|m|h)")
_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", re.IGNORECASE)


def duration_ms(text: str) -> int:
    """A duration in the grammar, in milliseconds, exactly (Decimal: no float rounding)."""
    total = Decimal(0)
    for number, unit in _PART.findall(text):
        total += Decimal(number) * _UNIT_MS[unit]
    return int(total)


_MAX_MS = duration_ms(DURATION_MAX)


def _in_grammar(text: str) -> bool:
    return re.fullmatch(DURATION_PATTERN, text) is not None


def _hint(value: Any) -> str:
    """What is wrong with a refused value, for the forms people bring from elsewhere."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return " (a bare number has no unit: add s, m or h)"
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return " (a bare number has no unit: add s, m or h)"
    if text[:1] in ("-", "+") and _in_grammar(text[1:]):
        return " (a duration has no sign)"
    if _in_grammar(text.replace(" ", "")):
        return " (no spaces)"
    if _in_grammar(text.lower()):
        return " (units are lowercase)"
    if (iso := _ISO.fullmatch(text)) and text.upper() not in ("P", "PT"):
        d, h, m, s = (int(g or 0) for g in iso.groups())
        try:
            written = format_duration(timedelta(days=d, hours=h, minutes=m, seconds=s))
        except OverflowError:  # more days than a timedelta holds: far past the grammar's maximum anyway
            return f" (ISO 8601 is not read; at most {DURATION_MAX})"
        return f" (ISO 8601 is not read: write {written})"
    if re.fullmatch(r"([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+", text):
        if "d" in text:
            return " (no unit d: write 24h for a day)"
        if all(len(n) <= 9 for n in re.findall(r"([0-9]+)(?:\.[0-9]+)?(?:ms|s|m|h)", text)):
            return " (whole milliseconds: at most 3 decimals of s, 4 of m, 5 of h, none of ms)"
        return f" (at most {DURATION_MAX})"
    return ""


def check_duration(value: Any) -> str:
    """``value`` if it is a duration in the grammar, else a ValueError saying what one looks
    like (never the regular expression: users read these messages)."""
    if not isinstance(value, str):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}{_hint(value)}")
    if len(value) > DURATION_LENGTH_MAX:
        raise ValueError(f"expected {DURATION_HELP} of at most {DURATION_LENGTH_MAX} characters, got {value!r}")
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}{_hint(value)}")
    if duration_ms(value) > _MAX_MS:
        raise ValueError(f"must be at most {DURATION_MAX} (10 years), got {value!r}")
    return value


def check_positive(value: str, hint: str = "") -> str:
    """A duration in the grammar that must be above zero; ``hint`` says what to do instead."""
    if duration_ms(check_duration(value)) <= 0:
        raise ValueError(f"must be > 0, got {value!r}{hint}")
    return value


def parse_duration(value: Any) -> timedelta:
    """A duration in the grammar as a timedelta. A timedelta passes as it is: configs built in
    Python (tests, the demo, benches) are not text, and may be finer than a millisecond."""
    if isinstance(value, timedelta):
        return value
    return timedelta(milliseconds=duration_ms(check_duration(value)))


def format_duration(value: timedelta) -> str:
    """A timedelta in the grammar, largest units first (``1h30m``, ``45s``, ``0.25s``, ``24h``).

    Rounded up to a whole millisecond: the grammar has nothing finer, and the messages that
    print a bound must never understate it. Negative values (only ever printed in a message,
    never parsed) get a leading ``-``.
    """
    if value < timedelta(0):
        return "-" + format_duration(-value)
    ms = -(-value // timedelta(microseconds=1) // 1000)
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in (("h", 3_600_000), ("m", 60_000)):
        n, ms = divmod(ms, size)
        if n:
            parts.append(f"{n}{unit}")
    if ms:
        seconds, millis = divmod(ms, 1000)
        parts.append(f"{seconds}s" if not millis else f"{seconds}.{millis:03d}".rstrip("0") + "s")
    return "".join(parts)
