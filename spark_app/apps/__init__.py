"""The applications the operator's SparkApplications run, one module per subcommand of
``python -m spark_app``: ``run`` (the job's queries; ``bounded`` is its batch leg and
``auto``'s proof), ``publish`` (a finished backfill's validation and publish: the table
operation itself is ``sinks/iceberg/publish.py``), ``restore`` (a Rewind's restore and sink
undo: the checkpoint operation itself is ``contract/checkpoints/restore.py``); ``pipeline_code`` ships
the user's pipeline to the executors. ``plan`` is ``planning/plan.py``."""
