"""A blue/green upgrade's refusals and names (pure): what the operator checks before it starts
a new version ("green") beside the running one ("blue"), and where green's checkpoint and
branch are (``docs/design/blue-green.md``).

Green takes over where blue stops reading and publishes its rows from one event time on into
each sink's main branch in one Iceberg snapshot; the rules of that seam and boundary are the
contract's (``spark_app.contract.blue_green``). So an edit is refused, by name, when the switch
could not be exact: a sink that cannot take its rows back atomically (a topic, a directory), a
sink without an event-time column, inputs or tables that differ between the versions (green
would not read what blue read, or would write elsewhere). (An ``icebergLive`` source whose
history is another table than the one it reads live is refused by the spec's own validation:
green reads the table's history up to where blue reads it live.) The refusal is said before
anything starts; blue keeps running.
"""

from __future__ import annotations

from kappa_operator.models.streaming_job import StreamingJob, StreamingJobSpec

WHO = "upgrade.mode blueGreen"


def green_checkpoint(job: StreamingJob) -> str:
    """Green's own checkpoint, one per attempt (a later attempt is a later generation and never
    resumes a failed one); blue's stays where it is."""
    return f"{job.spec.checkpoints.location.rstrip('/')}/green-g{job.metadata.generation}"


def green_branch(job: StreamingJob) -> str:
    """The branch of each sink table green writes until the switch (the job's name in it: two
    jobs writing one table never share one)."""
    return f"green-{job.metadata.name}-g{job.metadata.generation}"


def sinks_refused(spec: StreamingJobSpec) -> list[str]:
    """What keeps each sink from switching at one event-time boundary in one snapshot, one line
    each (empty: every sink can)."""
    out = []
    for name, sink in sorted(spec.sinks.items()):
        if sink.kind != "iceberg":
            out.append(
                f"{WHO}: sinks.{name} is a {sink.kind} sink: only an Iceberg sink can switch at one event-time "
                "boundary in one snapshot (a topic's records or a directory's files cannot be taken back); use "
                "upgrade.mode last-state or snapshot for this job"
            )
        elif sink.time_column is None:
            out.append(
                f"{WHO}: sinks.{name} needs timeColumn (the switch replaces its rows from one event time on); set "
                f"sinks.{name}.timeColumn, or use upgrade.mode last-state or snapshot for this job"
            )
    return out


def refused(blue: StreamingJobSpec, green: StreamingJobSpec) -> str | None:
    """Why the edit from ``blue`` (the spec running) to ``green`` cannot be a blue/green
    upgrade, in one line naming the field and what to do instead; None when it can."""
    problems = sinks_refused(green)
    if problems:
        return problems[0]
    for name, source in sorted(green.sources.items()):
        running = blue.sources.get(name)
        if running is None or running.live != source.live or running.history.table != source.history.table:
            return (
                f"{WHO}: sources.{name} differs from the running spec's; green takes over where blue stops reading, "
                "which needs the same inputs: change sources with upgrade.mode last-state or stateless"
            )
    tables: dict[tuple[str, str | None], str] = {}
    for name, source in sorted(green.sources.items()):
        if source.live.kind != "icebergLive":
            continue
        other = tables.setdefault((source.live.catalog, source.live.table), name)
        if other != name:
            return (
                f"{WHO}: sources.{other} and sources.{name} both read {source.live.table} live; green holds each "
                "table at blue's position, which two sources of one table may end at two different snapshots of: "
                "read the table once, or use upgrade.mode last-state or snapshot for this job"
            )
    if set(blue.sources) != set(green.sources):
        gone = ", ".join(sorted(set(blue.sources) - set(green.sources)))
        return (
            f"{WHO}: sources {gone} of the running spec are not in the edited one; green takes over where blue stops "
            "reading, which needs the same inputs: change sources with upgrade.mode last-state or stateless"
        )
    for name, sink in sorted(green.sinks.items()):
        running_sink = blue.sinks.get(name)
        if running_sink is None or (running_sink.catalog, running_sink.table) != (sink.catalog, sink.table):
            return (
                f"{WHO}: sinks.{name}.table differs from the running spec's (or is new); green writes a branch of "
                "blue's table: change sinks with upgrade.mode last-state or stateless"
            )
    return None
