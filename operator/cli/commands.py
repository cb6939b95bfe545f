"""The `kappa` command for people: the local demo, the operator, the coordinator, the CRDs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from spark_app.contract.errors import KappaError

if TYPE_CHECKING:
    from kappa_operator.service.runner import LeaderElection


def bind_address(value: str) -> str:
    """A ``host:port`` flag, checked and kept as given: an IPv6 host in brackets
    (``[::]:8080``); a bare ``port`` or ``:port`` means 127.0.0.1."""
    host, _, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if not (port.isdigit() and 0 < int(port) < 65536) or (":" in host and not bracketed):
        raise argparse.ArgumentTypeError(f"expected host:port (e.g. 127.0.0.1:8080, [::]:8080), got {value!r}")
    return value


def positive_count(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {value!r}")
    return n


def progress_interval(value: str) -> float:
    """A positive duration in the CRDs' grammar (``30s``, ``1m``), as seconds."""
    from spark_app.contract.durations import check_positive, duration_ms

    try:
        return duration_ms(check_positive(value)) / 1000
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests check the Helm chart's args against it)."""
    parser = argparse.ArgumentParser(prog="kappa", description="kappa-operator: backfill and rewind streaming jobs")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="the whole story on a local Iceberg catalog: rmi live, an outage, an aligned backfill validated and "
        "published, a rewind of sessions, windows and sessions backfilled and compared with batch; a summary table, "
        "plots and summary.json",
    )
    demo.add_argument("--hours", type=float, default=2.0, help="event hours to generate (default 2, at least 0.75)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the generated data (default 7)")
    demo.add_argument(
        "--out",
        type=Path,
        default=Path("demo-out"),
        help="working directory (default demo-out): created, or recreated if an earlier demo made it; "
        "any other non-empty directory is refused",
    )
    demo.add_argument("--max-drift", default="5m", help="alignment maxDrift of the backfill (default 5m)")
    coord = sub.add_parser("coordinator", help="run the global watermark coordinator service")
    coord.add_argument("--host", default="127.0.0.1")
    coord.add_argument("--port", type=int, default=8471)
    coord.add_argument(
        "--token-file", type=Path, help="file holding the bearer token (default: $KAPPA_COORDINATOR_TOKEN)"
    )
    coord.add_argument("--groups-file", type=Path, help="where group definitions survive a restart (JSON)")
    op = sub.add_parser(
        "operator", help="run the operator (kopf) with the coordinator embedded, on the current kubeconfig"
    )
    op.add_argument("--namespace", action="append", default=[], help="watch this namespace (repeat; default: all)")
    op.add_argument("--server", help="API server URL without auth (emulators); default: in-cluster or kubeconfig")
    op.add_argument(
        "--coordinator-bind",
        type=bind_address,
        default="127.0.0.1:8471",
        metavar="HOST:PORT",
        help="where the embedded coordinator listens",
    )
    op.add_argument("--coordinator-url", help="URL Spark drivers use to reach it (default: http://<bind>)")
    op.add_argument(
        "--token-file", type=Path, help="coordinator token (default: $KAPPA_COORDINATOR_TOKEN, else random)"
    )
    op.add_argument(
        "--metrics-bind",
        type=bind_address,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (a bare port: 127.0.0.1; default: not served)",
    )
    op.add_argument(
        "--health-bind",
        type=bind_address,
        metavar="HOST:PORT",
        help="serve kopf's liveness /healthz here (a bare port: 127.0.0.1; default: not served)",
    )
    op.add_argument(
        "--max-concurrent-backfills",
        type=int,
        metavar="N",
        help="Backfills running at once in the watched namespaces; the rest wait in phase Queued (default: no limit)",
    )
    op.add_argument(
        "--max-concurrent-backfills-per-namespace",
        type=int,
        metavar="N",
        help="Backfills running at once in one namespace (default: no limit)",
    )
    op.add_argument(
        "--progress-interval",
        type=progress_interval,
        default=30.0,
        metavar="DURATION",
        help="how often live jobs' progress reports are read into status: Stalled, lag, a bootstrap's "
        "switch (default 30s)",
    )
    op.add_argument(
        "--objects-in-flight",
        type=positive_count,
        metavar="N",
        help="objects of one kind whose events are handled at once (per watched namespace); the rest "
        "wait their turn. Bounds the operator's memory in a burst (default: 512)",
    )
    op.add_argument(
        "--leader-election",
        action="store_true",
        help="run as one of several replicas: lead only while holding a coordination.k8s.io Lease "
        "(in $POD_NAMESPACE, as $POD_NAME), follow otherwise",
    )
    op.add_argument(
        "--leader-election-lease",
        default="kappa-operator",
        metavar="NAME",
        help="the Lease's name (default: %(default)s)",
    )
    op.add_argument(
        "--leader-election-namespace",
        metavar="NAMESPACE",
        help="the Lease's namespace (default: $POD_NAMESPACE, which the chart sets)",
    )
    op.add_argument("--verbose", action="store_true", help="debug logging")
    ck = sub.add_parser("checkpoints", help="externalized checkpoints")
    ck_sub = ck.add_subparsers(dest="action", required=True)
    ck_list = ck_sub.add_parser("list", help="a live checkpoint's batches, or an external location's snapshots")
    ck_list.add_argument("location", help="path or URI (s3://, s3a://, file://, hdfs://)")
    rw = sub.add_parser("rewind", help="print what a Rewind manifest would do (a dry run; changes nothing)")
    rw.add_argument("manifest", type=Path, help="the Rewind (YAML)")
    rw.add_argument("--job", type=Path, required=True, help="its StreamingJob (YAML)")
    rw.add_argument("--jobs", type=Path, nargs="*", default=[], help="other StreamingJobs, for downstream")
    rw.add_argument(
        "--local", type=Path, metavar="DIR", help="catalogs and checkpoints mapped under DIR (as kappa run --local)"
    )
    run = sub.add_parser(
        "run", help="run a StreamingJob, Backfill or Rewind manifest here, with the operator's own decisions"
    )
    run.add_argument("manifest", type=Path, help="the manifest (YAML; may also hold its StreamingJob)")
    run.add_argument("--job", type=Path, help="its StreamingJob (default: same file, or next to it)")
    run.add_argument("--local", type=Path, metavar="DIR", help="catalogs and locations mapped under DIR")
    run.add_argument("--state", type=Path, metavar="DIR", help="local object records (default DIR/objects)")
    run.add_argument("--follow", action="store_true", help="StreamingJob: processing-time trigger until Ctrl-C")
    run.add_argument("--starting-position", choices=("earliest", "latest"), help="where a fresh live query starts")
    run.add_argument("--snapshots-per-batch", type=int, metavar="N", help="live Iceberg snapshots read per micro-batch")
    target = run.add_mutually_exclusive_group()
    target.add_argument("--target-batch", type=int, metavar="N", help="Rewind: restore at or before this batch")
    target.add_argument("--target-time", metavar="T", help="Rewind: restore the newest snapshot committed before T")
    run.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    run.add_argument("--spark-conf", action="append", default=[], metavar="K=V", help="extra Spark conf (repeat)")
    run.add_argument("--fresh", action="store_true", help="forget the local record first (a new object, new uid)")
    run.add_argument(
        "--py-files",
        action="append",
        default=[],
        metavar="PATH",
        help="directories or .py/.zip/.egg files (repeat, or comma-separated) put on the driver's path and shipped to "
        "the executors, instead of spec.deps.pyFiles and spec.pipelineFrom's ConfigMap: a working copy, or the files "
        "a ConfigMap is created from",
    )
    run.add_argument(
        "--secrets-dir",
        type=Path,
        metavar="DIR",
        help="the Secrets spec.kafkaSecurity names, as DIR/<secret>/<key> (one file per key, as Kubernetes mounts "
        "them)",
    )
    plan = sub.add_parser(
        "plan",
        help="plan a Backfill manifest before running it: files, rows and splits per source from Iceberg metadata, "
        "the lateness its maxDrift needs against the pipeline's, expected micro-batches, peak state, warm-up",
    )
    plan.add_argument("manifest", type=Path, help="the Backfill (YAML; may also hold its StreamingJob)")
    plan.add_argument("--job", type=Path, help="its StreamingJob (default: same file, or next to it)")
    plan.add_argument("--local", type=Path, metavar="DIR", help="catalogs mapped under DIR (as kappa run --local)")
    plan.add_argument("--json", action="store_true", help="print the plan report (JSON) only")
    plan.add_argument(
        "--no-spark",
        action="store_true",
        help="no local SparkSession: the pipeline's lateness and horizon from alignment.lateness, pipelineArgs and "
        "its state_horizon(), not its query plan",
    )
    plan.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    plan.add_argument("--spark-conf", action="append", default=[], metavar="K=V", help="extra Spark conf (repeat)")
    plan.add_argument(
        "--py-files", action="append", default=[], metavar="PATH", help="the pipeline's code, as kappa run --py-files"
    )
    kafka = sub.add_parser("kafka", help="a local Apache Kafka broker (KRaft) for Kafka-reading jobs")
    kafka_sub = kafka.add_subparsers(dest="action", required=True)
    kafka_start = kafka_sub.add_parser(
        "start", help="start a broker on 127.0.0.1 in the foreground (Ctrl-C stops it; its data is kept)"
    )
    kafka_start.add_argument("--dir", type=Path, default=Path("kafka-data"), help="its data (default: kafka-data)")
    kafka_start.add_argument("--port", type=int, default=9092, help="its port (default 9092)")
    kafka_start.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:PARTITIONS]", help="create a topic (repeat)"
    )
    cluster = sub.add_parser(
        "cluster",
        help="a real Kubernetes cluster on this machine (one node or several) with the spark-operator and kappa "
        "installed (root)",
    )
    cluster_sub = cluster.add_subparsers(dest="action", required=True)
    for action, text in (
        ("up", "build what is missing, start the cluster in the background with S3, a catalog and the example "
         "data; print the KUBECONFIG line and the kubectl commands to run next"),
        ("down", "stop the cluster and everything it started"),
    ):  # fmt: skip
        one = cluster_sub.add_parser(action, help=text)
        one.add_argument(
            "--dir",
            type=Path,
            default=None,
            help="the cluster's files (default: $KAPPA_CLUSTER_DIR or ~/.kappa/cluster)",
        )
        if action == "up":
            one.add_argument(
                "--nodes",
                type=int,
                default=1,
                help="how many nodes, each with its own kubelet, containerd and network, in zones a, b, c in turn "
                "(default 1, at most 9)",
            )
    data = sub.add_parser(
        "example-data",
        help="write the examples' input tables (ingest.impressions, ingest.playbacks) into the local catalogs "
        "`--local DIR` maps the examples to",
    )
    data.add_argument("dir", type=Path, help="the directory later passed as --local DIR")
    data.add_argument(
        "--job",
        type=Path,
        default=Path("examples/rmi-streamingjob.yaml"),
        help="the StreamingJob whose history tables to write (default: examples/rmi-streamingjob.yaml)",
    )
    data.add_argument("--hours", type=float, default=8.0, help="event hours from 2026-11-01 12:00Z (default 8)")
    crds = sub.add_parser("crds", help="write crds/*.yaml generated from the models")
    crds.add_argument("--out", type=Path, default=Path("crds"), help="directory (default: crds)")
    crds.add_argument("--check", action="store_true", help="exit 1 if the files differ from the models")
    crds.add_argument(
        "--reference", type=Path, default=Path("docs/crd-reference.md"), help="the reference for people (Markdown)"
    )
    _verbose_everywhere(parser)
    return parser


