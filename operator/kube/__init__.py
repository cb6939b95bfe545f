"""The Kubernetes API as the operator uses it, its I/O edge: reads and idempotent writes with
409s retried (``api``), Events (``events``), and patches the API server refused, reported and
retried (``patch_refusals``)."""
