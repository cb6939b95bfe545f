"""Where a driver's sources learn their alignment group's global watermark: a state file with
a lock and atomic replace on one driver (``local``), the coordinator service over HTTP for
groups that span queries and jobs (``http``), the read ledger (``reads``) and the admission
rounds' record (``round_record``). The group's rule itself, which the coordinator shares, is
in ``spark_app.contract.alignment``.
"""
