"""Everything `kappa run` changes about a manifest or the JobConfig rendered from it, in one
place, each change returned as a line a person reads (nothing is changed silently).

* ``--local DIR`` (:func:`localize`): every catalog of the job becomes a pyiceberg SqlCatalog
  on SQLite under ``DIR/catalogs`` and every location (warehouse, checkpoint, external
  snapshots, parquet sink path) a directory under DIR that keeps the URI's bucket and path
  (``s3a://lake/x`` and ``s3://lake/x`` are one place, as on S3). The result is still a
  StreamingJob the models validate, so rendering and decisions run on it unchanged.
* The rewind target (:func:`retarget`): snapshots record the wall-clock time Spark committed a
  batch, so a target time on the production timeline precedes every snapshot a local run
  takes; ``--target-batch N`` or ``--target-time T`` replace ``spec.target`` (same model, same
  choice of restore point), and say so.
* The local runtime (:func:`runtime_config`): local master, availableNow unless ``--follow``,
  where a fresh live query starts and how many source snapshots one micro-batch reads, the
  embedded coordinator's token.
* ``--secrets-dir DIR`` (:func:`local_secrets`): the Secrets a Kafka source or sink names are
  read from ``DIR/<secret>/<key>``, one file per key as Kubernetes mounts them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from kappa_operator.local.deps import local_code
from kappa_operator.models.rewind import Rewind
from kappa_operator.models.streaming_job import StreamingJob
from kappa_operator.render.kafka_security import MOUNT_ROOT
from spark_app.contract.config import JobConfig, parse_config
from spark_app.contract.errors import ConfigError

LOCAL_SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
"""Under the manifest's sparkConf: two cores' worth of shuffle tasks, no console progress bars
over the display."""
SAME_STORE = {"s3a": "s3", "s3n": "s3"}
"""Spark's Hadoop schemes that name the same object store as pyarrow's/pyiceberg's."""


@dataclass(frozen=True)
class RunOptions:
    """The command line of `kappa run`, minus the files."""

    local: Path | None = None
    """Map catalogs and locations under this directory."""
    state: Path | None = None
    """Where the local records of objects live (default: DIR/objects with --local, else .kappa)."""
    master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    follow: bool = False
    """StreamingJob: processing-time trigger until Ctrl-C instead of availableNow."""
    starting_position: Literal["earliest", "latest"] | None = None
    """Live Iceberg sources of a fresh query start here instead of the manifest's position."""
    snapshots_per_batch: int | None = None
    """Live Iceberg sources read at most this many table snapshots per micro-batch."""
    target_batch: int | None = None
    target_time: str | None = None
    fresh: bool = False
    """Forget the local record of the object first (a new uid: a fresh backfill checkpoint)."""
    py_files: tuple[Path, ...] = ()
    """Directories or .py/.zip/.egg files replacing spec.deps.pyFiles and spec.pipelineFrom."""
    secrets_dir: Path | None = None
    """The Secrets spec.kafkaSecurity names, as directories of files (one per key)."""

    @property
    def state_dir(self) -> Path:
        if self.state is not None:
            return self.state
        return self.local / "objects" if self.local is not None else Path(".kappa")


@dataclass(frozen=True)
class Mapped:
    """One value the --local mapping replaced."""

    field: str
    manifest: str
    local: str