def _verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """``-v`` after any (sub)command, as people type it: `kappa plan x.yaml -v`."""
    if "--verbose" not in parser._option_string_actions:  # `kappa operator --verbose`: its debug logging
        parser.add_argument("-v", "--verbose", action="store_true", help="on failure, print the trace")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _verbose_everywhere(child)


PIPED_WIDTH = 200
"""Columns when stdout is not a terminal (a pipe, a file, CI's log): rich's 80 cut the plan's
table; a terminal's own width is used as it is."""


def out_console() -> Console:
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=False, width=PIPED_WIDTH if piped else None)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = out_console()
    try:
        return dispatch(args, console)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]")
        return 130
    except Exception as exc:
        return print_error(exc, args, 1)


def print_error(exc: BaseException, args: argparse.Namespace, code: int) -> int:
    """The cause and the fix on standard error, one or two lines (``cli_errors``); the trace
    with ``-v``. Returns ``code``."""
    from rich.markup import escape

    from kappa_operator.cli.errors import explain

    if getattr(args, "verbose", False):
        Console(stderr=True).print_exception()
    explained = explain(exc)
    err = Console(stderr=True, soft_wrap=True)
    err.print(f"[red]error:[/] {escape(explained.cause)}")
    if explained.fix:
        err.print(escape(explained.fix))
    return code


