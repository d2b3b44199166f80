#!/usr/bin/env bash
# setup-consumers.sh - install the real consumers the export tests drive
# (suite 'consumers' of tests/export/meson.build), on Debian 12, as root:
#   golang-go   for `go tool pprof`
#   chromium    headless browser for speedscope and the svg/html flame graphs
#   node + npm  (Debian's nodejs/npm, unless a node is already installed)
#   npm ci      playwright-core, speedscope and @paulirish/trace_engine (the
#               Chrome DevTools Performance panel's trace engine) at the versions pinned in
#               tests/export/package-lock.json, into tests/export/node_modules
# Idempotent: skips what is already there. CI calls it before `meson test`.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

pkgs=(golang-go chromium)
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup-consumers: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Exactly the locked versions; no audit or funding calls.
if ! (cd "$here" && npm ls --depth=0 playwright-core speedscope @paulirish/trace_engine >/dev/null 2>&1); then
  echo "setup-consumers: npm ci in $here"
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

go version
chromium --version 2>/dev/null || /usr/bin/chromium --version
node --version
(cd "$here" && npm ls --depth=0 playwright-core speedscope @paulirish/trace_engine)
