"""A restore point in the custom resources' status has one form (``RestorePointStatus``) for the
listed snapshots, a new job's initial restore and a Rewind's choice, made from the contract's
``RestorePoint`` by one function."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from kappa_operator.models.rewind import SinkRestore
from kappa_operator.models.streaming_job_status import ListedRestorePoint, RestorePointStatus, StreamingJobStatus
from spark_app.contract.config import RestorePoint

POINT = RestorePoint(
    sink="out",
    batch_id=7,
    query_id="q-1",
    committed_at=datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC),
    watermark_ms=int(datetime(2026, 11, 1, 11, 55, tzinfo=UTC).timestamp() * 1000),
)


def test_a_point_in_status_keeps_its_exact_commit_time_its_query_and_watermark() -> None:
    shown = RestorePointStatus.of(POINT).model_dump(by_alias=True, exclude_none=True)
    assert shown == {
        "sink": "out",
        "batchId": 7,
        "committedAt": "2026-11-01T12:00:00.123456Z",
        "queryId": "q-1",
        "watermark": "2026-11-01T11:55:00Z",
    }


@pytest.mark.parametrize("watermark_ms", [None, 0, -1])
def test_a_point_before_any_watermark_shows_none(watermark_ms: int | None) -> None:
    assert RestorePointStatus.of(POINT.model_copy(update={"watermark_ms": watermark_ms})).watermark is None


def test_a_rewinds_choice_is_the_same_form_plus_what_its_reset_did() -> None:
    chosen = SinkRestore.of(POINT)
    assert (
        chosen.model_dump(exclude={"table", "files_removed", "undone_records"})
        == RestorePointStatus.of(POINT).model_dump()
    )
    assert chosen.files_removed is None, "not reset yet"


def test_a_status_an_older_operator_wrote_still_reads() -> None:
    """Listed points written before the one form had no queryId and second-precision times: an
    operator upgraded over a running job must read its status, not crash on it."""
    old = {"checkpoints": [{"sink": "out", "batchId": 3, "committedAt": "2026-11-01T12:00:00Z"}]}
    (point,) = StreamingJobStatus.model_validate(old).checkpoints
    assert isinstance(point, ListedRestorePoint) and (point.query_id, point.batch_id) == (None, 3)


def test_a_chosen_point_must_name_its_query() -> None:
    """What a restore undoes is the query's batches after the point: a chosen point without its
    query (a new job's initial restore, a Rewind's choice) is refused, naming the field."""
    chosen = {"sink": "out", "batchId": 3, "committedAt": "2026-11-01T12:00:00.000000Z"}
    for model in (RestorePointStatus, SinkRestore):
        with pytest.raises(ValidationError, match="queryId"):
            model.model_validate(chosen)
    assert ListedRestorePoint.of(POINT).model_dump() == RestorePointStatus.of(POINT).model_dump(), "one form"


def test_an_unknown_field_in_a_point_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="queryID"):
        RestorePointStatus.model_validate({"sink": "o", "batchId": 1, "committedAt": "x", "queryID": "q"})
