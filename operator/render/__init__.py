"""Pure functions from custom resources to what runs them: the JobConfig (the contract with
spark_app), the ConfigMap that carries it, and the Kubeflow SparkApplication."""
