#!/usr/bin/env bash
# The shell steps of a CI regression gate, for any CI: record a benchmark on
# a base git ref and on the current checkout, several runs per side, merge
# each side's runs, and let pyflame-diff decide. The merged traces, the
# markdown comment and the logs stay in an output directory for the CI to
# keep as artifacts and post. The CI files in examples/ci/ call this script;
# they add only what is CI-specific.
#
# Each side is a temporary git worktree, and each is renamed to one and the
# same path for its runs: pyflame-diff matches rows by function, file and
# line, so a function recorded from two different paths would be two rows
# (each "new" on its side) and nothing would compare. Runs alternate between
# the sides (base 1, new 1, base 2, ...), so a machine that gets busier or
# quieter during the job weighs on both sides alike.
set -uo pipefail

prog=ci-compare.sh
usage() {
  cat <<'EOF'
Usage: ci-compare.sh --base REF [OPTIONS] -- COMMAND [ARGS...]
Record COMMAND (a benchmark) with pyflame-record on the git ref REF and on
the current checkout, RUNS times each, merge each side's runs with
pyflame-report merge, and compare them with pyflame-diff --format markdown
and the --fail-on rules.

Each side is checked out in a temporary git worktree (the current checkout's
side: its HEAD with its uncommitted changes to tracked files; untracked and
ignored files are in neither side), and COMMAND runs from its top with
PYFLAME_CI_SIDE=base or new, both sides from the same path, so that
pyflame-diff matches their files. COMMAND must run the code of the tree it
starts in, not a copy installed elsewhere, or both sides measure the same;
build what it needs there with --setup.

  -b, --base REF         the base: a branch, tag or commit (required), e.g.
                         origin/main; fetch it first (a shallow clone lacks it)
  -n, --runs N           runs per side (default 5). The diff measures the
                         variation between runs from them, with few degrees
                         of freedom when they are few: with 3 a side, a
                         function going from 22% to 50% of the samples in
                         every run was not significant in 1 comparison of 3
      --fail-on RULE     pyflame-diff gate rule, repeatable (default
                         self:+5pp and total:+20%), e.g. self:+3pp,
                         total:+20%; see pyflame-diff --help
  -o, --out DIR          output directory (default pyflame-ci): base.db and
                         new.db (merged), comment.md, gate.txt, logs/
  -C, --dir SUBDIR       run COMMAND in SUBDIR of each tree (default its top)
      --setup SHELLCMD   run SHELLCMD (with bash -c) once in each tree before
                         its runs, e.g. 'make' or 'python3 setup.py build_ext
                         --inplace'
  -r, --rate HZ          pyflame-record's sampling rate (default its own)
      --record-arg ARG   pass ARG to pyflame-record, repeatable
      --diff-arg ARG     pass ARG to pyflame-diff, repeatable
                         (e.g. --diff-arg --thread --diff-arg MainThread)
      --keep-runs        keep every run's trace in DIR/runs/
      --record PATH      pyflame-record to use (default: $PYFLAME_RECORD, or
                         pyflame-record on PATH); likewise:
      --report PATH      pyflame-report ($PYFLAME_REPORT)
      --diff PATH        pyflame-diff ($PYFLAME_DIFF)
  -h, --help             this help

Exit status: 0 the gate passed; 1 a rule tripped (a significant regression,
named in gate.txt and comment.md); 2 a usage error (bad option, a tool or
the ref not found); 3 the benchmark, its setup or the recorder failed (see
DIR/logs/); 4 merging or comparing failed.
EOF
}

die() { # status message...
  local status=$1
  shift
  printf '%s: %s\n' "$prog" "$*" >&2
  exit "$status"
}

base_ref='' runs=5 out=pyflame-ci subdir='' setup='' rate='' keep_runs=0
rules=() record_args=() diff_args=()
record_bin=${PYFLAME_RECORD:-} report_bin=${PYFLAME_REPORT:-} diff_bin=${PYFLAME_DIFF:-}

