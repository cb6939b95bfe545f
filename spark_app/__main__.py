"""``python -m spark_app [run|publish|restore|plan|compare|switch|discard] --config job.json``: what the operator's
SparkApplications run: the job's query (``run``, the default; a backfill config with
``publish`` then validates its branches against main and publishes in the same driver,
``spark_app.apps.publish.run_and_publish``), a finished backfill's validation and publish alone
(``publish``: the separate application the operator still renders where a completed backfill
left no publish report), a Rewind's restore and sink undo (``restore``, driver-only: no
SparkSession), or a Backfill's plan from Iceberg metadata and the pipeline's analyzed plan
(``plan``: no Spark job runs; ``--no-spark`` plans without a SparkSession), and a blue/green
upgrade's steps on green's config (``compare``, ``switch``, ``discard``: ``apps.blue_green``).
Exit codes: 0 done (Published, Restored, Planned, a blue/green step with its report; a ``run``
whose publish was Refused too: the application completed, and its report says Refused for the
operator to end the Backfill on), 3
refused or failed with a report, 2 a config error (``EXIT_REFUSED``: not restarted), 1 the job
failed (a ``run`` whose publish failed too: restarted, it resumes and publishes again)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spark_app.contract.config import load_config
from spark_app.contract.errors import EXIT_FAILED, EXIT_REFUSED, KappaError

TERMINATION_LOG = os.environ.get("KAPPA_TERMINATION_LOG", "/dev/termination-log")
"""Where Kubernetes takes a container's last words from (the pod's terminationMessagePath):
the kubelet puts them in the pod's status, where the operator reads them into the object's
condition; a log line in a driver pod is not where people look."""
LAST_WORDS_MAX = 1024
TRACE_ENV = "KAPPA_TRACE_PATH"
"""Where a driver appends its trace (each admission decision and its bound, each commit) when
its config names none: a file on a mounted volume, or ``/dev/stderr`` for the pod's log. Set in
``spec.driver.env`` to audit a run's alignment after the fact (issue 62's failover test does)."""


def last_words(message: str) -> None:
    """The failure, on one line, into the termination log (nothing outside a pod)."""
    line = " ".join(message.split())
    if len(line) > LAST_WORDS_MAX:
        line = line[: LAST_WORDS_MAX - 3] + "..."
    try:  # r+: the kubelet made the file; outside a pod (kappa run, as root) none is made in /dev
        with open(TERMINATION_LOG, "r+", encoding="utf-8") as out:
            out.truncate()
            out.write(line)
    except OSError:
        pass  # not in a pod: stderr said it


STEPS = ("run", "publish", "restore", "plan", "compare", "switch", "discard")
STEP_DONE = ("Matched", "Refused", "Switched", "NotAtSeam", "Discarded")
"""A blue/green step whose report is in one of these states exits 0; Failed raised (1). A
step's Refused or NotAtSeam completed its work: the report is the verdict the operator acts on."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_app", description=__doc__)
    parser.add_argument("command", nargs="?", choices=STEPS, default="run")
    parser.add_argument("--config", required=True, help="JobConfig as JSON or YAML")
    parser.add_argument("--timeout", type=float, help="stop a processingTime run after this many seconds")
    parser.add_argument(
        "--no-spark",
        action="store_true",
        help="plan: without a SparkSession (delay and horizon from alignment.lateness, pipelineArgs and the "
        "pipeline's state_horizon(), not its query plan)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
        if cfg.trace_path is None and os.environ.get(TRACE_ENV):
            cfg = cfg.model_copy(update={"trace_path": os.environ[TRACE_ENV]})
        if args.command == "restore":
            from spark_app.apps.restore import run_restore

            restored = run_restore(cfg)
            print(restored.model_dump_json(indent=2))
            return 0 if restored.state == "Restored" else 3
        if args.command == "discard":
            from spark_app.apps.blue_green import run_discard

            return _said(run_discard(cfg))
        if args.command == "plan" and args.no_spark:
            from spark_app.planning.run import run_plan

            planned = run_plan(cfg, None)
            print(planned.model_dump_json(indent=2))
            return 0 if planned.state == "Planned" else 3
        from spark_app.apps.session import build_session

        # The session first, in a thread: on Kubernetes its start is where the executor pods are
        # asked for, and they start while this thread imports the job's sources, sinks and
        # planning (a second of CPU that used to come before the session; issue 58).
        starting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kappa-session")
        session = starting.submit(build_session, cfg)
        starting.shutdown(wait=False)
        from spark_app.apps.publish import run_and_publish, run_publish
        from spark_app.contract.errors import user_message

        try:
            spark = session.result()
            if args.command == "plan":
                from spark_app.planning.run import run_plan

                planned = run_plan(cfg, spark)
                print(planned.model_dump_json(indent=2))
                return 0 if planned.state == "Planned" else 3
            if args.command in ("compare", "switch"):
                from spark_app.apps.blue_green import run_compare, run_switch

                return _said((run_compare if args.command == "compare" else run_switch)(cfg, spark))
            if args.command == "publish":
                published = run_publish(cfg, spark)
                print(published.model_dump_json(indent=2))
                return 0 if published.state == "Published" else 3
            report, publish = run_and_publish(cfg, spark, timeout=args.timeout)
        except KappaError:
            raise
        except Exception as exc:  # Spark wraps what a source raised: show the part a person acts on
            print(f"error: job {cfg.name} failed: {user_message(exc)}", file=sys.stderr)
            last_words(f"job {cfg.name} failed: {user_message(exc)}")
            return EXIT_FAILED
    except KappaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        last_words(str(exc))
        return EXIT_FAILED if exc.restartable else EXIT_REFUSED
    said = report.summary()
    if publish is not None:  # Refused too: the report on storage is what the operator ends on
        said["publish"] = {"state": publish.state, "error": publish.error}
    print(json.dumps(said, indent=2))
    return 0


def _said(report: Any) -> int:
    """A blue/green step's report, printed; its exit code."""
    print(report.model_dump_json(indent=2))
    return 0 if report.state in STEP_DONE else 3


if __name__ == "__main__":
    sys.exit(main())
