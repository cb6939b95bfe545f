"""kappa-operator: reconciles StreamingJob, Backfill and Rewind resources into Spark applications.

Imported as ``kappa_operator`` (the folder is ``operator/``; the stdlib ``operator`` stays
unshadowed). May import ``spark_app.contract.config`` (the contract) and, for local runs, the Spark app.
"""
