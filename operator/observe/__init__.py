"""What the operator reads outside the API server before it decides (observe, decide, act):
a job's restore points from its snapshot manifests, and whether Kafka still holds what they
would read first (``restore_points``). Metadata only: never a row."""
