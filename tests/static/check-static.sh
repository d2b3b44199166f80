#!/bin/sh
# The static pyflame-record (-Dstatic=true) on a machine that has nothing of
# pyflame: in new mount and PID namespaces whose root is an empty tmpfs
# holding only the recorder, a Python interpreter (its binary, libpython and
# the C library it needs, copied) and its standard library (bind-mounted
# read-only), it records a CPU-burning program for about 2 s into /out (a
# writable bind mount). Outside the namespaces, pyflame-report reads the
# trace and must find the hot function.
#
#   tests/static/check-static.sh [--require-bpf] [RECORD [REPORT]]
#
# Without RECORD, builds the static tools into build-static (meson setup
# --werror -Dstatic=true -Dtests=false, then ninja) and uses them. REPORT
# defaults to the pyflame-report next to RECORD's build dir. --require-bpf
# fails unless the in-context reads (the BPF program) were on in the
# namespace; without it their state is printed only, as hosts without BPF
# fall back to reads from outside. PYTHON picks the interpreter (default:
# the newest pyenv one with a shared libpython). Needs root (namespaces,
# mounts). Exits non-zero on the first failed check.
set -eu

# The part that runs in the new namespaces: mount a tmpfs as the root, copy
# the recorder, the interpreter and its libraries into it, bind-mount the
# standard library (read-only) and /out (writable), mount /proc, chroot and
# record. Everything mounted here goes away with the mount namespace.
if [ "${1:-}" = "--in-namespace" ]; then
        root=$2 record=$3 python=$4 stdlib=$5 ver=$6 out=$7 prog=$8 libs=$9
        mount -t tmpfs -o mode=0755 pyflame-static "$root"
        mkdir -p "$root/py/bin" "$root/py/lib/python$ver" "$root/out" "$root/proc" "$root/tmp"
        chmod 1777 "$root/tmp"
        cp "$record" "$root/pyflame-record"
        cp "$python" "$root/py/bin/python3"
        cp "$prog" "$root/prog.py"
        ldpath=
        for lib in $libs; do
                mkdir -p "$root$(dirname "$lib")"
                cp -L "$lib" "$root$lib"
                ldpath="$ldpath${ldpath:+:}$(dirname "$lib")"
        done
        mount --bind "$stdlib" "$root/py/lib/python$ver"
        mount -o remount,bind,ro "$root/py/lib/python$ver"
        mount --bind "$out" "$root/out"
        mount -t proc proc "$root/proc"
        echo "check-static: the root holds (files; the recorder is PID $$ here):"
        (cd "$root" && find . -path ./proc -prune -o -path "./py/lib/python$ver" -prune -o \
                -type f -print | sort | sed "s/^/    /")
        echo "    ./py/lib/python$ver (bind mount, read-only: the standard library)"
        echo "    ./proc (this PID namespace's), ./out (bind mount, writable), ./tmp (empty)"
        # libpython sits at the path ldd found it at, which is not in the
        # loader's default path: name the libraries' directories.
        exec env -i PATH=/py/bin LD_LIBRARY_PATH="$ldpath" HOME=/tmp \
                /usr/sbin/chroot "$root" /pyflame-record -o /out/run.db -- python3 /prog.py
fi

require_bpf=0
if [ "${1:-}" = "--require-bpf" ]; then
        require_bpf=1
        shift
fi
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ $# -ge 1 ]; then
        record=$(realpath "$1")
        report=$(realpath "${2:-$(dirname "$record")/../report/pyflame-report}")
else
        build="$src/build-static"
        if [ ! -f "$build/build.ninja" ]; then
                meson setup "$build" "$src" --werror -Dstatic=true -Dtests=false
        fi
        ninja -C "$build" -j"${JOBS:-2}" record/pyflame-record report/pyflame-report report/pyflame-diff
        record="$build/record/pyflame-record"
        report="$build/report/pyflame-report"
fi

fail() {
        echo "check-static: FAIL: $*" >&2
        exit 1
}
ok() {
        echo "check-static: ok: $*"
}

[ "$(id -u)" = 0 ] || fail "needs root (unshare --mount --pid, mount, chroot)"
[ -x "$record" ] || fail "no recorder at $record"
[ -x "$report" ] || fail "no pyflame-report at $report"

# 1. Static: no interpreter (PT_INTERP), no shared libraries.
for bin in "$record" "$report" "$(dirname "$report")/pyflame-diff"; do
        [ -e "$bin" ] || continue
        out=$(ldd "$bin" 2>&1 || true)
        case "$out" in
        *"not a dynamic executable"*) ;;
        *) fail "ldd $bin: $out" ;;
        esac
        file "$bin" | grep -q "statically linked" || fail "file $bin: $(file -b "$bin")"
        # The sizes the README quotes: as built, stripped, and stripped and gzipped.
        stripped=$(mktemp)
        strip -o "$stripped" "$bin"
        ok "$(basename "$bin") is static ($(stat -c %s "$bin") bytes, $(stat -c %s "$stripped") stripped, $(gzip -9c "$stripped" | wc -c) gzipped; ldd: not a dynamic executable)"
        rm -f "$stripped"
