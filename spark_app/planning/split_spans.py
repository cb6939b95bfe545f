"""How wide a split may be: as wide as the pipeline's lateness allows, not a fixed 5 minutes.

A split's event-time span is what its rows can be out of order by when admitted together
(the lateness guard: ``maxDrift + largest split span`` must fit the watermark delay). Fixed
defaults (``sliceSpan`` and ``maxBundleSpan``, 5 minutes each) make every pipeline pay for the
tightest one: a range join with a 6 h bound still has each ingestion file cut into 5-minute
time slices and bundles closed after 5 minutes of event time, so a table with late events
gets twice the splits, and a strict backfill (one round per distinct lower bound) twice the
micro-batches, of reading whole files (issue 29, item 6). Slices no late row needs separated
belong in one admission.

So in strict mode, where the user set neither, both spans grow to a quarter of the
pipeline's watermark delay: a split (a slice, or a bundle of them, spanning at most the two)
then needs at most half the delay, which keeps the guard's margin. They never shrink below the
defaults, and an explicit setting is kept as is. Strict only: its cost is its batch count
(at zero drift, one admission round per distinct lower bound), while an aligned backfill
already admits `maxDrift` ahead in each round, and there a wider split is more state held per
batch, which aligned mode exists to bound (a plan test measures it). Unordered reads (no
ordering bound) and pipelines without a watermark are left alone. Pure.
"""

from __future__ import annotations

from datetime import timedelta

from spark_app.contract.config import JobConfig
from spark_app.contract.sources import IcebergBackfillSource, SplitConfig

SHARE = 4
"""A split may span up to ``(delay - drift) / SHARE`` as a slice, and as much again bundled."""

_FIELDS = ("slice_span", "max_bundle_span")


def fitted(split: SplitConfig, delay: timedelta | None, drift: timedelta, mode: str) -> SplitConfig:
    """``split`` with the spans the delay allows in place of the defaults it did not override."""
    if delay is None or mode != "strict":
        return split
    room = (delay - drift) / SHARE
    update = {}
    for name in _FIELDS:
        current = getattr(split, name)
        if name in split.model_fields_set or current is None or current >= room:
            continue
        update[name] = room
    return split.model_copy(update=update) if update else split


def fit_sources(cfg: JobConfig, delay: timedelta | None) -> JobConfig:
    """The backfill's sources with fitted spans (``delay``: ``alignment.lateness`` or the plan's)."""
    sources = {}
    for name, src in cfg.sources.items():
        if isinstance(src, IcebergBackfillSource):
            split = fitted(src.split, delay, cfg.alignment.effective_drift, cfg.alignment.mode)
            if split is not src.split:
                src = src.model_copy(update={"split": split})
        sources[name] = src
    return cfg.model_copy(update={"sources": sources})
