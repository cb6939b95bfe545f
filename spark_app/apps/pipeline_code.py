"""Make a pipeline's code importable on the driver and the executors when it is not in the
image: the entries of ``JobConfig.pythonPath``.

* A directory (a ConfigMap's mount, or `kappa run --py-files DIR`): on the driver's
  ``sys.path``, and each ``.zip``/``.egg`` at its top too (a ConfigMap holds no directories:
  a package comes in as one zip key). The executors get its modules zipped into one archive
  plus those archives, through ``SparkContext.addPyFile``: a UDF defined in the pipeline's
  module is pickled by reference (module and name) and unpickled in the executors' Python
  workers, which must import that module too.
* A ``.py``/``.zip``/``.egg`` file or URI (`kappa run`'s pyFiles): ``addPyFile``, which
  fetches it (Hadoop filesystems, HTTP) and puts it on the driver's path as well.

A ConfigMap's mount holds its keys as symlinks into a hidden ``..data`` directory: names
starting with a dot are skipped, symlinks followed.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ARCHIVES = (".zip", ".egg")


def local_path(entry: str) -> Path | None:
    """``entry`` as a path on this machine (plain or ``file://``); None for another scheme."""
    parts = urlsplit(entry)
    if parts.scheme == "file":
        return Path(parts.path)
    if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
        return None
    return Path(entry)


def modules(root: Path) -> list[Path]:
    """The ``.py`` files under ``root`` (relative), hidden names and ``__pycache__`` skipped."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if not any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            found.append(rel)
    return found


def archives_in(root: Path) -> list[Path]:
    """The ``.zip``/``.egg`` files at the top of ``root`` (a ConfigMap's keys)."""
    return sorted(p for p in root.iterdir() if p.suffix.lower() in ARCHIVES and not p.name.startswith("."))


def zipped_modules(root: Path, into: Path) -> Path | None:
    """``root``'s modules in one zip named after their content (the same code ships under the
    same name: Spark refuses two different files of one name); None when it has none."""
    files = modules(root)
    if not files:
        return None
    digest = hashlib.sha256()
    for rel in files:
        digest.update(str(rel).encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    target = into / f"{root.resolve().name or 'pipeline'}-{digest.hexdigest()[:12]}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel in files:
            zf.write(root / rel, rel.as_posix())
    return target


def driver_path(entries: Sequence[str]) -> list[str]:
    """What goes on the driver's ``sys.path`` for ``entries``, first first (pure but for
    listing directories): directories, their archives, local archives, a .py file's directory."""
    out: list[str] = []
    for entry in entries:
        path = local_path(entry)
        if path is None:
            continue  # a URI: only Spark can fetch it (ship)
        if path.is_dir():
            out += [str(path), *(str(a) for a in archives_in(path))]
        elif path.suffix.lower() in ARCHIVES:
            out.append(str(path))
        else:
            out.append(str(path.parent))
    return out


def put_on_sys_path(entries: Sequence[str]) -> None:
    """The driver's half, without Spark (a driver-only plan imports the pipeline too)."""
    for item in reversed(driver_path(entries)):
        if item not in sys.path:
            sys.path.insert(0, item)


def shipped(entries: Sequence[str], scratch: Path) -> list[str]:
    """What the executors get through ``addPyFile`` for ``entries``: files and URIs as they
    are, a directory as its modules zipped (into ``scratch``) and its archives."""
    out: list[str] = []
    for entry in entries:
        path = local_path(entry)
        if path is not None and path.is_dir():
            zipped = zipped_modules(path, scratch)
            out += [str(p) for p in ([zipped] if zipped else []) + archives_in(path)]
        else:
            out.append(str(path) if path is not None else entry)
    return out


def make_importable(entries: Iterable[str] | None, spark: Any = None) -> None:
    """Put ``entries`` (``JobConfig.pythonPath``) on the driver's path, and, given a
    SparkSession, ship them to the executors."""
    entries = list(entries or [])
    if not entries:
        return
    missing = [e for e in entries if (p := local_path(e)) is not None and not p.exists()]
    if missing:
        from spark_app.contract.errors import ConfigError

        raise ConfigError(
            f"pythonPath: {', '.join(missing)} not found on the driver: a ConfigMap's mount is missing "
            "(spec.pipelineFrom names one that does not exist?), or a local path was given that is not there"
        )
    put_on_sys_path(entries)
    if spark is None:
        return
    scratch = Path(tempfile.mkdtemp(prefix="kappa-pythonpath-"))
    for item in shipped(entries, scratch):
        spark.sparkContext.addPyFile(item)
