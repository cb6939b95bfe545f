"""Issue 29 item 6: splits as wide as the pipeline's lateness allows, where the user set no span."""

from __future__ import annotations

from datetime import timedelta

from spark_app.contract.sources import SplitConfig
from spark_app.planning.split_spans import SHARE, fitted

H = timedelta(hours=1)
M = timedelta(minutes=1)


def test_a_six_hour_join_bound_lets_slices_and_bundles_span_a_quarter_of_it() -> None:
    split = fitted(SplitConfig(), 6 * H, timedelta(0), "strict")
    assert split.slice_span == split.max_bundle_span == 6 * H / SHARE
    assert split.slice_span + split.max_bundle_span <= 6 * H / 2, "the guard keeps half the delay as margin"


def test_aligned_keeps_its_spans_they_bound_its_state() -> None:
    assert fitted(SplitConfig(), 6 * H, 10 * M, "aligned") == SplitConfig()


def test_never_below_the_defaults_nor_over_what_the_user_set() -> None:
    assert fitted(SplitConfig(), 10 * M, timedelta(0), "strict") == SplitConfig(), "a tight delay keeps 5m"
    own = SplitConfig.model_validate({"sliceSpan": "2m"})
    got = fitted(own, 6 * H, timedelta(0), "strict")
    assert got.slice_span == 2 * M and got.max_bundle_span == 6 * H / SHARE
    off = SplitConfig.model_validate({"sliceSpan": None})
    assert fitted(off, 6 * H, timedelta(0), "strict").slice_span is None, "slicing stays off"


def test_unordered_and_pipelines_without_a_watermark_are_left_alone() -> None:
    assert fitted(SplitConfig(), 6 * H, timedelta(0), "unordered") == SplitConfig()
    assert fitted(SplitConfig(), None, timedelta(0), "strict") == SplitConfig()
