"""What a job's pods reach outside the cluster, as on a user's cloud: an S3 API (moto's server)
for checkpoints, Iceberg data and the operator's reports, and the Iceberg catalog's database
(PostgreSQL from Debian, behind pyiceberg's SQL catalog). Both listen on the node's bridge
address, the only outside address a pod has a route to, and on nothing else.

Why PostgreSQL behind the SQL catalog: it is the catalog implementation the embedded default
already is (SQLite), so a job on the node and the same job run by `kappa run` differ only in the
database URL; and it takes concurrent commits from many pods over the network, which a SQLite
file cannot."""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kappa_operator.local_cluster.addresses import PODS
from kappa_operator.local_cluster.control_plane import stopped

ACCESS_KEY, SECRET_KEY, REGION = "kappa", "kappa-secret", "us-east-1"
BUCKET = "lake"
DB_USER, DB_PASSWORD, DB_NAME = "kappa", "kappa", "iceberg"


class StorageError(RuntimeError):
    pass


def listening(host: str, port: int, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise StorageError(f"{what} did not listen on {host}:{port} within {timeout:.0f} s; its log ({log}):\n{tail}")


def end(proc: subprocess.Popen[bytes], sig: signal.Signals, timeout: float = 30.0) -> None:
    """``sig``, then SIGKILL if it has not exited within ``timeout``."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def port_unused(host: str, port: int, what: str) -> None:
    """Nothing answers there yet: a leftover server would silently take this one's place."""
    with socket.socket() as s:
        s.settimeout(1.0)
        if s.connect_ex((host, port)) == 0:
            raise StorageError(
                f"{host}:{port}, where {what} listens, is taken: another cluster (`kappa cluster down`) "
                f"or a leftover process (`ss -ltnp 'sport = :{port}'` names it)"
            )


@dataclass
class ObjectStore:
    """moto's S3 server in a child process, with the bucket the examples use."""

    host: str
    port: int
    proc: subprocess.Popen[bytes]
    fault_flag: Path
    """While this file exists the server answers 503 SlowDown (``slowing_down``)."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def start(cls, workdir: Path, host: str, port: int) -> ObjectStore:
        workdir.mkdir(parents=True, exist_ok=True)
        port_unused(host, port, "the S3 API")
        log = workdir / "s3.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kappa_operator.local_cluster.s3_server",
                    "--host",
                    host,
                    "--port",
                    str(port),
                    "--fault-flag",
                    str(workdir / "s3-slow-down"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        store = cls(host, port, proc, workdir / "s3-slow-down")
        store.fault_flag.unlink(missing_ok=True)
        try:
            listening(host, port, 30, "the S3 API (moto)", log)
            store.client().create_bucket(Bucket=BUCKET)
        except BaseException:
            store.stop()
            raise
        return store

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def environment(self) -> dict[str, str]:
        """The standard AWS variables a pod (Spark's S3A, pyarrow, pyiceberg) reads."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
        }

    def stop(self) -> None:
        end(self.proc, signal.SIGTERM)

    def unavailable(self) -> contextlib.AbstractContextManager[None]:
        """The S3 API stopped for the block (its objects kept: moto's are in its memory)."""
        return stopped(self.proc)

    @contextlib.contextmanager
    def slowing_down(self) -> Iterator[list[str]]:
        """Every request answered ``503 SlowDown`` for the block, as S3 throttles: the list
        given is filled, at the block's end, with the refused requests (``METHOD path``)."""
        refused = self.fault_flag.with_suffix(".refused")
        refused.unlink(missing_ok=True)
        seen: list[str] = []
        self.fault_flag.touch()
        try:
            yield seen
        finally:
            self.fault_flag.unlink(missing_ok=True)
            seen.extend(refused.read_text().splitlines() if refused.exists() else [])


def _postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        raise StorageError("PostgreSQL is missing: apt-get install postgresql (cluster/build.sh does it as root)")
    return found[-1].parent


def database_home(workdir: Path) -> Path:
    """The catalog database's own directory, outside ``workdir``: the postgres user may not
    traverse a root-only parent (pytest's and ~root's are 0700). Named after ``workdir``, so a
    restart finds it, and so does `kappa cluster down` after a crash. A start finds the database's
    log in ``workdir``; without it, the directory is that of a ``workdir`` since deleted (a user
    starting anew), whose tables' files went with it, and the start begins anew too."""
    return Path(tempfile.gettempdir()) / f"kappa-postgres-{hashlib.sha256(str(workdir).encode()).hexdigest()[:12]}"


@dataclass
class CatalogDatabase:
    """A PostgreSQL server of its own (its data directory under the cluster's work directory),
    run as Debian's ``postgres`` user, with one database and role for the Iceberg catalog."""

    host: str
    port: int
    data: Path
    proc: subprocess.Popen[bytes]

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://{DB_USER}:{DB_PASSWORD}@{self.host}:{self.port}/{DB_NAME}"

    @classmethod
    def start(cls, workdir: Path, host: str, port: int) -> CatalogDatabase:
        bin_dir = _postgres_bin()
        port_unused(host, port, "the catalog's PostgreSQL")
        owner = pwd.getpwnam("postgres")
        home = database_home(workdir)
        log = workdir / "postgres.log"
        if not log.exists():  # a database of a ``workdir`` since deleted, its tables' files with it
            shutil.rmtree(home, ignore_errors=True)
        data, sockets = home / "data", home / "sockets"
        home.mkdir(mode=0o700, exist_ok=True)
        os.chown(home, owner.pw_uid, owner.pw_gid)
        fresh = not (data / "PG_VERSION").exists()
        for d in (data, sockets):
            d.mkdir(parents=True, exist_ok=True)
            os.chown(d, owner.pw_uid, owner.pw_gid)
        if fresh:
            done = subprocess.run(
                [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                capture_output=True,
                text=True,
                user="postgres",
                cwd=data,
            )
            if done.returncode != 0:
                raise StorageError(f"initdb failed: {done.stderr[-2000:]}")
            with (data / "pg_hba.conf").open("a") as hba:  # every node's pods (and the machine), by password
                hba.write(f"host all all {PODS} scram-sha-256\n")
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-h", host, "-p", str(port),
                 "-k", str(sockets), "-c", "max_connections=200"],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user="postgres",
                cwd=data,
            )  # fmt: skip
        db = cls(host, port, data, proc)
        try:
            listening(host, port, 60, "PostgreSQL", log)
            if fresh:
                db._psql(sockets, f"CREATE ROLE {DB_USER} LOGIN PASSWORD '{DB_PASSWORD}'")
                db._psql(sockets, f"CREATE DATABASE {DB_NAME} OWNER {DB_USER}")
        except BaseException:
            db.stop()
            raise
        return db

    def _psql(self, sockets: Path, sql: str, timeout: float = 60.0) -> None:
        """``sql`` as the superuser. PostgreSQL listens before it accepts sessions (it refuses
        them "starting up" while it recovers or checks its files, seconds on a loaded machine):
        asked again until it does, within ``timeout``."""
        psql = shutil.which("psql") or str(_postgres_bin() / "psql")
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                [psql, "-h", str(sockets), "-p", str(self.port), "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-c", sql],
                capture_output=True,
                text=True,
                user="postgres",
                cwd=sockets,
            )
            if done.returncode == 0:
                return
            if "starting up" not in done.stderr or time.monotonic() > deadline:
                raise StorageError(f"psql {sql!r} failed: {done.stderr[-2000:]}")
            time.sleep(0.2)

    def remove(self) -> None:
        """Stopped, then its files gone: every cluster's stop (its tables' files were in the S3
        API's memory, gone with it)."""
        self.stop()
        shutil.rmtree(self.data.parent, ignore_errors=True)

    def stop(self) -> None:
        end(self.proc, signal.SIGINT)  # PostgreSQL's fast shutdown: clients' sessions are ended, not awaited
