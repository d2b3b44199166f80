#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, record the
# bundled example program, print its report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
[ -d build ] || meson setup build
ninja -C build
./build/record/pyflame-record -f -o demo.db -- python3 examples/demo.py
./build/report/pyflame-report --by-function --top 10 demo.db
