"""moto's S3 server, as `python -m moto.server` runs it, with the one fault of a real S3 that
moto cannot give: answering ``503 SlowDown`` (S3's throttling answer, which clients retry with
backoff) to every request while a flag file exists. Stopping the server gives timeouts, not
answers; this is the other half of "S3 is unavailable". Each refused request is logged, one
line ``METHOD path`` to ``<flag>.refused``, so a test can say what was refused.

    python -m kappa_operator.local_cluster.s3_server --host H --port P --fault-flag FILE
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>kappa-fault</RequestId></Error>"
)
"""S3's own body for a throttled request (its documented error code and message)."""


class SlowDownWhileFlagged:
    """WSGI middleware: while ``flag`` exists, a 503 SlowDown for each request (its body read
    first, so the connection stays usable for the client's retry); otherwise moto answers."""

    def __init__(self, app: Callable[..., Iterable[bytes]], flag: Path) -> None:
        self.app, self.flag = app, flag

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not self.flag.exists():
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length:
            environ["wsgi.input"].read(length)
        with self.flag.with_suffix(".refused").open("a", encoding="utf-8") as log:
            log.write(f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}\n")
        start_response(
            "503 Slow Down",
            [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOW_DOWN))), ("Connection", "close")],
        )
        return [SLOW_DOWN]


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import run_simple

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fault-flag", type=Path, required=True, help="503 SlowDown to every request while it exists")
    args = p.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # as moto.server: the URLs it hands out
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SlowDownWhileFlagged(app, args.fault_flag),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