done

# 2. An interpreter to copy into the empty root: a pyenv build with a shared
# libpython (Debian's /usr/bin/python3.11 needs libz, one of pyflame's own
# dependencies, which must not be in the root).
if [ -z "${PYTHON:-}" ]; then
        for p in $(find "$HOME/.pyenv/versions" -mindepth 1 -maxdepth 1 -name '3.*' 2>/dev/null | sort -V -r); do
                if ls "$p"/lib/libpython3.*.so.1.0 >/dev/null 2>&1; then
                        PYTHON="$p/bin/python3"
                        break
                fi
        done
fi
if [ -z "${PYTHON:-}" ] || [ ! -x "$PYTHON" ]; then
        fail "no interpreter: set PYTHON to a python3 with a shared libpython"
fi
PYTHON=$(realpath "$PYTHON")
prefix=$("$PYTHON" -c 'import sys; print(sys.base_prefix)')
ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
stdlib="$prefix/lib/python$ver"
[ -f "$stdlib/os.py" ] || fail "no standard library at $stdlib"

work=$(mktemp -d /tmp/pyflame-static.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/root" "$work/out"
chmod 0777 "$work/out"
cat >"$work/prog.py" <<'EOF'
import time


def hot_function(deadline):
    n = 0
    while time.monotonic() < deadline:
        for i in range(1000):
            n += i * i
    return n


def main():
    hot_function(time.monotonic() + 2.0)


main()
EOF

# The libraries the interpreter loads, from ldd (the dynamic loader too).
libs=$(ldd "$PYTHON" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
for lib in $libs; do
        case "$(basename "$lib")" in
        libsqlite3* | libelf* | libarchive* | libz.* | libbpf* | libzstd* | liblzma* | libbz2* | liblz4* | libxml2* | libnettle* | libacl* | libpyflame*)
                fail "the interpreter needs $lib, one of pyflame's dependencies: pick another PYTHON" ;;
        esac
done
libs=$(echo "$libs" | tr '\n' ' ')
echo "check-static: interpreter $PYTHON (Python $ver), libraries: $libs"

# 3. Record inside the namespaces: this script again, with --in-namespace
# (above), as PID 1 of a new PID namespace in a new mount namespace. It
# mounts its own /proc in the new root rather than using unshare's
# --mount-proc, whose /proc the tmpfs root would not contain.
set +e
unshare --mount --pid --fork --propagation private \
        sh "$0" --in-namespace "$work/root" "$record" "$PYTHON" "$stdlib" "$ver" \
        "$work/out" "$work/prog.py" "$libs"
rc=$?
set -e
[ $rc = 0 ] || fail "pyflame-record in the namespaces exited with $rc"
[ -s "$work/out/run.db" ] || fail "no trace at /out/run.db"
ok "recorded in new mount and PID namespaces: $(stat -c %s "$work/out/run.db") bytes"

# 4. Outside: the report finds the hot function.
info=$("$report" info "$work/out/run.db") || fail "pyflame-report info failed"
echo "$info" | sed -n '/^meta:/q; s/^/    /p'
top=$("$report" report --by-function --top 5 "$work/out/run.db" 2>&1) || fail "pyflame-report report failed: $top"
echo "$top" | sed 's/^/    /'
echo "$top" | grep -q "hot_function" || fail "hot_function is not in pyflame-report --by-function"
ok "pyflame-report --by-function finds hot_function"
# The recorder stored prog.py's text, read through the target's root.
src=$("$report" annotate --source /prog.py "$work/out/run.db" 2>&1) || fail "pyflame-report annotate failed: $src"
echo "$src" | grep -q "n += i \* i" || fail "annotate /prog.py does not show the stored source: $src"
ok "the trace holds /prog.py's source (annotate)"

# The BPF program (libbpf linked statically) loaded and attached: the meta
# key capture is "on", else "off: why". How many samples it then read in the
# thread's own context depends on the load of the machine (a preempted
# thread is read from outside), so that count is printed, not checked.
capture=$(echo "$info" | sed -n 's/^ *capture = //p')
captured=$(echo "$info" | sed -n 's/^ *captured_samples = //p')
if [ "$capture" = on ]; then
        ok "BPF in-context reads were on in the namespaces (${captured:-?} samples read in the thread's context)"
elif [ $require_bpf = 1 ]; then
        fail "BPF in-context reads were not on: ${capture:-no capture key in the trace}"
else
        echo "check-static: note: BPF in-context reads were not on: ${capture:-no capture key in the trace}"
fi
echo "check-static: PASS"
