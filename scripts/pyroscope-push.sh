#!/bin/sh
# pyroscope-push.sh - send one finished trace to a Pyroscope-compatible
# back end: its pprof export (pyflame-report --format pprof: on-CPU samples,
# with counts and CPU time) POSTed to the documented ingest endpoint,
#   POST URL/ingest?name=APP{LABELS}&from=START&until=END&format=pprof
# with START and END the file's wall-clock span in Unix seconds (from
# `pyflame-report info --format json`: start_wall_ns, end_wall_ns; the start
# rounded down, the end up). Made for pyflame-record's --on-rotate, which
# runs it once per finished file, in order, with the file's path last:
#
#   pyflame-record --match 'gunicorn' --rotate 10m --keep 24h -o /var/lib/pyflame/web.db \
#     --on-rotate '/usr/share/pyflame/pyroscope-push.sh -u http://pyroscope:4040 \
#                  -a web.cpu -l env=prod,host=web1'
#
# Options (or the environment variables in brackets):
#   -u URL     the server (PYROSCOPE_URL, default http://localhost:4040)
#   -a APP     application name (PYROSCOPE_APP, default pyflame.cpu)
#   -l LABELS  k=v[,k=v...] labels (PYROSCOPE_LABELS, default none)
#   -t TENANT  X-Scope-OrgID header for a multi-tenant server (PYROSCOPE_TENANT)
#   -r PATH    the pyflame-report to run (PYFLAME_REPORT, default from PATH)
# Exit status: 0 when the server accepted the profile (2xx); 1 when the
# server could not be reached or refused it (curl says why on stderr); 2 on
# a usage error or a file pyflame-report cannot read. Needs curl.
set -eu

url=${PYROSCOPE_URL:-http://localhost:4040}
app=${PYROSCOPE_APP:-pyflame.cpu}
labels=${PYROSCOPE_LABELS:-}
tenant=${PYROSCOPE_TENANT:-}
report=${PYFLAME_REPORT:-pyflame-report}
prog=${0##*/}

usage() {
	echo "usage: $prog [-u URL] [-a APP] [-l k=v,...] [-t TENANT] [-r PYFLAME_REPORT] TRACE" >&2
	exit 2
}

while getopts u:a:l:t:r:h opt; do
	case $opt in
	u) url=$OPTARG ;;
	a) app=$OPTARG ;;
	l) labels=$OPTARG ;;
	t) tenant=$OPTARG ;;
	r) report=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
trace=$1

# Percent-encode a query value: every byte but [A-Za-z0-9._~-].
urlencode() {
	s=$1
	out=
	while [ -n "$s" ]; do
		rest=${s#?}
		c=${s%"$rest"}
		case $c in
		[A-Za-z0-9._~-]) out=$out$c ;;
		*) out=$out$(printf '%%%02X' "'$c") ;;
		esac
		s=$rest
	done
	printf '%s' "$out"
}

# The top-level numbers of info's JSON (its first line; meta's are strings).
info=$("$report" info --format json "$trace" | head -n 1) || exit 2
start_ns=$(printf '%s\n' "$info" | sed -n 's/.*"start_wall_ns": \([0-9][0-9]*\),.*/\1/p')
end_ns=$(printf '%s\n' "$info" | sed -n 's/.*"end_wall_ns": \([0-9][0-9]*\),.*/\1/p')
if [ -z "$start_ns" ] || [ -z "$end_ns" ]; then
	echo "$prog: $trace: no wall-clock span (start_wall_ns, end_wall_ns) in its info" >&2
	exit 2
fi
from=$((start_ns / 1000000000))
until=$(((end_ns + 999999999) / 1000000000))

tmp=$(mktemp "${TMPDIR:-/tmp}/pyroscope-push.XXXXXX")
trap 'rm -f "$tmp"' EXIT
"$report" --format pprof -o "$tmp" "$trace" || exit 2

name=$app
[ -z "$labels" ] || name="$app{$labels}"
query="name=$(urlencode "$name")&from=$from&until=$until&format=pprof&spyName=pyflame"
set -- -sS --fail -X POST -H 'Content-Type: application/octet-stream' --data-binary "@$tmp"
[ -z "$tenant" ] || set -- "$@" -H "X-Scope-OrgID: $tenant"
curl "$@" "${url%/}/ingest?$query" >/dev/null || exit 1
