"""Prometheus's text format of a registry, byte for byte what ``prometheus_client.generate_latest``
writes, at about half its cost; and the HTTP endpoint that serves it.

Why: at 1,000 StreamingJobs and 1,000 Backfills (issue 61) the operator's ``/metrics`` has
~6,000 series, and generate_latest spent most of a scrape checking each label name of each
sample against the legacy character set and escaping it, under the GIL the operator's handlers
need. Every metric and label name here is ours and legacy-valid (prometheus_client checks them
where the metric is declared), so only label values and help texts are escaped, as the library
escapes them. The families are still collected by the library; ``test_exposition`` holds the
output equal to generate_latest's on the operator's and the coordinator's registries."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
"""OpenMetrics types as the Prometheus text format names them."""
SUFFIXES = {"counter": "_total", "info": "_info"}
OPENMETRICS_ONLY = ("_created", "_gsum", "_gcount")
"""Samples the text format puts in gauges of their own, after their family."""


def _escaped(text: str) -> str:
    if "\\" in text or "\n" in text or '"' in text:
        return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return text


def _line(sample: Sample) -> str:
    head = sample.name
    if sample.labels:
        head += "{" + ",".join([f'{k}="{_escaped(v)}"' for k, v in sorted(sample.labels.items())]) + "}"
    stamp = "" if sample.timestamp is None else f" {int(float(sample.timestamp) * 1000):d}"
    return f"{head} {floatToGoString(sample.value)}{stamp}\n"


def latest(registry: Collector) -> bytes:
    """``generate_latest(registry)``'s bytes."""
    out: list[str] = []
    for metric in registry.collect():
        name = metric.name + SUFFIXES.get(metric.type, "")
        help_text = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {TYPES.get(metric.type, metric.type)}\n")
        apart = {metric.name + suffix: suffix for suffix in OPENMETRICS_ONLY}
        later: dict[str, list[str]] = {}
        for sample in metric.samples:
            suffix = apart.get(sample.name)
            if suffix is None:
                out.append(_line(sample))
            else:
                later.setdefault(suffix, []).append(_line(sample))
        for suffix, lines in sorted(later.items()):
            out.append(f"# HELP {metric.name}{suffix} {help_text}\n# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")


def serve(registry: Collector, port: int, host: str) -> ThreadingHTTPServer:
    """``latest(registry)`` on every GET (any path, as prometheus_client's own server answers),
    from a daemon thread; returns the server (``shutdown()`` stops it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """A scrape every few seconds is not news: nothing logged."""

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
