"""`kappa run`'s spark-submit: a JobConfig's ``deps`` and ``pythonPath`` as a local run
applies them, so a pipeline shipped by pyFiles, a ConfigMap or packages runs here as it will
on the cluster.

On a cluster spark-submit (in the Spark operator's pod) turns the SparkApplication's
``spec.deps`` into Spark configuration before the JVM starts, and the driver mounts a
``spec.pipelineFrom`` ConfigMap. Here the same happens by hand, each step a line the run
prints:

* ``packages``, ``repositories``, ``excludePackages``, ``jars``, ``files``, ``archives``
  become ``spark.jars.packages``, ``spark.jars.repositories``, ``spark.jars.excludes``,
  ``spark.jars``, ``spark.files``, ``spark.archives`` (what spark-submit's flags set), merged
  with the same keys of sparkConf and --spark-conf;
* ``pyFiles`` become ``pythonPath`` entries, which the driver fetches, puts on its path and
  ships to the executors (``spark_app.apps.pipeline_code``);
* ``--py-files PATH`` (files or directories) replaces both pyFiles and the ConfigMap: test a
  working copy before zipping it, or give the directory a ConfigMap is created from.

Where a location lives on this machine: a path or ``file://`` URI as it is (relative to the
current directory, as spark-submit reads it); ``local:///p`` (the image's) at ``/p``; with
``--local DIR`` an object-store URI where --local maps every location (``DIR/s3/bucket/key``,
``overrides.local_path``): copying the zip there is the local "upload". Without --local,
object-store and HTTP URIs go to Spark as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spark_app.contract.config import JobConfig

SUBMIT_CONF = (
    ("packages", "spark.jars.packages"),
    ("repositories", "spark.jars.repositories"),
    ("excludePackages", "spark.jars.excludes"),
    ("jars", "spark.jars"),
    ("files", "spark.files"),
    ("archives", "spark.archives"),
)
"""spark-submit's flags as the configuration keys they set (``SparkSubmitArguments``)."""
FILE_FIELDS = ("jars", "files", "archives", "pyFiles")
OBJECT_STORES = {"s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "hdfs", "oss", "cos"}
PY_SUFFIXES = (".py", ".zip", ".egg")
MOUNT_HINT = "--py-files DIR (the directory or files you create the ConfigMap from)"

Mapper = Callable[[str], str]


def where(entry: str, field: str, mapped: Mapper | None) -> str:
    """Where ``entry`` of ``spec.deps.<field>`` is read on this machine (a path or a URI for
    Spark); a ValueError naming the field and the fix when it is not there."""
    parts = urlsplit(entry)
    scheme = parts.scheme if len(parts.scheme) > 1 else ""  # not a Windows drive letter
    if scheme in OBJECT_STORES:
        if mapped is None:
            return entry  # Spark fetches it (s3a:// with hadoop-aws on the classpath)
        path, how = Path(mapped(entry)), "--local maps it to {path}, which does not exist"
    elif scheme in ("", "file", "local"):
        path, how = Path(parts.path if scheme else entry.split("#", 1)[0]).resolve(), "{path} does not exist here"
    else:
        return entry  # https, ftp, ...: Spark fetches it
    if path.exists():
        return str(path) + (f"#{parts.fragment}" if parts.fragment else "")  # archives: `#dir` names the directory
    fix = f"copy the file to {path}" if scheme in OBJECT_STORES else "give the path of your copy"
    if field == "pyFiles":
        fix += ", or replace the pyFiles with --py-files PATH"
    image = " (local:// names a path inside the Spark image)" if scheme == "local" else ""
    raise ValueError(f"spec.deps.{field}: {entry}{image}: {how.format(path=path)}: {fix}")


def py_file_paths(values: Sequence[str]) -> list[Path]:
    """``--py-files`` (repeatable, comma-separated as spark-submit's), each a directory or a
    .py/.zip/.egg file that exists."""
    out = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            path = Path(item).resolve()
            if not path.exists():
                raise ValueError(f"--py-files {item}: no such file or directory")
            if not path.is_dir() and path.suffix.lower() not in PY_SUFFIXES:
                raise ValueError(f"--py-files {item}: expected a directory or a .py, .zip or .egg file")
            out.append(path)
    return out


def local_code(
    cfg: JobConfig, spark_conf: dict[str, str], py_files: Sequence[Path], mapped: Mapper | None
) -> tuple[dict[str, Any], list[str]]:
    """The JobConfig fields a local run sets for ``cfg``'s code (``sparkConf``, ``pythonPath``),
    given the sparkConf so far (its values of the same keys are kept, ours appended), and the
    lines saying so. Raises ValueError for what cannot be found here."""
    deps = cfg.deps.model_dump(by_alias=True) if cfg.deps is not None else {}
    notes: list[str] = []
    resolved = {f: [where(e, f, mapped) for e in deps.get(f, [])] for f in FILE_FIELDS if f != "pyFiles"}
    conf = dict(spark_conf)
    for field, key in SUBMIT_CONF:
        values = resolved.get(field, deps.get(field, []))
        if values:
            conf[key] = ",".join(filter(None, [conf.get(key, ""), *values]))
            notes.append(f"deps.{field} -> sparkConf {key}={conf[key]}")
    fetched = set(deps.get("pyFiles", []))  # the cluster's driver fetches these (render.jobconfig)
    mounts = [m for m in cfg.python_path or [] if m not in fetched]
    if py_files:
        path = [str(p) for p in py_files]
        replaced = [f"spec.deps.pyFiles {deps['pyFiles']}"] if deps.get("pyFiles") else []
        replaced += [f"the ConfigMap mounted at {m}" for m in mounts]
        instead = f" (instead of {' and '.join(replaced)})" if replaced else ""
        notes.append(f"pythonPath {', '.join(path)}: --py-files{instead}")
    else:
        if mounts:
            name = mounts[0].rstrip("/").rsplit("/", 1)[-1]
            raise ValueError(
                f"spec.pipelineFrom.configMap {name} is a ConfigMap on the cluster; kappa run needs its files: "
                f"{MOUNT_HINT}"
            )
        path = [where(e, "pyFiles", mapped) for e in deps.get("pyFiles", [])]
        if path:
            notes.append(f"deps.pyFiles -> pythonPath {', '.join(path)} (on the driver's path, shipped to executors)")
    out: dict[str, Any] = {}
    if conf != spark_conf:
        out["sparkConf"] = conf
    if path:
        out["pythonPath"] = path
    return out, notes
