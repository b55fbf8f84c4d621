#!/usr/bin/env bash
# E2B SDK benchmark: a warm Sandbox.create() → the first output of
# commands.run('echo ok') through E2B's JavaScript SDK (e2b, as pinned in
# test/e2b), against the same through hutch's own Go SDK (create → exec
# stream → first byte), on one hutch serve on loopback, in the same run.
# The two alternate cycle by cycle, each from full warm pools (--warm N for
# hutch's creates, --warm base=N for E2B's). Prints p50 and p90 of each, the
# create alone, and the ratio E2B/hutch (issue target: ≤ 1.5× at p50).
#
# Usage: bench/e2bsdk.sh [--markdown] [-n N] [-warm N]
#   --markdown  print a markdown table (for docs/benchmarks.md)
#   -n N        cycles per SDK (default 100)
#   -warm N     warm sandboxes per pool (default 2)
#
# Needs root (hutch serve), and node 20.18 or later with test/e2b's
# packages (npm ci there; scripts/test.sh installs both). The daemon listens
# on 127.0.0.1 only; its sandboxes' traffic stays on the machine. It is
# stopped by its pid at the end and the directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	-n | -warm) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "e2bsdk.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve)"; exit 1; }

node_ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=18)?0:1)' 2>/dev/null; }
node=""
for n in node test/e2b/.node/node_modules/.bin/node; do
	if command -v "$n" >/dev/null 2>&1 && node_ok "$n"; then node=$(command -v "$n"); break; fi
done
[ -n "$node" ] || { log "needs node 20.18 or later (scripts/test.sh installs one into test/e2b/.node)"; exit 1; }
[ -f test/e2b/node_modules/e2b/package.json ] || (cd test/e2b && npm ci --no-audit --no-fund --silent)

work=$(mktemp -d /tmp/hutch-e2bsdk-bench.XXXXXX)
chmod 711 "$work"
cleanup() {
	set +e
	if [ -f "$work/serve.pid" ]; then
		pid=$(cat "$work/serve.pid")
		if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$work"; then
			stop_pid "$pid"
		fi
	fi
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work" e2bsdk
log "e2b $(sed -n 's/^ *"version": *"\(.*\)",*$/\1/p' test/e2b/node_modules/e2b/package.json | head -1), node $("$node" --version)"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/e2bsdk" -hutch "$work/hutch" -work "$work" -node "$node" "${args[@]}"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
