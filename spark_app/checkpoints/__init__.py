"""The driver's side of the externalized checkpoint: its query listener copies each sink's
query to ``checkpoint.external`` (``driver``). What those copies are, how they are listed,
chosen and restored, is the format both halves share, in ``spark_app.contract.checkpoints``."""
