"""The dashboard people watch alignment lag on: one definition (``definition``, kappa.yaml),
generated into Grafana's JSON (``grafana``) and a Perses dashboard (``perses``); both files ship
in the chart (charts/kappa-operator/dashboards/), and `python -m kappa_operator.dashboard`
writes them."""
