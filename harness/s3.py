"""A real S3 API on loopback (moto's server) for tests and benches.

Tests run it in this process (``threaded``: starts in well under a second); the bench runs it
in a child process (``subprocess``) so the server does not share this interpreter's GIL with
the copies it measures.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

from pyarrow import fs as pafs

from kappa_operator.local.ports import free_port
from spark_app.contract.storage import S3Options

ACCESS_KEY = SECRET_KEY = "testing"
REGION = "us-east-1"


def _wait_listening(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"moto server did not listen on 127.0.0.1:{port} within {timeout} s")


class MotoS3:
    def __init__(self, port: int, handle: Any) -> None:
        self.port = port
        self._handle = handle

    @classmethod
    def threaded(cls) -> MotoS3:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        _wait_listening(port)
        return cls(port, server)

    @classmethod
    def subprocess(cls) -> MotoS3:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_listening(port)
        except TimeoutError:
            proc.kill()
            raise
        return cls(port, proc)

    def stop(self) -> None:
        if isinstance(self._handle, subprocess.Popen):
            self._handle.terminate()
            self._handle.wait(timeout=30)
        else:
            self._handle.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def options(self) -> S3Options:
        return S3Options(endpoint=self.endpoint, access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION)

    def create_bucket(self, name: str | None = None) -> str:
        """A new bucket (through pyarrow, as a user would); returns its name."""
        name = name or f"b-{uuid.uuid4().hex[:12]}"
        s3 = pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            allow_bucket_creation=True,
        )
        s3.create_dir(name)
        return name
