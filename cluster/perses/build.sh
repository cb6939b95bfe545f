#!/usr/bin/env bash
# Perses, the local cluster's dashboard server (issue 61; Apache-2.0), built from what it
# publishes: its Go module (pinned below; the module proxy checks it against sum.golang.org) and,
# for the web UI the module does not embed, the module's own ui/ workspace built with its
# package-lock.json (npm ci). Its plugins are the npm bundles of the same release round, checked
# against the integrity pinned here; they carry no CUE schemas (the server refuses a plugin
# without), so plugins/<name>/ here adds hand-written ones for the kinds the chart's dashboard
# uses. GitHub, where Perses's release tarballs and plugin archives live, is not reachable here.
#
# Usage: build.sh OUT   (OUT/bin/perses and OUT/plugins/<name>/ are written; ~18 min cold on 2 cores)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
VERSION=v0.52.0
# name  npm package@version  integrity (npm view <package> dist.integrity)
PLUGINS=(
  "Prometheus @perses-dev/prometheus-plugin@0.53.4 sha512-mUkAVCnlpHmDzI7W2KeStjqpQrniO+sQtSemG4czNMee0ejO4OMcdZQchEXX9rXDKU2efS6yzYCiwyuZE0U21w=="
  "TimeSeriesChart @perses-dev/timeseries-chart-plugin@0.10.2 sha512-8HbxCiiV1fcy6D5l/MV06Ru6Do4PLJNzQ/nOiA3VuUlZFRtOG7fGnVtNtGP7WYn1HfJgJDHKx1fkQIiLkEPS2w=="
)
command -v npm >/dev/null 2>&1 || { echo "Perses's web UI builds with Node.js 20+ and npm: install them (README)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/bin" "$work/plugins"

# the plugins first: a download, while nothing else runs yet
for entry in "${PLUGINS[@]}"; do
  read -r name package integrity <<<"$entry"
  got=$(cd "$work/plugins" && npm pack "$package" --json --loglevel=error)
  file=$(python3 -c 'import json,sys; d=json.load(sys.stdin)[0]; print(d["filename"]); sys.exit(d["integrity"] != sys.argv[1])' "$integrity" <<<"$got") \
    || { echo "$package: its integrity is not the pinned $integrity" >&2; exit 1; }
  rm -rf "$work/plugins/$name" && mkdir -p "$work/plugins/$name"
  tar -xzf "$work/plugins/$file" -C "$work/plugins/$name" --strip-components=1
  cp -r "$here/plugins/$name/." "$work/plugins/$name/"
done

module=$(cd "$work" && go mod download -json "github.com/perses/perses@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
cp -r "$module" "$work/src" && chmod -R u+w "$work/src"
# the UI: its workspace's locked dependencies, then its production build (ui/app/dist)
(cd "$work/src/ui" && npm ci --no-audit --no-fund --loglevel=error && npm run build) >&2
# what the module's Makefile does next: gzip the assets and write ui/embed.go, which embeds them
(cd "$work/src" && bash scripts/compress_assets.sh) >&2
(cd "$work/src" && go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=${VERSION#v}" \
  -o "$out/bin/perses.tmp" ./cmd/perses)
rm -rf "$out/plugins" && mv "$work/plugins" "$out/plugins" && rm -f "$out/plugins"/*.tgz
mv "$out/bin/perses.tmp" "$out/bin/perses"