need_arg() { # option count
  [ "$2" -ge 2 ] || die 2 "option $1 needs a value (see --help)"
}
while [ $# -gt 0 ]; do
  case $1 in
    -b | --base) need_arg "$1" $#; base_ref=$2; shift 2 ;;
    -n | --runs) need_arg "$1" $#; runs=$2; shift 2 ;;
    --fail-on) need_arg "$1" $#; rules+=(--fail-on "$2"); shift 2 ;;
    -o | --out) need_arg "$1" $#; out=$2; shift 2 ;;
    -C | --dir) need_arg "$1" $#; subdir=$2; shift 2 ;;
    --setup) need_arg "$1" $#; setup=$2; shift 2 ;;
    -r | --rate) need_arg "$1" $#; rate=$2; shift 2 ;;
    --record-arg) need_arg "$1" $#; record_args+=("$2"); shift 2 ;;
    --diff-arg) need_arg "$1" $#; diff_args+=("$2"); shift 2 ;;
    --keep-runs) keep_runs=1; shift ;;
    --record) need_arg "$1" $#; record_bin=$2; shift 2 ;;
    --report) need_arg "$1" $#; report_bin=$2; shift 2 ;;
    --diff) need_arg "$1" $#; diff_bin=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) die 2 "unknown option '$1'; the benchmark command goes after '--' (see --help)" ;;
  esac
done
[ $# -gt 0 ] || die 2 "no benchmark command: put it after '--', e.g. -- python3 bench.py"
[ -n "$base_ref" ] || die 2 "no base: pass --base REF, e.g. --base origin/main"
case $runs in
  '' | *[!0-9]* | 0*) die 2 "--runs '$runs' is not a positive whole number" ;;