def run_example_data(args: argparse.Namespace, console: Console) -> int:
    from kappa_operator.local.example_data import write_example_data

    with console.status(f"writing the example tables into {args.dir}"):
        data = write_example_data(args.dir, args.job, hours=args.hours)
    s = data.stats
    console.print(
        f"{data.namespace}.impressions ({s.impressions:,} rows) and {data.namespace}.playbacks ({s.playbacks:,} rows), "
        f"{s.commits} commits, events {s.first_event:%Y-%m-%d %H:%M} to {s.last_event:%H:%M} UTC, "
        f"in catalog {data.catalog} -> {data.uri}"
    )
    console.print(
        f"next: kappa plan examples/rmi-backfill.yaml --local {args.dir}   "
        f"(then kappa run examples/rmi-backfill.yaml --local {args.dir})"
    )
    return 0


def dispatch(args: argparse.Namespace, console: Console) -> int:
    if args.command == "example-data":
        return run_example_data(args, console)
    if args.command == "run":
        from kappa_operator.local.runs import run_command

        return run_command(args, console)
    if args.command == "plan":
        from kappa_operator.local.plan import plan_command

        return plan_command(args, console)
    if args.command == "crds":
        return write_crds(args.out, args.check, console, args.reference)
    if args.command == "coordinator":
        return run_coordinator(args, console)
    if args.command == "operator":
        return operator_command(args)
    if args.command in ("checkpoints", "rewind"):
        return run_report(args, console)
    if args.command == "demo":
        return run_demo_command(args, console)
    if args.command == "kafka":
        return run_kafka(args, console)
    if args.command == "cluster":
        from kappa_operator.local_cluster import commands

        workdir = (args.dir or commands.DEFAULT_DIR).resolve()
        return commands.up(workdir, console, args.nodes) if args.action == "up" else commands.down(workdir, console)
    return 0


