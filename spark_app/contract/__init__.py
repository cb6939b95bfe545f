"""What the operator and the Spark app agree on, and nothing else: the JobConfig the operator
renders and the driver reads (``config``), durations as both write them, the errors both
raise, where a job's files live (``storage``), and every ``_kappa/*.json`` report with its
path (``reports``).

Both halves import this package; it imports neither Spark nor pyiceberg (nor kopf or the
Kubernetes client), so the control plane can depend on it without a JVM, and a change here is
a change of the contract between them (``tests/unit/project/test_import_rules.py`` holds both rules).
Like the Flink Kubernetes Operator's ``-api`` module.
"""
