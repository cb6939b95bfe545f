#!/usr/bin/env bash
# Build the test cluster's real parts from their published Go modules, pinned, and cache them
# under the machine's home (issue 27):
#   - kube-apiserver of each version in kubernetes/<version>/ (and kube-controller-manager of the current)
#     (a go.mod that requires k8s.io/kubernetes and maps its staging modules, which it names
#     as ./staging/..., to their published versions): the current one the suite runs on, and
#     the oldest the chart supports (charts/kappa-operator/Chart.yaml, kubeVersion), on which
#     the suite's CRD checks run too;
#   - helm, from helm.sh/helm/v3;
#   - etcd comes from Debian (etcd-server), installed here when missing and run as root.
#   - the Kubeflow Spark Operator v2.3.0 from its module (cluster/spark-operator: its go.mod's
#     replace directives repeated, as the module proxy serves only that version);
#   - Prometheus v3.16.0 from its module (cluster/prometheus), with its Kubernetes discovery alone
#     (Debian's package has none): the local cluster's monitoring (issue 61);
#   - Perses v0.52.0, the dashboard server, from its Go module, its web UI built with npm from the
#     module's ui/ workspace, and its plugins' npm bundles (cluster/perses/build.sh; issue 61);
#   - the one-node cluster's kubelet, kube-scheduler and kube-proxy (current version), CoreDNS
#     v1.12.4 from its module (cluster/coredns), and its Debian packages (containerd, runc, CNI
#     plugins, busybox-static, gcc, buildah, debootstrap, postgresql for the Iceberg catalog,
#     chromium for the dashboard's screenshots)
#     when run as root;
# A fresh machine builds once (~20-30 min on 2 cores); later runs find the cache and exit.
# Prints one line per part, `name=path`: current=<bin dir>, oldest=<bin dir>, helm=<binary>.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
CURRENT=v1.34.4
OLDEST=v1.30.14
HELM_VERSION=v3.19.0
cache="${KAPPA_CLUSTER_CACHE:-$HOME/.cache/kappa-cluster}"
export GOFLAGS="${GOFLAGS:--mod=mod}" CGO_ENABLED=0
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9  # one build at a time: the test workers (pytest -n 2) may both ask on a fresh machine
# Go's build cache grows to ~7 GB over these builds and serves only a rebuild of a part that is
# already cached: a build of this script's own, gone when it ends (unless GOCACHE is set).
if [ -z "${GOCACHE:-}" ]; then
  export GOCACHE="$cache/go-build.tmp"
  trap 'rm -rf "$GOCACHE"' EXIT
fi

if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server) >&2
  else
    echo "etcd is missing: apt-get install etcd-server" >&2; exit 1
  fi
fi

