#!/usr/bin/env bash
# check-deb.sh - the Debian packages (debian/) built, linted, installed and
# used, then removed again. CI runs it as root on Debian 12; so can you.
#
#  1. builds the source and binary packages with dpkg-buildpackage from a
#     clean copy of the committed tree (git archive HEAD: build directories
#     and uncommitted changes in the checkout play no part) in a temporary
#     directory;
#  2. runs lintian on the result and fails on any error;
#  3. installs pyflame, libpyflametrace0 and libpyflametrace-dev with apt-get;
#  4. records a small CPU-bound Python program with the installed
#     /usr/bin/pyflame-record and checks that /usr/bin/pyflame-report,
#     pyflame-diff and the SQLite extension see its hot function;
#  5. compiles a C program against the installed development package
#     (pkg-config pyflame-trace) that opens the trace with trace_reader_open
#     and prints its sample count, which must match pyflame-report info;
#  6. purges every package step 3 installed, leaving the machine's package
#     set as it was, and removes the temporary directory.
#
# Exits non-zero on the first failure. Environment:
#   DEB_BUILD_OPTIONS  passed to dpkg-buildpackage; default "nocheck" (the
#                      unit and golden suites are CI's own step; set it to ""
#                      to run them inside the package build as well)
#   JOBS               parallel build jobs (default 2)
#   KEEP=1             keep the temporary directory (packages, logs)
#
# Needs (apt-get install): dpkg-dev debhelper lintian xz-utils git, the package's
# build dependencies (scripts/deps.sh installs them), gcc and pkg-config.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${JOBS:-2}
pkgs=(pyflame libpyflametrace0 libpyflametrace-dev)
start=$SECONDS

say() { printf '%s\n' "check-deb: $*"; }
fail() {
        printf '%s\n' "check-deb: FAIL: $*" >&2
        exit 1
}
ok() { printf '%s\n' "check-deb: ok: $*"; }

[[ $(id -u) == 0 ]] || fail "must run as root (it installs and purges packages with apt-get)"
for tool in dpkg-buildpackage dpkg-checkbuilddeps dh lintian apt-get git xz cc pkg-config python3; do
        command -v "$tool" >/dev/null ||
                fail "$tool not found: apt-get install dpkg-dev debhelper lintian xz-utils git gcc pkg-config python3"
done
for p in "${pkgs[@]}"; do
        if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed'; then
                fail "$p is already installed; this check installs and purges it, so remove it first: apt-get purge ${pkgs[*]}"
        fi
done

