"""Storage locations on ``pyarrow.fs``: local paths, ``file://``, ``s3://`` (and Spark's
``s3a://``) and ``hdfs://`` behave the same to the rest of the package.

Every other module does its I/O through a :class:`Location`, so the two rules consistency rests
on live here once:

* ``write_bytes`` is atomic. An object store PUT already is (the object appears whole or not
  at all); on a file system the bytes go to a hidden temp name (``.<name>.<uuid>.tmp``, Spark's
  own convention) and are renamed into place.
* ``copy_to`` counts the bytes it moved and fails, removing what it wrote, when that differs
  from the size the caller listed. pyarrow completes an S3 upload even when the writer raised
  half-way (``close()`` runs on ``__exit__`` and has no abort), so a size check, not the absence
  of an exception, is what proves a copy whole.

Listings return files only (never directory markers), keyed by '/'-separated paths relative to
the location's root.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from pyarrow import fs as pafs
from pydantic import BaseModel, ConfigDict

from spark_app.contract.errors import CheckpointError

REPORT_DIR = "_kappa"
"""The folder beside a checkpoint where the driver writes what the operator reads (run, plan,
publish, restore, progress and bootstrap reports, the pending commits, external calls): its name
is defined here and only here."""
BUFFERED_COPY_BYTES = 32 * 1024 * 1024
"""Files up to this size are read whole, then written in one call (one PUT on S3)."""
CHUNK_BYTES = 8 * 1024 * 1024
OBJECT_STORES = ("s3", "gcs", "abfs")


class FileChangedError(CheckpointError):
    """A file's size changed (or it vanished) between listing and copy."""


class S3Options(BaseModel):
    """How to reach an S3 API. Unset fields fall back to the standard AWS environment
    (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ENDPOINT_URL_S3``,
    ``AWS_ENDPOINT_URL``), so a pod configured for Spark's S3A needs nothing here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    endpoint: str | None = None
    """``http://host:port`` or ``host:port`` (MinIO, moto, ...); None: AWS itself."""
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    scheme: Literal["http", "https"] | None = None
    """Default: from ``endpoint`` when it has one, else https."""
    connect_timeout: float | None = None
    """Seconds; None: the AWS SDK's default. A reader that must not wait long on one store (the
    operator's, reading many jobs' reports) sets these, so an unreachable bucket costs seconds."""
    request_timeout: float | None = None
    max_attempts: int | None = None
    """Attempts per request (the SDK's standard retry strategy); None: its default (3)."""

    def filesystem(self) -> pafs.S3FileSystem:
        endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        scheme = self.scheme
        if endpoint and "://" in endpoint:
            given, endpoint = endpoint.split("://", 1)
            scheme = scheme or ("http" if given == "http" else "https")
        kwargs: dict[str, object] = {}
        if self.access_key is not None or self.secret_key is not None:
            kwargs.update(access_key=self.access_key, secret_key=self.secret_key, session_token=self.session_token)
        region = self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            kwargs["region"] = region
        if endpoint:
            kwargs["endpoint_override"] = endpoint.rstrip("/")
        if scheme:
            kwargs["scheme"] = scheme
        if self.connect_timeout is not None:
            kwargs["connect_timeout"] = self.connect_timeout
        if self.request_timeout is not None:
            kwargs["request_timeout"] = self.request_timeout
        if self.max_attempts is not None:
            kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=self.max_attempts)
        # Delayed open lets a small object go up as one PutObject; otherwise pyarrow starts a
        # multipart upload for every file (3 requests, measured against moto).
        return pafs.S3FileSystem(allow_delayed_open=True, **kwargs)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FileStat:
    size: int
    mtime_ns: int | None
    """Modification time as the store reports it (ns locally, whole seconds on S3)."""


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