kubernetes() {  # version [commands] -> bin dir holding kube-apiserver (and those)
  # All missing commands of a version in one `go build`: the packages they share compile once
  # and the links (single-threaded, ~20 s each) run side by side on the machine's cores, where
  # one build per command left a core idle at each link (measured: see bench/RESULTS.md).
  local version=$1 bin="$cache/kubernetes-$1/bin" minor tmp
  shift
  minor=${version#v1.}; minor=${minor%%.*}
  mkdir -p "$bin"
  local missing=()
  for cmd in kube-apiserver "$@"; do
    [ -x "$bin/$cmd" ] || missing+=("k8s.io/kubernetes/cmd/$cmd")
  done
  if ((${#missing[@]})); then
    echo "building ${missing[*]##*/} $version (once per machine)" >&2
    tmp="$bin/.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp"
    (cd "$here/kubernetes/$version" && go build -trimpath -ldflags "-s -w \
      -X k8s.io/component-base/version.gitVersion=$version \
      -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
      -o "$tmp/" "${missing[@]}")
    mv "$tmp"/* "$bin/" && rmdir "$tmp"
  fi
  echo "$bin"
}

helm_binary() {
  local bin="$cache/helm-$HELM_VERSION/bin"
  if [ ! -x "$bin/helm" ]; then
    echo "building helm $HELM_VERSION (once per machine)" >&2
    # What helm's Makefile stamps in: its version, and the Kubernetes version `helm template`
    # and `helm lint` assume (that of its client-go, v0.34 for helm v3.19: 1.34).
    GOFLAGS= GOBIN="$bin" go install -trimpath -ldflags "-s -w \
      -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION \
      -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=34 \
      -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34" \
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  fi
  echo "$bin/helm"
}

# The one-node cluster's parts (tests/node): the node's commands from the same module as the
# control plane, and containerd, runc, the CNI plugins, a static busybox (the test image) and gcc
# (the pause process, built static) from Debian.
node_packages=()
command -v containerd >/dev/null 2>&1 || node_packages+=(containerd)
command -v runc >/dev/null 2>&1 || node_packages+=(runc)
[ -x /usr/lib/cni/bridge ] || node_packages+=(containernetworking-plugins)
[ -x /bin/busybox ] || node_packages+=(busybox-static)
command -v gcc >/dev/null 2>&1 || node_packages+=(gcc libc6-dev)
command -v iptables >/dev/null 2>&1 || node_packages+=(iptables)
# our images, built from their Dockerfiles without a registry (operator/local_cluster/images.py)
command -v buildah >/dev/null 2>&1 || node_packages+=(buildah)
command -v debootstrap >/dev/null 2>&1 || node_packages+=(debootstrap)
# Chromium for the dashboard's screenshots (harness/browser.py; Playwright never downloads one)
command -v chromium >/dev/null 2>&1 || node_packages+=(chromium)
# the pods' Iceberg catalog database (pyiceberg's SQL catalog, as the embedded SQLite default)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || node_packages+=(postgresql)
if ((${#node_packages[@]})); then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${node_packages[@]}") >&2
  else
    echo "the node needs: apt-get install ${node_packages[*]}" >&2
  fi
fi

spark_operator_binary() {  # the Kubeflow Spark Operator of cluster/spark-operator/go.mod
  local version=v2.3.0 bin="$cache/spark-operator-v2.3.0/bin"
  if [ ! -x "$bin/spark-operator" ]; then
    echo "building the spark-operator $version (once per machine)" >&2
    mkdir -p "$bin"
    (cd "$here/spark-operator" && go build -trimpath -ldflags "-s -w \
      -X github.com/kubeflow/spark-operator/v2.version=${version#v}" \
      -o "$bin/spark-operator.tmp" github.com/kubeflow/spark-operator/v2/cmd/operator) && mv "$bin/spark-operator.tmp" "$bin/spark-operator"
  fi
  echo "$bin/spark-operator"
}

coredns_binary() {  # the cluster's DNS, of cluster/coredns/go.mod
  local bin="$cache/coredns-v1.12.4/bin"
  if [ ! -x "$bin/coredns" ]; then
    echo "building CoreDNS v1.12.4 (once per machine)" >&2
    mkdir -p "$bin"
    (cd "$here/coredns" && go build -trimpath -ldflags "-s -w" -o "$bin/coredns.tmp" github.com/coredns/coredns) \
      && mv "$bin/coredns.tmp" "$bin/coredns"
  fi
  echo "$bin/coredns"
}

prometheus_binary() {  # Prometheus of cluster/prometheus/go.mod, its Kubernetes discovery only
  local bin="$cache/prometheus-v3.16.0/bin"
  if [ ! -x "$bin/prometheus" ]; then
    echo "building Prometheus v3.16.0 (once per machine)" >&2
    mkdir -p "$bin"
    (cd "$here/prometheus" && go build -tags remove_all_sd,enable_kubernetes_sd -trimpath -ldflags "-s -w \
      -X github.com/prometheus/common/version.Version=3.16.0" \
      -o "$bin/prometheus.tmp" github.com/prometheus/prometheus/cmd/prometheus) && mv "$bin/prometheus.tmp" "$bin/prometheus"
  fi
  echo "$bin/prometheus"
}

perses_build() {  # Perses and its plugins (cluster/perses/build.sh): the local cluster's dashboard server
  local dir="$cache/perses-v0.52.0"
  if [ ! -x "$dir/bin/perses" ]; then
    echo "building Perses v0.52.0 and its web UI (once per machine)" >&2
    bash "$here/perses/build.sh" "$dir" >&2
  fi
  echo "$dir"
}

# The small modules build beside the Kubernetes commands (a core idles at each link of a
# build alone); each function prints its path again, from the cache, once both are done.
(coredns_binary && spark_operator_binary && helm_binary && prometheus_binary) >/dev/null &
side=$!
# Perses's UI build is npm's (most of its ~18 min): beside the Go builds rather than after them
perses_build >/dev/null &
dashboards=$!
current=$(kubernetes "$CURRENT" kube-controller-manager kubelet kube-scheduler kube-proxy kubectl)
# the oldest: its API server alone, for the CRD checks (tests/cluster/test_crds_on_server.py),
# which need no controller of its own
oldest=$(kubernetes "$OLDEST")
wait "$side"
wait "$dashboards"
coredns=$(coredns_binary)
spark_operator=$(spark_operator_binary)
helm=$(helm_binary)
prometheus=$(prometheus_binary)
perses=$(perses_build)
echo "current=$current"
echo "oldest=$oldest"
echo "helm=$helm"
echo "spark_operator=$spark_operator"
echo "coredns=$coredns"
echo "prometheus=$prometheus"
echo "perses=$perses"
# the spark-operator's own Helm chart, from its module (downloaded with it; not copied here)
chart_dir=$(cd "$here/spark-operator" && go mod download -json github.com/kubeflow/spark-operator/v2 | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
echo "spark_operator_chart=$chart_dir/charts/spark-operator-chart"
