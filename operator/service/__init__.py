"""``kappa operator``, the process the chart's Deployment runs: kopf with the watermark
coordinator in the same process (``runner``), and its Prometheus metrics (``metrics``)."""
