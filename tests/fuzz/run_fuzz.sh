#!/usr/bin/env bash
# Run fuzz_report (fuzz_report.c) from a corpus of real traces.
#
#   run_fuzz.sh FUZZ_REPORT MAKE_TRACES EXAMPLE_TRACE WORKDIR [--long [SECONDS]]
#
# The corpus: the synthetic traces of tests/diff/make_traces (many threads,
# long stacks, merged runs), tests/libtrace/example_trace's trace and its
# merge, and, when $PYFLAME_RECORD is set and an interpreter is here, a real
# recording with its source files stored. Without --long: 1500 inputs from
# seed 1 (about 3 minutes, what CI runs); findings are written to
# WORKDIR/findings and fail the run. With --long: as long as asked (default
# an hour), keeping what it learns in WORKDIR/corpus:
#
#   CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false
#   ninja -C build-fuzz && meson test -C build-fuzz --suite fuzz          # the CI run
#   tests/fuzz/run_fuzz.sh build-fuzz/tests/fuzz/fuzz_report build-fuzz/tests/diff/make_traces \
#       build-fuzz/tests/libtrace/example_trace /tmp/fuzz --long 3600
set -euo pipefail
fuzz=$1 make_traces=$2 example_trace=$3 work=$4
mode=${5:-} secs=${6:-3600}
mkdir -p "$work/seeds" "$work/corpus" "$work/findings"
if [ -z "$(ls -A "$work/seeds")" ]; then
  "$make_traces" "$work/seeds" >/dev/null
  "$example_trace" "$work/seeds/example.db" "$work/seeds/example-merged.db" >/dev/null
  py=$(ls -d ~/.pyenv/versions/3.12*/bin/python 2>/dev/null | head -1 || true)
  if [ -n "${PYFLAME_RECORD:-}" ] && [ -x "${PYFLAME_RECORD}" ] && [ -n "$py" ]; then
    "$PYFLAME_RECORD" -q -f -r 1k -o "$work/seeds/recorded.db" -- "$py" -c \
      'import json, textwrap
def f(n): return f(n - 1) if n else sum(range(2000))
for i in range(300): f(30)' || true
  fi
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
limits=(-timeout=20 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=4000000
        -artifact_prefix="$work/findings/")
if [ "$mode" = "--long" ]; then
  exec "$fuzz" "${limits[@]}" -max_total_time="$secs" "$work/corpus" "$work/seeds"
fi
# The CI run: fixed seed and count, a fresh corpus each time.
rm -rf "$work/corpus" && mkdir -p "$work/corpus"
"$fuzz" "${limits[@]}" -seed=1 -runs=1500 "$work/corpus" "$work/seeds"