class Requests:
    """The store requests this process made through ``Location``, by operation (list, stat,
    read, write, delete): what a job costs its object store, counted where the calls are made
    (the operator shows them as ``kappa_operator_store_requests_total``). A pyarrow call is one
    request, or a few on S3 (a read may ask for the size first)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, op: str) -> None:
        with self._lock:
            self._counts[op] = self._counts.get(op, 0) + 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


REQUESTS = Requests()


class Location:
    """A directory (or key prefix) on some file system; all paths given to it are relative."""

    def __init__(self, filesystem: pafs.FileSystem, root: str, uri: str) -> None:
        self.fs = filesystem
        self.root = root.rstrip("/")
        self.uri = uri.rstrip("/")
        self._made_dirs: set[str] = set()

    def __repr__(self) -> str:
        return f"Location({self.uri!r})"

    @property
    def object_store(self) -> bool:
        return self.fs.type_name in OBJECT_STORES

    def path(self, rel: str = "") -> str:
        rel = rel.strip("/")
        return f"{self.root}/{rel}" if rel else self.root

    def child(self, rel: str) -> Location:
        rel = rel.strip("/")
        return Location(self.fs, self.path(rel), f"{self.uri}/{rel}")

    def list_files(self, under: str = "", hidden: bool = False) -> dict[str, FileStat]:
        """Every file below ``under`` (recursively), relative to the root; hidden names
        (``.crc`` side files, temp files) only when asked."""
        base = self.path(under)
        REQUESTS.add("list")
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        prefix = len(self.root) + 1
        out = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[prefix:]
            if hidden or not _hidden(rel):
                out[rel] = FileStat(info.size, info.mtime_ns)
        return out

    def stat(self, rel: str) -> FileStat | None:
        REQUESTS.add("stat")
        info = self.fs.get_file_info(self.path(rel))
        return FileStat(info.size, info.mtime_ns) if info.type == pafs.FileType.File else None

    def read_bytes(self, rel: str) -> bytes:
        REQUESTS.add("read")
        with self.fs.open_input_stream(self.path(rel)) as f:
            return bytes(f.readall())

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Atomically create or replace ``rel``."""
        REQUESTS.add("write")
        final = self.path(rel)
        if self.object_store:
            with self.fs.open_output_stream(final) as out:
                out.write(data)
            return
        tmp = self._temp_for(final)
        try:
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, final)
        except BaseException:
            self._remove_quietly(tmp)
            raise

    def copy_to(self, rel: str, dest: Location, dest_rel: str, size: int) -> int:
        """Copy one file; returns the bytes copied. Raises FileChangedError (and leaves no
        file at ``dest_rel``) if the source does not have exactly ``size`` bytes."""
        if size <= BUFFERED_COPY_BYTES:
            try:
                data = self.read_bytes(rel)
            except FileNotFoundError:
                raise FileChangedError(f"{self.uri}/{rel} vanished before it was copied") from None
            if len(data) != size:
                raise FileChangedError(f"{self.uri}/{rel} has {len(data)} bytes, listed with {size}")
            dest.write_bytes(dest_rel, data)
            return size
        final = dest.path(dest_rel)
        target = final if dest.object_store else dest._temp_for(final)
        written = 0
        try:
            try:
                src = self.fs.open_input_stream(self.path(rel))
            except FileNotFoundError:
                raise FileChangedError(f"{self.uri}/{rel} vanished before it was copied") from None
            with src, dest.fs.open_output_stream(target) as out:
                while chunk := src.read(CHUNK_BYTES):
                    out.write(chunk)
                    written += len(chunk)
            if written != size:
                raise FileChangedError(f"{self.uri}/{rel} has {written} bytes, listed with {size}")
            if target != final:
                dest.fs.move(target, final)
        except BaseException:
            dest._remove_quietly(target)
            raise
        return written

    def delete(self, rel: str) -> bool:
        """Remove one file; False if it was not there."""
        REQUESTS.add("delete")
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            return False
        return True

    def _temp_for(self, final: str) -> str:
        parent, _, name = final.rpartition("/")
        if parent not in self._made_dirs:
            self.fs.create_dir(parent, recursive=True)
            self._made_dirs.add(parent)
        return f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"

    def _remove_quietly(self, path: str) -> None:
        with contextlib.suppress(OSError):
            self.fs.delete_file(path)


@dataclass(frozen=True)
class CopyResult:
    files: int
    bytes: int
    changed: dict[str, str]
    """Sources that vanished or changed size mid-copy (relative path -> why); nothing was
    left at their destinations."""


def copy_many(src: Location, dest: Location, pairs: list[tuple[str, str, int]], parallelism: int = 8) -> CopyResult:
    """Copy (source path, destination path, size) triples, ``parallelism`` at a time (object
    stores are latency-bound; pyarrow releases the GIL). Any other error propagates after the
    copies in flight finish; the ones not yet started are cancelled."""
    changed: dict[str, str] = {}

    def one(pair: tuple[str, str, int]) -> int:
        rel, dest_rel, size = pair
        try:
            return src.copy_to(rel, dest, dest_rel, size)
        except FileChangedError as exc:
            changed[rel] = str(exc)
            return 0

    if parallelism <= 1 or len(pairs) <= 1:
        sizes = [one(p) for p in pairs]
    else:
        pool = ThreadPoolExecutor(parallelism, thread_name_prefix="kappa-copy")
        try:
            sizes = list(pool.map(one, pairs))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # the copies not yet started never start
            raise
        pool.shutdown(wait=True)
    return CopyResult(len(pairs) - len(changed), sum(sizes), changed)


def open_location(uri: str, s3: S3Options | None = None) -> Location:
    """A Location for a local path, ``file://``, ``s3://``/``s3a://`` or any URI pyarrow knows."""
    if uri.startswith(("s3://", "s3a://")):
        bucket_and_key = uri.split("://", 1)[1].strip("/")
        if not bucket_and_key:
            raise CheckpointError(f"{uri!r}: an S3 location needs a bucket, e.g. s3://bucket/checkpoints")
        return Location((s3 or S3Options()).filesystem(), bucket_and_key, "s3://" + bucket_and_key)
    if "://" in uri:
        filesystem, path = pafs.FileSystem.from_uri(uri)
        return Location(filesystem, path, uri)
    path = os.path.abspath(uri)
    return Location(pafs.LocalFileSystem(), path, path)