def run_kafka(args: argparse.Namespace, console: Console) -> int:
    import signal
    import time

    from kappa_operator.local.kafka import KafkaBroker, create_topics

    try:
        broker = KafkaBroker.start(args.dir.resolve(), args.port)
    except KappaError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        if args.topic:
            console.print(f"created topics: {', '.join(create_topics(broker.bootstrap, args.topic))}")
        console.print(
            f"Kafka broker on [bold]{broker.bootstrap}[/] (data {args.dir}, log {broker.log}); "
            "sources use bootstrapServers: " + broker.bootstrap + ". Ctrl-C stops it."
        )
        while not stop["now"] and broker.process.poll() is None:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


def run_demo_command(args: argparse.Namespace, console: Console) -> int:
    """Exit 1 with the failed step (or broken promise) named; the traceback goes to error.log."""
    import traceback

    from kappa_operator.demo import DemoSettings, run_demo
    from kappa_operator.demo.story import out_refusal

    try:
        settings = DemoSettings(out=args.out.resolve(), hours=args.hours, seed=args.seed, max_drift=args.max_drift)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    if refusal := out_refusal(settings.out):  # before anything is written there, error.log included
        console.print(f"[red]error:[/] {refusal}")
        return 2
    try:
        run_demo(settings, console)
    except KappaError as exc:
        console.print(f"[red]kappa demo failed:[/] {exc}")
        if settings.out.is_dir():
            log = settings.out / "error.log"
            log.write_text("".join(traceback.format_exception(exc)))
            console.print(f"details: {log}")
        return 1
    except KeyboardInterrupt:
        console.print("[red]kappa demo interrupted[/] (its queries were stopped)")
        return 130
    return 0