def parse_spark_conf(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--spark-conf {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


# --- --local -------------------------------------------------------------------------------


def local_path(uri: str, root: Path) -> str:
    """Where ``uri`` lives under ``root``: ``<scheme>/<bucket or host>/<path>``; plain and
    ``file://`` paths go under ``file/`` (so nothing outside ``root`` is ever written)."""
    parts = urlsplit(uri)
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        scheme = SAME_STORE.get(parts.scheme, parts.scheme)
        if scheme == "file":
            return str(root / "file" / parts.path.lstrip("/"))
        return str(root / scheme / parts.netloc.replace(":", "-") / parts.path.lstrip("/"))
    return str(root / "file" / str(Path(uri).resolve()).lstrip("/"))


def _slug(text: str) -> str:
    text = re.sub(r"^[a-z0-9+.-]+://", "", text.lower())
    return re.sub(r"[^a-z0-9.]+", "-", text).strip("-.")


def local_catalog(name: str, props: dict[str, str], root: Path) -> dict[str, str]:
    """The SQLite catalog standing in for catalog ``name``: one database per catalog identity
    (its uri and warehouse), so two jobs naming the same catalog share tables, as they do on the
    cluster. Other properties (credentials, endpoints) are dropped."""
    ident = "_".join(_slug(props[k]) for k in ("uri", "warehouse") if props.get(k)) or _slug(name) or "catalog"
    warehouse = local_path(props["warehouse"], root) if props.get("warehouse") else str(root / "warehouse" / ident)
    return {"type": "sql", "uri": f"sqlite:///{root / 'catalogs' / ident}.db", "warehouse": f"file://{warehouse}"}


def localize(job: StreamingJob, root: Path) -> tuple[StreamingJob, tuple[Mapped, ...]]:
    """The job with every catalog and location under ``root``, and what was replaced."""
    root = root.resolve()
    data = job.model_dump(by_alias=True, exclude_none=True)
    spec = data["spec"]
    rows: list[Mapped] = []
    for name, props in job.spec.catalogs.items():
        local = local_catalog(name, props, root)
        spec["catalogs"][name] = local
        shown = props.get("uri") or props.get("warehouse") or "(no uri)"
        rows.append(Mapped(f"catalogs.{name}", f"{props.get('type', '?')} {shown}", f"sql {local['uri']}"))
        if props.get("warehouse"):
            rows.append(Mapped(f"catalogs.{name}.warehouse", props["warehouse"], local["warehouse"]))
    ck = spec["checkpoints"]
    for key in ("location", "externalLocation"):
        if key in ck:
            rows.append(Mapped(f"checkpoints.{key}", ck[key], local_path(ck[key], root)))
            ck[key] = rows[-1].local
    for name, sink in spec["sinks"].items():
        if sink.get("path"):
            rows.append(Mapped(f"sinks.{name}.path", sink["path"], local_path(sink["path"], root)))
            sink["path"] = rows[-1].local
    for name, src in spec["sources"].items():
        if src["live"]["kind"] == "kafka":
            rows.append(Mapped(f"sources.{name}.live", f"kafka {src['live'].get('bootstrapServers')}", "unchanged"))
    return StreamingJob.model_validate(data), tuple(rows)


# --- the rewind target -----------------------------------------------------------------------


def retarget(rw: Rewind, opts: RunOptions) -> tuple[Rewind, str | None]:
    """``spec.target`` replaced by --target-batch / --target-time (validated by the model)."""
    if opts.target_batch is None and opts.target_time is None:
        return rw, None
    new: dict[str, Any] = (
        {"batchId": opts.target_batch} if opts.target_batch is not None else {"time": opts.target_time}
    )
    data = rw.model_dump(by_alias=True, exclude_none=True)
    old = data["spec"]["target"]
    data["spec"]["target"] = new
    flag = "--target-batch" if opts.target_batch is not None else "--target-time"
    return Rewind.model_validate(data), f"spec.target {json.dumps(old)} -> {json.dumps(new)} ({flag})"


# --- the local runtime -----------------------------------------------------------------------


def runtime_config(
    cfg: JobConfig, opts: RunOptions, token: str | None = None, trace_path: str | None = None
) -> tuple[JobConfig, list[str]]:
    """The rendered JobConfig as this machine runs it, and the lines saying how it differs."""
    data = json.loads(cfg.to_json())
    notes = [f"master {opts.master}"]
    data["master"] = opts.master
    conf = {**LOCAL_SPARK_CONF, **cfg.spark_conf, **opts.spark_conf}
    data["sparkConf"] = conf
    notes += [f"sparkConf {k}={v}" for k, v in conf.items() if cfg.spark_conf.get(k) != v]
    root = opts.local.resolve() if opts.local is not None else None
    code, code_notes = local_code(cfg, conf, opts.py_files, None if root is None else lambda u: local_path(u, root))
    data.update(code)
    notes += code_notes
    if cfg.mode == "live":
        trigger = cfg.effective_trigger
        if not opts.follow:
            data["trigger"] = {"kind": "availableNow"}
            every = f"{trigger.kind} {int(trigger.interval.total_seconds())}s"
            notes.append(f"trigger availableNow: reads what is there, then stops (the manifest: {every}; --follow)")
        for name, src in data["sources"].items():
            if src["kind"] != "icebergLive":
                continue
            if opts.starting_position is not None and src.get("startingPosition") != opts.starting_position:
                notes.append(f"sources.{name}: startingPosition {opts.starting_position} (a fresh query only)")
                src["startingPosition"] = opts.starting_position
            if opts.snapshots_per_batch is not None:
                src.setdefault("readLimit", {})["maxSnapshots"] = opts.snapshots_per_batch
                notes.append(f"sources.{name}: at most {opts.snapshots_per_batch} table snapshot(s) per micro-batch")
        external = data["checkpoint"].get("external")
        if external is not None:  # a run of a minute: every committed batch, not one per interval
            external["everyBatch"] = True
            notes.append(f"checkpoint snapshots: the driver copies every committed batch to {external['location']}")
    notes += local_secrets(data, opts.secrets_dir)
    if token is not None and data.get("coordinator"):
        data["coordinator"]["token"] = token  # the operator hands it to the driver through a Secret
    if trace_path is not None:
        data["tracePath"] = trace_path
    return parse_config(data, origin=f"(kappa run {cfg.name})"), notes


SECRET_FILES = ("usernameFile", "passwordFile", "caFile", "certFile", "keyFile")


def local_secrets(data: dict[str, Any], root: Path | None) -> list[str]:
    """Point every Kafka ``security`` block and schema ``registry`` of the JobConfig ``data`` at
    ``root/<secret>/<key>`` instead of the pods' mounts (in place), and say which Secrets were
    read from where. A job that names Secrets needs ``root``, and every file it names: refused
    otherwise, naming both."""
    holders = []
    for part in ("sources", "sinks"):
        for name, entry in (data.get(part) or {}).items():
            security = entry.get("security") or {}
            where = f"{part}.{name}"
            holders += [(f"{where}.security", security.get("sasl")), (f"{where}.security", security.get("tls"))]
            holders.append((f"{where}.registry", entry.get("registry")))
    used: dict[str, Path] = {}
    for where, files in holders:
        for key in SECRET_FILES:
            mounted = (files or {}).get(key)
            if mounted is None or not mounted.startswith(f"{MOUNT_ROOT}/"):
                continue
            secret, _, item = mounted.removeprefix(f"{MOUNT_ROOT}/").partition("/")
            if root is None:
                raise ConfigError(
                    f"{where} names the Secret {secret}: give --secrets-dir DIR with {secret}/{item} "
                    "in it (one file per key, as Kubernetes mounts a Secret)"
                )
            local = (root / secret / item).resolve()
            if not local.is_file():
                raise ConfigError(
                    f"{where} needs key {item} of the Secret {secret}: no file {local} "
                    f"(--secrets-dir {root} holds one directory per Secret, one file per key)"
                )
            files[key] = str(local)
            used[secret] = local.parent
    return [f"Secret {secret}: from {where}" for secret, where in used.items()]
