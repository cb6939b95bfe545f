"""The demo's settings and the JobConfigs it runs: the same documents the operator renders from
a StreamingJob and its Backfill, pointed at a local SQLite Iceberg catalog."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.durations import parse_duration
from spark_app.examples import rmi, sessions
from spark_app.examples.generator import GeneratorConfig

START = datetime(2026, 11, 1, 10, tzinfo=UTC)
RMI_TABLE = "out.attributed_plays"
RMI_KEY = ["playback_id", "impression_id"]
SESSIONS_KEY = ["profile_id", "session_start"]
RMI_ARGS = {"lateness": "15 minutes", "attribution_window": "5 minutes"}
"""The demo's rmi: 15 minutes of lateness cover the generator's disorder (events up to 10 min
late, committed every 5 min) and the backfill's (maxDrift 5m + unbundled splits of at most the
5-minute slice span); the state either needs is then a small part of the 105-minute window,
which is what alignment buys over an unordered read of the same window (3.2x less peak state
at the defaults)."""
WARMUP = timedelta(minutes=5)
"""rmi attributes a play to impressions up to 5 minutes before it: the backfill reads them too."""

# Spark's own start-up chatter (hostname, native Hadoop) would scroll the progress bars away;
# errors still reach stderr. Root and org.apache.spark at the same level keep Spark from
# printing its "Setting default log level" banner.
LOG_CONFIG = "spark-log4j2.properties"
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
"""


@dataclass(frozen=True)
class DemoSettings:
    out: Path
    hours: float = 2.0
    seed: int = 7
    impressions_per_hour: int = 4000
    max_drift: str = "5m"

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", self.out.resolve())  # catalog and log URIs need an absolute path
        if not 0.75 <= self.hours <= 48:
            raise ValueError(
                "--hours must be between 0.75 and 48 (the outages span the middle of the history; the windows and "
                f"sessions backfills need 22 minutes of history after theirs), got {self.hours}"
            )
        if parse_duration(self.max_drift) <= timedelta(0):  # refused now, not after the live run
            raise ValueError(f"--max-drift must be > 0, got {self.max_drift!r}")

    @property
    def window(self) -> tuple[datetime, datetime]:
        """rmi's outage, and so its backfill window: all but the first and last sixteenth of the
        generated hours, long against the pipeline's state horizon (~30 minutes of data), so the
        state that alignment saves shows."""
        return START + timedelta(hours=self.hours / 16), START + timedelta(hours=self.hours * 15 / 16)

    @property
    def rewind_window(self) -> tuple[datetime, datetime]:
        """The sessions job's outage, which the rewind undoes: the middle half of the hours."""
        return START + timedelta(hours=self.hours / 4), START + timedelta(hours=self.hours * 3 / 4)

    @property
    def catalog_props(self) -> dict[str, str]:
        return {"uri": f"sqlite:///{self.out}/catalog.db", "warehouse": f"file://{self.out}/warehouse"}

    def generator(self, namespace: str = "demo") -> GeneratorConfig:
        return GeneratorConfig(
            start=START,
            hours=self.hours,
            impressions_per_hour=self.impressions_per_hour,
            seed=self.seed,
            commit_interval=timedelta(minutes=5),
            namespace=namespace,
        )

    def job_dir(self, name: str) -> Path:
        return self.out / "jobs" / name


def write_log_config(s: DemoSettings) -> Path:
    path = s.out / LOG_CONFIG
    path.write_text(_LOG4J2)
    return path


def job_config(s: DemoSettings, name: str, pipeline: str, mode: str, sink: dict[str, Any], **fields: Any) -> JobConfig:
    return parse_config(
        {
            "name": name,
            "pipeline": pipeline,
            "mode": mode,
            "master": "local[2]",
            "sparkConf": {
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={(s.out / LOG_CONFIG).as_uri()}",
            },
            "catalogs": {"default": {"type": "sql", **s.catalog_props}},
            "sinks": sink,
            "checkpoint": {"location": str(s.job_dir(name) / "checkpoint")},
            "tracePath": str(s.job_dir(name) / "trace.jsonl"),
            "trigger": {"kind": "availableNow"},
            **fields,
        }
    )


def _rmi_sink() -> dict[str, Any]:
    return {
        rmi.OUTPUT: {
            "kind": "iceberg",
            "table": RMI_TABLE,
            "partitionBy": [f"hour({rmi.TIME_COLUMN})"],
            "key": RMI_KEY,
            "timeColumn": rmi.TIME_COLUMN,
        }
    }


def rmi_live(s: DemoSettings) -> JobConfig:
    """The StreamingJob: one generator commit (one snapshot per table) per micro-batch, as it
    ran in production, into main."""
    live = {"kind": "icebergLive", "startingPosition": "earliest", "readLimit": {"maxSnapshots": 1}}
    return job_config(
        s,
        "rmi",
        "spark_app.examples.rmi:pipeline",
        "live",
        _rmi_sink(),
        sources={n: {**live, "table": f"demo.{n}"} for n in ("impressions", "playbacks")},
        pipelineArgs=RMI_ARGS,
    )


def rmi_backfill(s: DemoSettings, name: str, alignment: dict[str, Any], **fields: Any) -> JobConfig:
    """The Backfill of the outage window: the job's sources switched to their history, output
    into ``backfill-<name>``."""
    start, end = s.window
    return job_config(
        s,
        name,
        "spark_app.examples.rmi:pipeline",
        "backfill",
        _rmi_sink(),
        # No bundling of neighbouring files: splits span at most the 5-minute slice span, so
        # a batch reaches at most maxDrift + 5m past the global watermark (less state).
        sources={
            n: {"kind": "icebergBackfill", "table": f"demo.{n}", "split": {"maxBundleSpan": "0s"}}
            for n in ("impressions", "playbacks")
        },
        window={"start": start.isoformat(), "end": end.isoformat(), "warmup": f"{WARMUP.seconds // 60}m"},
        # The demo's window (~40k rows) fits in one default batchRowBudget: merged rounds would
        # read it in two batches and hide the drift bound the demo shows. One round per batch.
        alignment={"batchRowBudget": 0, **alignment, "stateDir": str(s.job_dir(name))},
        pipelineArgs=RMI_ARGS,
        **fields,
    )


def sessions_job(s: DemoSettings, table: str, checkpoint: Path, read_limit: dict[str, int] | None) -> JobConfig:
    """The stateful sessions StreamingJob over the rewind story's playbacks table."""
    source: dict[str, Any] = {"kind": "icebergLive", "table": "rewind.playbacks", "startingPosition": "earliest"}
    if read_limit:
        source["readLimit"] = read_limit
    name = table.split(".")[-1].replace("_", "-")
    return job_config(
        s,
        name,
        "spark_app.examples.sessions:pipeline",
        "live",
        {sessions.OUTPUT: {"kind": "iceberg", "table": table, "key": SESSIONS_KEY, "timeColumn": sessions.TIME_COLUMN}},
        sources={"playbacks": source},
        checkpoint={"location": str(checkpoint)},
        tracePath=str(checkpoint / "trace.jsonl"),
    )
