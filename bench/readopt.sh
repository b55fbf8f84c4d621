#!/usr/bin/env bash
# Re-adoption benchmark: what a restarted `hutch serve` takes to take its
# sandboxes again. N sandboxes of the namespace tier (each with a process
# started in it), the daemon killed with SIGKILL (a crash), a new one
# started on the same state directory: the time until it answers, and
# until every sandbox answers a command again with its process still
# there. The floor, in the same run: a daemon started on an empty state
# directory, until it answers; the ratio to it and the cost per sandbox
# are printed.
#
# Usage: bench/readopt.sh [--markdown] [-n LIST] [-rounds N]
#   -n LIST    sandbox counts, comma-separated (default 1,10,50)
#   -rounds N  rounds per count, medians printed (default 3)
#
# Needs root. The daemons listen on unix sockets only; each is stopped by
# its pid at the end of its round (ending its sandboxes), and the
# directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
. bench/lib.sh
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	-n | -rounds) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "readopt.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve)"; exit 1; }
dir=$(mktemp -d /var/tmp/hutch-readopt-bench.XXXXXX)
chmod 711 "$dir"
cleanup() {
	local f pid
	for f in "$dir"/run/*/serve.pid; do
		[ -e "$f" ] || continue
		pid=$(cat "$f")
		# Only a daemon of this run (a pid may have been reused).
		grep -qF "$dir" "/proc/$pid/cmdline" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
	done
	sleep 1
	rm -rf "$dir"
}
trap cleanup EXIT
mkdir "$dir/bin" "$dir/run"
chmod 711 "$dir/run"
build_tools "$dir/bin" readopt
log "measuring"
"$dir/bin/readopt" -hutch "$dir/bin/hutch" -work "$dir/run" "${args[@]}"
