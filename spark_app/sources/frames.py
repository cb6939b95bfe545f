"""The job's sources as DataFrames (each source's spec: its window, alignment, members and
files of record), and the pipeline's outputs over them: what a run streams, what a bounded
run reads in batch, what ``kappa plan`` builds to learn the edges without running anything."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from spark_app.alignment.round_record import QueryRounds, rounds_file
from spark_app.bootstrap.legs import BootstrapLeg, hybrid_frames
from spark_app.contract.alignment import aligned_members, member_id, query_of
from spark_app.contract.config import JobConfig
from spark_app.contract.errors import ConfigError
from spark_app.contract.reports.bootstrap import BootstrapRecord
from spark_app.contract.sources import IcebergSourceBase, KafkaSource
from spark_app.lookups.context import job_catalogs
from spark_app.sources.iceberg.frame import iceberg_frame
from spark_app.sources.iceberg.spec import SourceSpec
from spark_app.sources.iceberg.stream import default_watermark_file
from spark_app.sources.parallelism import task_slots

Pipeline = Callable[..., dict[str, DataFrame]]
"""A job's pipeline: ``{source name: DataFrame}`` (and ``pipelineArgs``) to ``{sink name: DataFrame}``."""


# --- sources -----------------------------------------------------------------------------


def watermark_file(cfg: JobConfig) -> str:
    """Where a run without a coordinator keeps its alignment group's watermarks."""
    if cfg.alignment.state_dir:
        return str(Path(cfg.alignment.state_dir) / f"{cfg.alignment_group}.json")
    return default_watermark_file(cfg.alignment_group, cfg.checkpoint.location)


def reset_rounds(cfg: JobConfig, sinks: Iterable[str]) -> None:
    """A fresh admission-round record for each query about to start (see rounds.py)."""
    for sink in sinks:
        QueryRounds(rounds_file(watermark_file(cfg), f"{cfg.name}/{sink}")).reset()


def source_spec(
    cfg: JobConfig,
    sink: str,
    name: str,
    parallelism: int,
    members: tuple[str, ...] | None = None,
    extended_to: tuple[int, ...] = (),
) -> SourceSpec:
    """``members``: the group's members this driver reports as (default: every configured
    (sink, source) pair; the runtime narrows it to the sources the pipeline reads).
    ``extended_to``: the backfill's drain extensions so far (``DrainExtensions``)."""
    src = cfg.sources[name]
    assert isinstance(src, IcebergSourceBase)
    return SourceSpec(
        name=name,
        member=member_id(cfg, sink, name),
        source=src,
        catalog=cfg.catalogs[src.catalog].properties(),
        ordering_column=cfg.ordering_column(name),
        window=cfg.window,
        alignment=cfg.alignment,
        group=cfg.alignment_group,
        members=aligned_members(cfg) if members is None else members,
        watermark_file=watermark_file(cfg),
        rounds_file=str(rounds_file(watermark_file(cfg), query_of(member_id(cfg, sink, name)))),
        batch_row_budget=cfg.round_budget,
        coordinator=cfg.coordinator,
        trace_path=cfg.trace_path,
        parallelism=parallelism,
        extended_to=extended_to,
    )


def source_frames(
    spark: SparkSession,
    cfg: JobConfig,
    sink: str,
    members: tuple[str, ...] | None = None,
    extended_to: tuple[int, ...] = (),
    boot: tuple[BootstrapRecord, BootstrapLeg] | None = None,
) -> dict[str, DataFrame]:
    """``boot``: a bootstrapped job's record and leg (each source its archive, then its topic)."""
    slots = task_slots(spark)
    if boot is not None:
        record, leg = boot
        return hybrid_frames(
            spark, cfg, sink, record, leg, lambda c, s, n: source_spec(c, s, n, slots)
        )  # fmt: skip
    frames = {}
    for name, src in cfg.sources.items():
        if isinstance(src, KafkaSource):
            from spark_app.sources.kafka import kafka_frame

            frames[name] = kafka_frame(spark, cfg, name, src)
            continue
        frames[name] = iceberg_frame(spark, source_spec(cfg, sink, name, slots, members, extended_to))
    return frames


# --- pipeline ----------------------------------------------------------------------------


def load_pipeline(entry: str) -> Pipeline:
    module_name, func_name = entry.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"pipeline {entry!r}: cannot import module {module_name!r} ({exc}); put it in the Spark image, or "
            "ship it with spec.deps.pyFiles or spec.pipelineFrom (kappa run: --py-files PATH)"
        ) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"pipeline {entry!r}: module {module_name!r} has no function {func_name!r}")
    return func  # type: ignore[no-any-return]


def outputs_for(
    spark: SparkSession,
    cfg: JobConfig,
    pipeline: Pipeline,
    members: tuple[str, ...] | None = None,
    frames: dict[str, dict[str, DataFrame]] | None = None,
    extended_to: tuple[int, ...] = (),
    boot: tuple[BootstrapRecord, BootstrapLeg] | None = None,
) -> dict[str, DataFrame]:
    """Call the pipeline once per output, each with its own source readers (``frames``, when
    given, receives them per sink)."""
    outputs = {}
    for sink in cfg.sinks:
        inputs = source_frames(spark, cfg, sink, members, extended_to, boot)
        if frames is not None:
            frames[sink] = inputs
        # the job's catalogs, for lookups of tables beside the sources (spark_app/lookups/context.py)
        with job_catalogs({n: c.properties() for n, c in cfg.catalogs.items()}):
            result = pipeline(inputs, **cfg.pipeline_args)
        if not isinstance(result, dict):
            raise ConfigError(f"pipeline {cfg.pipeline} must return {{sink name: DataFrame}}, got {type(result)}")
        missing = sorted(set(cfg.sinks) - set(result))
        extra = sorted(set(result) - set(cfg.sinks))
        if missing or extra:
            raise ConfigError(
                f"pipeline {cfg.pipeline} returned outputs {sorted(result)} but sinks are {sorted(cfg.sinks)}: "
                f"missing {missing}, unknown {extra}; name the sinks after the pipeline's outputs"
            )
        outputs[sink] = result[sink]
    return outputs | dead_letter_outputs(spark, cfg, boot)


def dead_letter_outputs(
    spark: SparkSession, cfg: JobConfig, boot: tuple[BootstrapRecord, BootstrapLeg] | None = None
) -> dict[str, DataFrame]:
    """One dead-letter query per Avro source when the job names a dead-letter table. A
    bootstrapped job's start when its topics are read (after its archive leg), from where each
    archive ended, as the topics' own reads do."""
    if not cfg.dead_letter_outputs or (boot is not None and boot[1] == "archive"):
        return {}
    from spark_app.bootstrap.seam import starting_offsets
    from spark_app.contract.dead_letters import output_name
    from spark_app.sources.dead_letters import dead_letter_frame

    out = {}
    for name in cfg.avro_sources:
        src = cfg.sources[name]
        assert isinstance(src, KafkaSource)
        start = None if boot is None else starting_offsets(boot[0].offsets[name])
        out[output_name(name)] = dead_letter_frame(spark, cfg, name, src, start)
    return out
