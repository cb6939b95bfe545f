"""The Spark side of kappa-operator: runs inside the driver and executors.

Never imports kopf or kubernetes; the operator depends on `spark_app.config` only.
"""
