#!/usr/bin/env bash
# The whole test suite on a fresh Debian 12 machine (run as root): install,
# check formatting, build with warnings fatal, run unit, golden, consumer
# (go tool pprof, speedscope and Chromium reading our outputs) and
# end-to-end tests, then run the unit and golden tests again, and the
# end-to-end tests on one interpreter, under AddressSanitizer and UBSan, and
# under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

# meson test, and when it fails, every failing check again at the very end of the
# output: a CI log shown only in part keeps its head and tail, and the checks that
# failed in a long verbose run are in neither.
run_tests() {
    local dir=$1
    shift
    if ! meson test -C "$dir" "$@"; then
        echo "== failed checks (from $dir/meson-logs/testlog.txt)"
        grep -E '^(FAIL|not ok|ERROR)[ :]' "$dir/meson-logs/testlog.txt" | head -50 || true
        grep -E '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT) ' "$dir/meson-logs/testlog.txt" || true
        exit 1
    fi
}
# Each stage's heading says how long the one before took (CI's budget).
stage() {
    local now=$SECONDS
    if [ -n "${stage_name:-}" ]; then
        echo "== ($stage_name: $((now - stage_start)) s)"
    fi
    stage_name=$1
    stage_start=$now
    echo "== $1"
}
stage "dependencies"
bash scripts/deps.sh
# The real consumers of our outputs: go tool pprof, speedscope and Chromium.
bash tests/export/setup-consumers.sh

stage "clang-format"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
clang-format --dry-run --Werror $files

stage "build (warnings fatal)"
rm -rf build-ci build-ci-asan
meson setup build-ci --werror -Dbuildtype=debugoptimized >/dev/null
ninja -C build-ci

stage "unit and golden tests"
run_tests build-ci --suite unit --suite golden --print-errorlogs

stage "real consumers (go tool pprof, speedscope, Chromium)"
run_tests build-ci --suite consumers --print-errorlogs

stage "end-to-end tests"
run_tests build-ci --suite e2e --print-errorlogs --verbose

stage "installed (meson install into a staging root; e2e on 3.12 with the installed commands)"
bash tests/install/check-install.sh build-ci 3.12

stage "single-file static tools, recording in an empty root (new mount and PID namespaces)"
sh tests/static/check-static.sh --require-bpf

stage "Debian packages: build, lintian, install, record and report with the installed tools, purge"
# git archive reads the checkout; CI's checkout may belong to another user than root.
git config --global --get-all safe.directory | grep -qxF "$PWD" ||
  git config --global --add safe.directory "$PWD"
bash tests/deb/check-deb.sh

stage "sanitizers (address, undefined)"
meson setup build-ci-asan --werror -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
ninja -C build-ci-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
run_tests build-ci-asan --suite unit --suite golden --print-errorlogs
python3 tests/e2e/run_e2e.py --record build-ci-asan/record/pyflame-record \
  --report build-ci-asan/report/pyflame-report --only 3.12
for t in test_native test_async test_continuous test_live test_sets; do
  python3 tests/e2e/$t.py --record build-ci-asan/record/pyflame-record \
    --report build-ci-asan/report/pyflame-report --only 3.12
done

stage "ThreadSanitizer"
rm -rf build-ci-tsan
meson setup build-ci-tsan --werror -Db_sanitize=thread -Db_lundef=false >/dev/null
ninja -C build-ci-tsan
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
run_tests build-ci-tsan --suite unit --suite golden --print-errorlogs
python3 tests/e2e/run_e2e.py --record build-ci-tsan/record/pyflame-record \
  --report build-ci-tsan/report/pyflame-report --only 3.12
for t in test_native test_async test_continuous test_live test_sets; do
  python3 tests/e2e/$t.py --record build-ci-tsan/record/pyflame-record \
    --report build-ci-tsan/report/pyflame-report --only 3.12
done

stage "fuzzing with libFuzzer (fixed seeds; clang, ASan, UBSan): reports, --bpf decoding, the task walk, native unwinding, line tables"
rm -rf build-ci-fuzz
CC=clang meson setup build-ci-fuzz --werror -Dfuzz=true -Db_sanitize=address,undefined \
  -Db_lundef=false >/dev/null
ninja -C build-ci-fuzz
run_tests build-ci-fuzz --suite fuzz --print-errorlogs

stage "all tests passed in $SECONDS s"
