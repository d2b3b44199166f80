#!/usr/bin/env bash
# Run fuzz_bpfdecode (fuzz_bpfdecode.c) from seeds that decode each layout's
# threads from their own chains, in batches, then with a few edits.
#
#   run_bpfdecode.sh FUZZ_BPFDECODE WORKDIR [--long [SECONDS]]
#
# Without --long: 150000 inputs from seed 1 (what CI runs), a fresh corpus
# each time; findings are written to WORKDIR/findings and fail the run. With
# --long: as long as asked (default an hour), keeping what it learns in
# WORKDIR/corpus:
#
#   tests/fuzz/run_bpfdecode.sh build-fuzz/tests/fuzz/fuzz_bpfdecode /tmp/fuzz-bpf --long 3600
#
# A finding reproduces alone: build-fuzz/tests/fuzz/fuzz_bpfdecode FILE.
set -euo pipefail
fuzz=$1 work=$2
mode=${3:-} secs=${4:-3600}
mkdir -p "$work/seeds" "$work/corpus" "$work/findings"
# An input (fuzz_bpfdecode.c): the layout's index (0-13; the top bit allows
# a sample, the two top bits for 2.7-3.10), then operations: 00 event
# (thread (top bit: copied now), depth mode, [depth], [flags], edits,
# edits...), 03 reads fail, 04 end of batch, 05 patch, 06 sample, 07 drop.
seed() { # FILE HEX...
  local f=$1; shift
  printf '%b' "$(printf '%s' "$*" | sed 's/ //g; s/\([0-9a-f][0-9a-f]\)/\\x\1/g')" >"$f"
}
for layout in $(seq 0 13); do
  l=$(printf '%02x' "$layout") s=$(printf '%02x' "$((layout | 192))")
  # Every thread's own chain; the first again in the batch, then in the
  # next; a sample; the third again.
  seed "$work/seeds/own-$layout" "$s" 00000000 00010000 00020000 00030000 00040000 \
    00000000 04 00000000 00010000 06 00020000
  # A frame made a real code object's (code 4, unit 5), a nudged position;
  # the chain again past its end (truncated: loops); 3 frames; depth 2^32-1.
  seed "$work/seeds/edit-$layout" "$l" 00000002 0003040005 01040200 \
    0000370201 0000 000101 0300 000002 ffffffff 00
  # A byte of an object changed between batches; an object unreadable; the
  # chain copied again from the memory as it is then.
  seed "$work/seeds/patch-$layout" "$l" 00000000 04 05030000 0000000000000000 00 \
    00000000 04 070b 00000000 00800000
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
limits=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=4096
        -artifact_prefix="$work/findings/")
if [ "$mode" = "--long" ]; then
  exec "$fuzz" "${limits[@]}" -max_total_time="$secs" "$work/corpus" "$work/seeds"
fi
rm -rf "$work/corpus" && mkdir -p "$work/corpus"
"$fuzz" "${limits[@]}" -seed=1 -runs=150000 "$work/corpus" "$work/seeds"
