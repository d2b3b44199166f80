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
bash scripts/deps.sh
# The real consumers of our outputs: go tool pprof, speedscope and Chromium.
bash tests/export/setup-consumers.sh

echo "== clang-format"
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
clang-format --dry-run --Werror $files

echo "== build (warnings fatal)"
rm -rf build-ci build-ci-asan
meson setup build-ci --werror -Dbuildtype=debugoptimized >/dev/null
ninja -C build-ci

echo "== unit and golden tests"
run_tests build-ci --suite unit --suite golden --print-errorlogs

echo "== real consumers (go tool pprof, speedscope, Chromium)"
run_tests build-ci --suite consumers --print-errorlogs

echo "== end-to-end tests"
run_tests build-ci --suite e2e --print-errorlogs --verbose

echo "== installed (meson install into a staging root; e2e on 3.12 with the installed commands)"
bash tests/install/check-install.sh build-ci 3.12

echo "== single-file static tools, recording in an empty root (new mount and PID namespaces)"
sh tests/static/check-static.sh --require-bpf

echo "== Debian packages: build, lintian, install, record and report with the installed tools, purge"
# git archive reads the checkout; CI's checkout may belong to another user than root.
git config --global --get-all safe.directory | grep -qxF "$PWD" ||
  git config --global --add safe.directory "$PWD"
bash tests/deb/check-deb.sh

echo "== sanitizers (address, undefined)"
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

echo "== ThreadSanitizer"
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

echo "== fuzzing the report with libFuzzer (fixed seed; clang, ASan, UBSan)"
rm -rf build-ci-fuzz
CC=clang meson setup build-ci-fuzz --werror -Dfuzz=true -Db_sanitize=address,undefined \
  -Db_lundef=false >/dev/null
ninja -C build-ci-fuzz
run_tests build-ci-fuzz --suite fuzz --print-errorlogs

echo "== all tests passed"
