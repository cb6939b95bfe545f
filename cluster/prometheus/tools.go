//go:build tools

// Prometheus beside the local cluster (issue 61), from its published module, pinned in go.mod:
// Debian's package is built without kubernetes_sd_configs, which the chart's scrape jobs use.
// cluster/build.sh builds it with the Kubernetes discovery alone (remove_all_sd,enable_kubernetes_sd).
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
