"""Errors a user acts on: each message names the field or the number to change."""

EXIT_FAILED = 1
"""A driver's exit code when its job failed: a restart from the checkpoint may get further."""
EXIT_REFUSED = 2
"""A driver's exit code when it refused its configuration (a ``KappaError`` that is not
``restartable``): the same spec fails the same way, so the operator does not restart it."""


class KappaError(Exception):
    """Base of the errors the runtime reports without a traceback."""

    restartable = False
    """Whether a restart of the same spec from its checkpoint may succeed (most of these name a
    field to change: a restart loop would only repeat them)."""


class ConfigError(KappaError):
    """The job config is wrong; the message names the field and what is allowed."""


class LatenessError(KappaError):
    """The pipeline's watermark delay is below the alignment bound: rows would be dropped."""


class SnapshotExpiredError(KappaError):
    """A snapshot the query needs is gone (expired or rolled back): data would be skipped."""


class NonAppendSnapshotError(KappaError):
    """A live source met a delete/overwrite snapshot and `onNonAppend` is `fail`."""


class PlanChangedError(KappaError):
    """The checkpoint's offsets were planned with other settings than this run's."""


class ConnectorMissingError(KappaError):
    """A Spark connector the config selects is not on the classpath."""


class WarmupError(KappaError):
    """The warm-up is shorter than the pipeline's look-back: results at the start would differ."""


class IncompleteBackfillError(KappaError):
    """A backfill query ended before it admitted every split of its window."""

    restartable = True  # held by its group, say, while the coordinator restarted: it resumes


class CheckpointError(KappaError):
    """A checkpoint, snapshot or report location cannot be used as asked."""


def user_message(exc: BaseException) -> str:
    """The message a person acts on: ours when a source raised one, else the first line."""
    text = str(exc)
    for cls in KappaError.__subclasses__():
        marker = f"{cls.__name__}: "
        if marker in text:
            return text[text.index(marker) :].split("\n")[0]
    return text.strip().split("\n")[0]