def write_crds(out: Path, check: bool, console: Console, reference: Path = Path("docs/crd-reference.md")) -> int:
    """The CRDs and their reference for people, both generated from the models."""
    from kappa_operator.models.crd import render_all
    from kappa_operator.models.reference import render_reference

    stale = []
    files = {out / name: text for name, text in render_all().items()}
    files[reference] = render_reference()
    for path, text in files.items():
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        console.print(f"wrote {path}")
    if stale:
        console.print(f"[red]stale:[/] {', '.join(stale)}: run `kappa crds`")
        return 1
    return 0


def _token(path: Path | None) -> str | None:
    import os

    return path.read_text().strip() if path else os.environ.get("KAPPA_COORDINATOR_TOKEN") or None


def operator_command(args: argparse.Namespace) -> int:
    """``kappa operator``: its flags as the runner's options (the runner is ``runner.run_operator``)."""
    import logging

    from kappa_operator.service.runner import OBJECTS_IN_FLIGHT, OperatorOptions, run_operator

    level = logging.DEBUG if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    election = _leader_election(args) if args.leader_election else None
    run_operator(
        OperatorOptions(
            namespaces=tuple(args.namespace),
            server=args.server,
            coordinator_bind=args.coordinator_bind,
            coordinator_url=args.coordinator_url,
            token=_token(args.token_file),
            metrics_bind=args.metrics_bind,
            health_bind=args.health_bind,
            max_concurrent_backfills=args.max_concurrent_backfills or None,
            max_concurrent_backfills_per_namespace=args.max_concurrent_backfills_per_namespace or None,
            progress_interval=args.progress_interval,
            leader_election=election,
            objects_in_flight=args.objects_in_flight or OBJECTS_IN_FLIGHT,
        )
    )
    return 0


def _leader_election(args: argparse.Namespace) -> LeaderElection:
    import socket

    from kappa_operator.service.runner import LeaderElection

    namespace = args.leader_election_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise SystemExit(
            "error: --leader-election: the Lease's namespace is unknown: set --leader-election-namespace "
            "(or POD_NAMESPACE, which the chart sets from the downward API)"
        )
    pod = os.environ.get("POD_NAME") or None
    identity = pod or f"{socket.gethostname()}-{os.getpid()}"
    return LeaderElection(namespace=namespace, identity=identity, lease=args.leader_election_lease, pod=pod)


def run_report(args: argparse.Namespace, console: Console) -> int:
    import yaml

    from kappa_operator.cli.tables import checkpoints_table, rewind_preview
    from kappa_operator.models.rewind import Rewind
    from kappa_operator.models.streaming_job import StreamingJob

    try:
        if args.command == "checkpoints":
            console.print(checkpoints_table(args.location))
            return 0
        rw = Rewind.model_validate(yaml.safe_load(args.manifest.read_text()))
        job = StreamingJob.model_validate(yaml.safe_load(args.job.read_text()))
        others = [StreamingJob.model_validate(d) for p in args.jobs for d in yaml.safe_load_all(p.read_text()) if d]
        if rw.spec.job_ref.name != job.metadata.name:
            console.print(f"[red]error:[/] the Rewind's jobRef is {rw.spec.job_ref.name}, --job is {job.metadata.name}")
            return 2
        if args.local is not None:
            from kappa_operator.local.overrides import localize

            job = localize(job, args.local)[0]
            others = [localize(o, args.local)[0] for o in others]
        console.print(rewind_preview(rw, job, others))
        return 0
    except (KappaError, ValueError, OSError) as exc:
        return print_error(exc, args, 2)


def run_coordinator(args: argparse.Namespace, console: Console) -> int:
    import logging

    from kappa_operator.coordinator.server import Service, serve
    from kappa_operator.coordinator.store import GroupStore

    token = _token(args.token_file)
    if not token:
        console.print("[red]error:[/] no token: pass --token-file or set KAPPA_COORDINATOR_TOKEN")
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    store = GroupStore(args.groups_file) if args.groups_file else None
    console.print(f"coordinator on http://{args.host}:{args.port} (groups: {args.groups_file or 'in memory'})")
    serve(Service(token, store), args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
