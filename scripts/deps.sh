#!/usr/bin/env bash
# Install what pyflame needs to build and test on Debian 12 (run as root).
# Skips apt-get when everything is already there.
set -euo pipefail
pkgs=(gcc pkg-config meson ninja-build python3 sqlite3 libsqlite3-dev libelf-dev
      libarchive-dev zlib1g-dev libcmocka-dev clang-format util-linux procps
      clang libbpf-dev bpftool zsh libdw-dev
      # the live view (ncurses) and its end-to-end test (tmux drives it)
      libncurses-dev tmux
      # native stacks' end-to-end test: a C extension built against Debian's
      # python3.11 too, and numpy's matrix product under it, in OpenBLAS
      # (which numpy then uses instead of the reference BLAS): its worker
      # threads, which run no Python, must appear too
      python3.11-dev python3-numpy libopenblas0-pthread
      # -Dstatic=true (single-file tools): the static libraries libarchive and
      # libbpf need that their -dev packages do not pull in
      libzstd-dev liblz4-dev libacl1-dev libxml2-dev liblzma-dev libbz2-dev nettle-dev
      libicu-dev file
      # the Pyroscope recipe (scripts/pyroscope-push.sh) and its test
      curl
      # the Debian packages (tests/deb/check-deb.sh)
      dpkg-dev debhelper lintian xz-utils git)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