esac
[ ${#rules[@]} -gt 0 ] || rules=(--fail-on self:+5pp --fail-on total:+20%)
[ -z "$rate" ] || record_args+=(-r "$rate")

find_tool() { # name given-path env-var
  local path=$2
  if [ -z "$path" ]; then
    path=$(command -v "$1") ||
      die 2 "$1 not found on PATH: install pyflame (build it with meson and" \
        "'ninja install', or install its .deb), or pass --${1#pyflame-} PATH or set $3"
  fi
  if [ ! -x "$path" ] || [ -d "$path" ]; then
    die 2 "$1 '$path' is not an executable file: fix --${1#pyflame-} or $3"
  fi
  # Absolute, since the benchmark runs from other directories.
  case $path in /*) ;; *) path=$PWD/$path ;; esac
  printf '%s\n' "$path"
}
record_bin=$(find_tool pyflame-record "$record_bin" PYFLAME_RECORD) || exit
report_bin=$(find_tool pyflame-report "$report_bin" PYFLAME_REPORT) || exit
diff_bin=$(find_tool pyflame-diff "$diff_bin" PYFLAME_DIFF) || exit

top=$(git rev-parse --show-toplevel 2>/dev/null) ||
  die 2 "$PWD is not in a git checkout: run $prog from the checkout of the change"
base_commit=$(git rev-parse --verify --quiet "$base_ref^{commit}") ||
  die 2 "cannot find the base '$base_ref' in this checkout: fetch it (git fetch origin" \
    "<branch>; with actions/checkout, fetch-depth: 0; with GitLab, GIT_DEPTH: 0)"
base_desc=${base_commit:0:10}
[ "$base_ref" = "$base_commit" ] || base_desc="$base_desc ($base_ref)"
new_commit=$(git -C "$top" rev-parse HEAD)
new_desc=${new_commit:0:10}
if [ -n "$(git -C "$top" status --porcelain --untracked-files=no)" ]; then
  # A commit of the working tree that no branch points to; nothing changes.
  new_commit=$(git -C "$top" -c user.name=ci-compare -c user.email=ci-compare@localhost \
    stash create "ci-compare: the uncommitted changes") ||
    die 2 "cannot take the uncommitted changes of $top (git stash create failed)"
  new_desc="$new_desc with uncommitted changes"
fi

mkdir -p "$out" || die 2 "cannot create the output directory '$out'"
out=$(cd "$out" && pwd)
mkdir -p "$out/logs" "$out/runs" || die 2 "cannot write in '$out'"
rm -f "$out"/base.db "$out"/new.db "$out"/comment.md "$out"/gate.txt "$out"/runs/*.db

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pyflame-ci.XXXXXX") || die 2 "cannot create a temporary directory"
# Where every run runs; a side's tree is renamed to it and back (place).
src=$tmp/$(basename "$top") placed=''
# shellcheck disable=SC2317 # called by the trap
cleanup() {
  [ -z "$placed" ] || mv "$src" "$tmp/$placed"
  for side in base new; do
    if [ -d "$tmp/$side" ]; then
      git -C "$top" worktree remove --force "$tmp/$side" >/dev/null 2>&1 ||
        { rm -rf "${tmp:?}/$side" && git -C "$top" worktree prune; }
    fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

place() { # side, or '' to put the placed side back
  if [ -n "$placed" ]; then
    mv "$src" "$tmp/$placed" || die 2 "cannot rename $src back to $tmp/$placed"
    placed=''
  fi
  if [ -n "$1" ]; then
    mv "$tmp/$1" "$src" || die 2 "cannot rename $tmp/$1 to $src"
    placed=$1
  fi
}

for side in base new; do
  commit=$base_commit
  [ $side = base ] || commit=$new_commit
  git -C "$top" worktree add --detach "$tmp/$side" "$commit" >"$out/logs/worktree-$side.log" 2>&1 ||
    die 2 "cannot check out the $side side (${commit:0:10}) in a temporary worktree" \
      "($(tail -n 1 "$out/logs/worktree-$side.log"))"
done

printf '%s: base %s, new %s; %d runs each of: %s\n' "$prog" "$base_desc" "$new_desc" \
  "$runs" "$*" >&2

if [ -n "$setup" ]; then
  for side in base new; do
    place $side
    printf '%s: setting up the %s side: %s\n' "$prog" $side "$setup" >&2
    (cd "$src" && PYFLAME_CI_SIDE=$side bash -c "$setup") >"$out/logs/setup-$side.log" 2>&1 || {
      tail -n 20 "$out/logs/setup-$side.log" >&2
      die 3 "--setup failed on the $side side (whole output in $out/logs/setup-$side.log)"
    }
  done
  place ''
fi

record_run() { # side index command...
  local side=$1 i=$2 status
  shift 2
  local dir=$src${subdir:+/$subdir}
  local trace=$out/runs/$side-$i.db log=$out/logs/$side-$i.log
  place "$side"
  [ -d "$dir" ] || die 3 "the $side side has no directory '$subdir' (--dir)"
  printf '%s: recording %s run %d of %d\n' "$prog" "$side" "$i" "$runs" >&2
  (cd "$dir" && PYFLAME_CI_SIDE=$side \
    "$record_bin" -q -f "${record_args[@]}" -o "$trace" -- "$@") >"$log" 2>&1
  status=$?
  place ''
  if [ $status -ne 0 ] || [ ! -s "$trace" ]; then
    tail -n 20 "$log" >&2
    die 3 "the benchmark failed on the $side side, run $i (status $status; whole output in" \
      "$log). If it fails only on the base, the command may not exist there yet:" \
      "compare against a base that has it"
  fi
}

for ((i = 1; i <= runs; i++)); do
  record_run base "$i" "$@"
  record_run new "$i" "$@"
done

for side in base new; do
  traces=()
  for ((i = 1; i <= runs; i++)); do traces+=("$out/runs/$side-$i.db"); done
  "$report_bin" merge -f -o "$out/$side.db" "${traces[@]}" >"$out/logs/merge-$side.log" 2>&1 ||
    die 4 "merging the $side runs failed: $(tail -n 3 "$out/logs/merge-$side.log")"
done
[ $keep_runs -eq 1 ] || rm -f "$out"/runs/*.db

# From the output directory, so the comment names base.db and new.db, not
# temporary paths.
(cd "$out" && "$diff_bin" --format markdown "${rules[@]}" "${diff_args[@]}" \
  -o diff.md base.db new.db) 2>"$out/gate.txt"
status=$?
if [ $status -gt 1 ] || [ ! -f "$out/diff.md" ]; then
  cat "$out/gate.txt" >&2
  die 4 "pyflame-diff failed (status $status): see above"
fi
{
  printf '<!-- pyflame-ci-compare -->\n'
  # shellcheck disable=SC2016 # the backquotes are markdown
  printf '**pyflame**: `%s` on base `%s` and on `%s`, %d runs each.\n\n' \
    "$*" "$base_desc" "$new_desc" "$runs"
  cat "$out/diff.md"
} >"$out/comment.md"
rm -f "$out/diff.md"
cat "$out/comment.md"
cat "$out/gate.txt" >&2
if [ $status -eq 1 ]; then
  printf '%s: regression: a --fail-on rule tripped (comment in %s/comment.md)\n' "$prog" "$out" >&2
else
  printf '%s: gate passed (comment in %s/comment.md)\n' "$prog" "$out" >&2
fi
exit $status
