#!/usr/bin/env bash
# Run fuzz_pytasks (fuzz_pytasks.c) over captures of real interpreters.
#
#   run_pytasks.sh CAPTURE_TASKS FUZZ_PYTASKS TASKS_TARGET_PY WORKDIR [--long [SECONDS]]
#
# First capture_tasks writes WORKDIR/captures/*.cap: tasks_target.py under
# every interpreter here with asyncio tasks (3.7 to 3.13), stopped and
# walked (exit 77, a skip, when there is none). Seeds: for each capture,
# three samples, and the thread names. Without --long: 30000 inputs from
# seed 1 (what CI runs), a fresh corpus each time; findings are written to
# WORKDIR/findings and fail the run. With --long: as long as asked (default
# an hour), keeping what it learns in WORKDIR/corpus:
#
#   tests/fuzz/run_pytasks.sh build-fuzz/tests/fuzz/capture_tasks \
#       build-fuzz/tests/fuzz/fuzz_pytasks tests/record/tasks_target.py /tmp/fuzz-tasks --long 3600
#
# A finding reproduces alone, over the same captures:
# FUZZ_PYTASKS_CAPTURES=WORKDIR/captures build-fuzz/tests/fuzz/fuzz_pytasks FILE.
set -euo pipefail
capture=$1 fuzz=$2 target=$3 work=$4
mode=${5:-} secs=${6:-3600}
rm -rf "$work/captures" "$work/seeds"
mkdir -p "$work/captures" "$work/seeds" "$work/corpus" "$work/findings"
rc=0
"$capture" "$target" "$work/captures" || rc=$?
if [ "$rc" = 77 ]; then
  exit 77
elif [ "$rc" != 0 ]; then
  echo "run_pytasks.sh: capture_tasks failed ($rc)" >&2
  exit 1
fi
# An input (fuzz_pytasks.c): the capture's index (in name order), then
# operations: 0-1 patch, 2 drop, 3 reads fail, 4-6 sample, 7 names.
n=$(ls "$work/captures" | wc -l)
for i in $(seq 0 $((n - 1))); do
  printf "$(printf '\\x%02x' "$i")\x04\x07\x04\x04" >"$work/seeds/clean-$i"
  # A pointer of the capture written over a word, then three samples.
  printf "$(printf '\\x%02x' "$i")\x04\x00\x41\x10\x00\x20\x00\x00\x00\x05\x00\x00\x04\x04" \
    >"$work/seeds/patch-$i"
done
export FUZZ_PYTASKS_CAPTURES=$work/captures
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=512 -len_control=0
        -artifact_prefix="$work/findings/")
if [ "$mode" = "--long" ]; then
  exec "$fuzz" "${limits[@]}" -max_total_time="$secs" "$work/corpus" "$work/seeds"
fi
rm -rf "$work/corpus" && mkdir -p "$work/corpus"
"$fuzz" "${limits[@]}" -seed=1 -runs=30000 "$work/corpus" "$work/seeds"
