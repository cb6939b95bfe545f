"""One duration grammar (issue 30 item 6): a Backfill and the JobConfig rendered from it read the
same strings as the same length of time, and refuse the same strings with the same words. The
grammar itself is in spark_app/contract/durations.py; here each side is reached the way users reach it:
the CRD models (``kappa run``/``plan`` on a manifest, the operator) and JobConfig
(``python -m spark_app --config``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pydantic
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kappa_operator.models.backfill import BackfillAlignment, BackfillWindow
from spark_app.contract.config import AlignmentConfig, Window
from spark_app.contract.durations import DURATION_HELP, DURATION_MAX, DURATION_PATTERN, duration_ms

WINDOW = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-02T00:00:00Z"}


def verdict(model: type[pydantic.BaseModel], data: dict[str, Any], field: str) -> tuple[str, Any]:
    """("ok", the field's value as a timedelta) or ("refused", the message a user reads)."""
    try:
        value = getattr(model.model_validate(data), field)
    except pydantic.ValidationError as exc:
        (error,) = exc.errors()
        return "refused", error["msg"].removeprefix("Value error, ")
    return "ok", value if isinstance(value, timedelta) else timedelta(milliseconds=duration_ms(value))


def both(value: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """The verdicts on ``value`` as a duration that may be zero (window.warmup) from the
    Backfill's model and from JobConfig's."""
    crd = verdict(BackfillWindow, {**WINDOW, "warmup": value}, "warmup")
    job = verdict(Window, {**WINDOW, "warmup": value}, "warmup")
    return crd, job


ACCEPTED = [
    ("90s", timedelta(seconds=90)),
    ("10m", timedelta(minutes=10)),
    ("1h30m", timedelta(hours=1, minutes=30)),
    ("250ms", timedelta(milliseconds=250)),
    ("1.5h", timedelta(minutes=90)),
    ("0.25s", timedelta(milliseconds=250)),
    ("1m30s500ms", timedelta(minutes=1, seconds=30, milliseconds=500)),
    ("0s", timedelta(0)),
    (DURATION_MAX, timedelta(hours=87600)),
]

REFUSED = [
    ("5 minutes", ""),
    ("10", " (a bare number has no unit: add s, m or h)"),
    (90, " (a bare number has no unit: add s, m or h)"),
    ("PT10M", " (ISO 8601 is not read: write 10m)"),
    ("1d", " (no unit d: write 24h for a day)"),
    ("-5m", " (a duration has no sign)"),
    ("1h 30m", " (no spaces)"),
    ("10M", " (units are lowercase)"),
    ("0.0001ms", " (whole milliseconds: at most 3 decimals of s, 4 of m, 5 of h, none of ms)"),
    ("", ""),
]


@pytest.mark.parametrize(("text", "expected"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_both_accept_the_same_strings_as_the_same_duration(text: str, expected: timedelta) -> None:
    assert both(text) == (("ok", expected), ("ok", expected))


@pytest.mark.parametrize(("value", "hint"), REFUSED, ids=[str(v) or "empty" for v, _ in REFUSED])
def test_both_refuse_the_same_strings_with_the_same_message(value: Any, hint: str) -> None:
    message = f"expected {DURATION_HELP}, got {value!r}{hint}"
    assert both(value) == (("refused", message), ("refused", message))


def test_both_bound_a_duration_at_ten_years_with_the_same_message() -> None:
    message = "must be at most 87600h (10 years), got '87600h1ms'"
    assert both("87600h1ms") == (("refused", message), ("refused", message))
    too_long = "1m" + "0s" * 16  # in the grammar, but longer than the CRD's maxLength
    message = f"expected {DURATION_HELP} of at most 32 characters, got {too_long!r}"
    assert both(too_long) == (("refused", message), ("refused", message))


@pytest.mark.parametrize("drift", ["0s", "0h0m0.000s"])
def test_a_zero_max_drift_gets_the_same_message_from_both(drift: str) -> None:
    """maxDrift is the one duration that must be above zero; both say what to use instead."""
    message = f"must be > 0, got {drift!r} (use mode: strict for no drift)"
    crd = verdict(BackfillAlignment, {"maxDrift": drift}, "max_drift")
    job = verdict(AlignmentConfig, {"maxDrift": drift}, "max_drift")
    assert crd == job == ("refused", message)


DURATION_LIKE = (
    r"\A[-+ ]?(P|PT)?[0-9]{0,11}(\.[0-9]{0,6})?(ns|us|ms|s|m|h|d|M|H|S)?([0-9]{1,3}(\.[0-9]{1,6})?(ms|s|m|h))?\Z"
)


@given(st.one_of(st.from_regex(DURATION_LIKE), st.from_regex(DURATION_PATTERN), st.text(max_size=40)))
@example("P1000000000d")  # more days than a timedelta holds: found by CI, once an OverflowError
def test_any_string_gets_the_same_verdict_and_message_from_both(value: str) -> None:
    crd, job = both(value)
    assert crd == job
