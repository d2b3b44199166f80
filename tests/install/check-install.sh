#!/usr/bin/env bash
# The tools as a distribution installs them: `meson install` of a build into
# a staging root (DESTDIR), every file where it belongs, a program built
# against the installed header and library, the SQLite extension loaded by
# sqlite3, and the end-to-end suite on one interpreter run with the
# installed commands. Exits non-zero on the first thing that is wrong.
#
#   tests/install/check-install.sh BUILD_DIR [E2E_ONLY]   (E2E_ONLY: 3.12 by default)
set -euo pipefail
build=${1:?usage: check-install.sh BUILD_DIR [E2E_ONLY]}
only=${2:-3.12}
here=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d /tmp/pyflame-stage.XXXXXX)
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage" # the e2e suite runs the recorder as another user too

opt() { # a meson option's value in this build
  meson introspect "$build" --buildoptions |
    python3 -c "import json,sys; print(next(o['value'] for o in json.load(sys.stdin) if o['name'] == '$1'))"
}
prefix=$(opt prefix) bindir=$(opt bindir) libdir=$(opt libdir) includedir=$(opt includedir)
datadir=$(opt datadir) mandir=$(opt mandir)
abs() { case $1 in /*) echo "$stage$1" ;; *) echo "$stage$prefix/$1" ;; esac; }

echo "== meson install --destdir $stage"
meson install -C "$build" --destdir "$stage" >/dev/null

fail=0
expect() {
  if [ -e "$1" ]; then echo "ok   installed ${1#"$stage"}"; else echo "FAIL missing ${1#"$stage"}"; fail=1; fi
}
bin=$(abs "$bindir") lib=$(abs "$libdir")
for f in pyflame-record pyflame-report pyflame-diff pyflame-top; do expect "$bin/$f"; done
expect "$lib/libpyflametrace.so"
expect "$lib/libpyflametrace.so.0"
expect "$lib/pkgconfig/pyflame-trace.pc"
expect "$lib/pyflame/pyflame_sqlite.so"
expect "$(abs "$includedir")/pyflame/trace.h"
expect "$(abs "$datadir")/pyflame/trace.sql"
for f in ci-compare.sh pyroscope-push.sh; do
  expect "$(abs "$datadir")/pyflame/scripts/$f"
  [ -x "$(abs "$datadir")/pyflame/scripts/$f" ] || { echo "FAIL not executable: $f"; fail=1; }
done
for f in pyflame-record pyflame-report pyflame-diff pyflame-top; do expect "$(abs "$mandir")/man1/$f.1"; done
for f in pyflame-record pyflame-report pyflame-diff; do
  if [ -d "$(abs "$datadir")/bash-completion" ] || [ -d "$here/completions" ]; then
    expect "$(abs "$datadir")/bash-completion/completions/$f"
    expect "$(abs "$datadir")/zsh/vendor-completions/_$f"
  fi
done
# pyflame-top is pyflame-record --live: bash needs its own file, zsh's _pyflame-record serves both.
if [ -d "$(abs "$datadir")/bash-completion" ] || [ -d "$here/completions" ]; then
  expect "$(abs "$datadir")/bash-completion/completions/pyflame-top"
fi
[ $fail = 0 ] || exit 1

# The installed programs find the installed library (the staging root is not
# where the loader looks).
export LD_LIBRARY_PATH="$lib"
"$bin/pyflame-record" --version | head -1

echo "== a recording with the installed recorder, read through the installed library"
work="$stage/work"
mkdir -p "$work"
cat >"$work/burn.py" <<'PY'
import time
def burn_cpu(until):
    while time.time() < until:
        pass
burn_cpu(time.time() + 1.5)
PY
py=$(command -v python3)
"$bin/pyflame-record" -q -o "$work/run.db" -- "$py" "$work/burn.py"
"$bin/pyflame-report" --by-function "$work/run.db" | tee "$work/report.txt" | head -5
grep -q burn_cpu "$work/report.txt" || { echo "FAIL burn_cpu not in the installed report"; exit 1; }
echo "ok   the installed report names burn_cpu"

cat >"$work/count.c" <<'C'
#include <pyflame/trace.h>
#include <stdio.h>
int main(int argc, char **argv)
{
        struct trace_reader *r = NULL;
        struct trace_summary s;
        if (argc < 2 || trace_reader_open(argv[1], &r) < 0 || trace_reader_summary(r, &s) < 0)
                return 1;
        printf("%llu\n", (unsigned long long)s.samples);
        trace_reader_close(r);
        return 0;
}
C
cc -o "$work/count" "$work/count.c" -I"$(abs "$includedir")" -L"$lib" -lpyflametrace
n=$("$work/count" "$work/run.db")
[ "$n" -gt 50 ] || { echo "FAIL the installed library read $n samples"; exit 1; }
echo "ok   a program built against the installed header and library reads $n samples"

if command -v sqlite3 >/dev/null; then
  m=$(sqlite3 "$work/run.db" -cmd ".load $lib/pyflame/pyflame_sqlite" 'SELECT count(*) FROM pyflame_samples')
  [ "$m" = "$n" ] || { echo "FAIL the installed SQLite extension counts $m samples, not $n"; exit 1; }
  echo "ok   the installed SQLite extension counts the same $m samples"
fi

echo "== end-to-end suite on $only with the installed commands"
python3 "$here/tests/e2e/run_e2e.py" --record "$bin/pyflame-record" \
  --report "$bin/pyflame-report" --only "$only"