tmp=$(mktemp -d /tmp/pyflame-check-deb.XXXXXX)
installed_new=()
cleanup() {
        local rc=$?
        if ((${#installed_new[@]})); then
                say "purging ${installed_new[*]}"
                DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${installed_new[@]}" >"$tmp/purge.log" 2>&1 ||
                        { cat "$tmp/purge.log" >&2; rc=1; }
        fi
        if [[ ${KEEP:-} == 1 ]]; then
                say "kept $tmp"
        else
                rm -rf "$tmp"
        fi
        exit "$rc"
}
trap cleanup EXIT

# --- 1. build -------------------------------------------------------------
# Source format 3.0 (quilt): the upstream tarball is the tree without
# debian/, the source package's debian.tar.xz holds debian/.
mkdir "$tmp/src"
git -C "$root" archive --format=tar HEAD | tar -xf - -C "$tmp/src"
upstream=$(cd "$tmp/src" && dpkg-parsechangelog -S Version | sed 's/-[^-]*$//')
git -C "$root" archive --format=tar --prefix="pyflame-$upstream/" HEAD -- . ':!debian' |
        xz -T"$jobs" >"$tmp/pyflame_$upstream.orig.tar.xz"
if [[ -n $(git -C "$root" status --porcelain --untracked-files=no) ]]; then
        say "note: the checkout has uncommitted changes; building HEAD without them"
fi
say "building packages of $(git -C "$root" rev-parse --short HEAD) in $tmp (DEB_BUILD_OPTIONS='${DEB_BUILD_OPTIONS-nocheck}', $jobs jobs)"
(cd "$tmp/src" && dpkg-checkbuilddeps) ||
        fail "build dependencies missing (see above): apt-get install them, or run scripts/deps.sh"
if ! (cd "$tmp/src" &&
        DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS-nocheck} parallel=$jobs" \
                dpkg-buildpackage -us -uc) >"$tmp/build.log" 2>&1; then
        tail -n 60 "$tmp/build.log" >&2
        fail "dpkg-buildpackage failed (last 60 lines above; KEEP=1 keeps $tmp/build.log)"
fi
changes=$(echo "$tmp"/pyflame_*.changes)
[[ -f $changes ]] || fail "no .changes file in $tmp"
for p in "${pkgs[@]}"; do
        deb=$(echo "$tmp/${p}"_*.deb)
        [[ -f $deb ]] || fail "package $p was not built"
        ok "built $(basename "$deb")"
done

# --- 2. lintian -----------------------------------------------------------
# The source package and the binaries, through the .changes file. Lintian
# warns when run as root; the warning is its own, not the packages'.
say "lintian $(basename "$changes")"
if ! lintian --fail-on error --info --display-info "$changes" >"$tmp/lintian.log" 2>&1; then
        cat "$tmp/lintian.log" >&2
        fail "lintian reported errors"
fi
grep -v 'running with root privileges' "$tmp/lintian.log" | sed 's/^/  /' || true
ok "lintian: $(grep -c '^E:' "$tmp/lintian.log" || true) errors, $(grep -c '^W:' "$tmp/lintian.log" || true) warnings"

# --- 3. install -----------------------------------------------------------
dpkg-query -W -f='${Package}:${Architecture}\n' | sort >"$tmp/before.txt"
say "installing ${pkgs[*]}"
install_rc=0
(cd "$tmp" && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        ./pyflame_*.deb ./libpyflametrace0_*.deb ./libpyflametrace-dev_*.deb) >"$tmp/install.log" 2>&1 ||
        install_rc=$?
# Whatever got installed, even by a failed attempt, is purged on exit.
dpkg-query -W -f='${Package}:${Architecture}\n' | sort >"$tmp/after.txt"
mapfile -t installed_new < <(comm -13 "$tmp/before.txt" "$tmp/after.txt")
if ((install_rc)); then
        cat "$tmp/install.log" >&2
        fail "apt-get install of the packages failed"
fi
ok "installed: ${installed_new[*]}"
for f in /usr/bin/pyflame-record /usr/bin/pyflame-report /usr/bin/pyflame-diff /usr/bin/pyflame-top \
        /usr/share/pyflame/trace.sql /usr/share/man/man1/pyflame-record.1.gz \
        /usr/share/man/man1/pyflame-report.1.gz /usr/share/man/man1/pyflame-diff.1.gz \
        /usr/share/bash-completion/completions/pyflame-record \
        /usr/share/zsh/vendor-completions/_pyflame-record /usr/include/pyflame/trace.h; do
        [[ -e $f ]] || fail "$f not installed"
done
for f in /usr/share/pyflame/scripts/ci-compare.sh /usr/share/pyflame/scripts/pyroscope-push.sh; do
        [[ -x $f ]] || fail "$f not installed executable"
done
/usr/share/pyflame/scripts/ci-compare.sh --help >/dev/null ||
        fail "the installed ci-compare.sh does not run"
ok "tools, man pages, completions, schema, header and scripts in place"

# --- 4. record and report with the installed tools ------------------------
cd "$tmp"
cat >burn.py <<'EOF'
import time


def pyflame_check_hot(deadline):
    n = 0
    while time.monotonic() < deadline:
        n += sum(i * i for i in range(1000))
    return n


pyflame_check_hot(time.monotonic() + 1.5)
EOF
# Debian's own interpreter when there is one (PATH may lead to another).
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3)
say "/usr/bin/pyflame-record -o $tmp/x.db -- $py burn.py"
/usr/bin/pyflame-record -o "$tmp/x.db" -- "$py" burn.py >record.log 2>&1 ||
        { cat record.log >&2; fail "pyflame-record failed"; }
/usr/bin/pyflame-report --by-function x.db >report.txt 2>&1 ||
        { cat report.txt >&2; fail "pyflame-report failed"; }
grep -q pyflame_check_hot report.txt ||
        { cat report.txt >&2; fail "pyflame-report --by-function does not show pyflame_check_hot"; }
ok "pyflame-report --by-function shows the hot function:"
head -n 5 report.txt | sed 's/^/  /'
/usr/bin/pyflame-diff x.db x.db >diff.txt 2>&1 ||
        { cat diff.txt >&2; fail "pyflame-diff of a trace against itself failed"; }
grep -q 'no significant change' diff.txt ||
        { cat diff.txt >&2; fail "pyflame-diff finds changes between a trace and itself"; }
ok "pyflame-diff of the trace against itself: no significant change"
report_samples=$(/usr/bin/pyflame-report info --format json x.db |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["samples"])') ||
        fail "pyflame-report info --format json has no sample count"

# The SQLite extension, when the sqlite3 shell is there to load it.
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
ext=/usr/lib/$multiarch/pyflame/pyflame_sqlite
[[ -f $ext.so ]] || fail "$ext.so not installed"
if command -v sqlite3 >/dev/null; then
        ext_samples=$(sqlite3 x.db ".load $ext" 'SELECT count(*) FROM pyflame_samples;') ||
                fail "sqlite3 cannot load $ext or query pyflame_samples"
        [[ $ext_samples == "$report_samples" ]] ||
                fail "pyflame_samples has $ext_samples rows, pyflame-report info says $report_samples samples"
        ok "the SQLite extension loads and pyflame_samples has all $ext_samples samples"
else
        say "skipped: the SQLite extension (no sqlite3 shell; apt-get install sqlite3)"
fi

# --- 5. a C program against the installed development package -------------
cat >count.c <<'EOF'
/* Prints the number of samples in a pyflame trace (installed-package check). */
#include <inttypes.h>
#include <stdio.h>
#include <trace.h>

int main(int argc, char **argv)
{
        struct trace_reader *r = NULL;
        struct trace_summary s;
        int rc;

        if (argc != 2)
                return 2;
        rc = trace_reader_open(argv[1], &r);
        if (rc < 0) {
                fprintf(stderr, "%s: %s\n", argv[1], r ? trace_reader_errmsg(r) : trace_status_str(rc));
                trace_reader_close(r);
                return 1;
        }
        rc = trace_reader_summary(r, &s);
        if (rc < 0) {
                fprintf(stderr, "%s: %s\n", argv[1], trace_reader_errmsg(r));
                trace_reader_close(r);
                return 1;
        }
        printf("%" PRIu64 "\n", s.samples);
        trace_reader_close(r);
        return 0;
}
EOF
flags=$(pkg-config --cflags --libs pyflame-trace) || fail "pkg-config does not know pyflame-trace"
say "cc count.c $flags"
# shellcheck disable=SC2086 # pkg-config's output is a list of words
cc -std=c11 -Wall -Werror -o count count.c $flags || fail "count.c does not build against libpyflametrace-dev"
# The library the loader picks must be the one libpyflametrace0 installed
# (/lib may be a link to /usr/lib, hence realpath).
lib=$(ldd ./count | sed -n 's/^[[:space:]]*libpyflametrace\.so\.0 => \(.*\) (0x.*$/\1/p')
if [[ -z $lib ]] || ! dpkg -S "$(realpath "$lib")" 2>/dev/null | grep -q '^libpyflametrace0'; then
        ldd ./count >&2
        fail "count does not load libpyflametrace.so.0 from the libpyflametrace0 package"
fi
ok "count loads $(realpath "$lib") of package libpyflametrace0"
c_samples=$(./count x.db) || fail "count x.db failed"
[[ $c_samples =~ ^[0-9]+$ && $c_samples -gt 0 ]] || fail "count x.db printed '$c_samples', expected a positive count"
[[ $c_samples == "$report_samples" ]] ||
        fail "trace_reader_summary counts $c_samples samples, pyflame-report info says $report_samples"
ok "a program built with pkg-config pyflame-trace reads $c_samples samples (pyflame-report info: $report_samples)"

# --- 6. remove ------------------------------------------------------------
cd /
say "purging ${installed_new[*]}"
DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${installed_new[@]}" >"$tmp/purge.log" 2>&1 ||
        { cat "$tmp/purge.log" >&2; fail "apt-get purge failed"; }
installed_new=()
dpkg-query -W -f='${Package}:${Architecture}\n' | sort >"$tmp/final.txt"
cmp -s "$tmp/before.txt" "$tmp/final.txt" ||
        { diff "$tmp/before.txt" "$tmp/final.txt" >&2; fail "the installed package set differs from before the check"; }
[[ ! -e /usr/bin/pyflame-record && ! -e /usr/include/pyflame/trace.h ]] || fail "files left after purge"
ok "packages purged; installed package set as before"
say "all checks passed in $((SECONDS - start)) s"
