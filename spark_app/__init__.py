"""The Spark side of kappa-operator: runs inside the driver and executors.

Never imports kopf or kubernetes. What the operator shares with it is ``spark_app.contract``.
"""
