#!/usr/bin/env bash
# MCP benchmark: what an exec of `true` costs through `hutch mcp` over
# stdio, against the same command through `hutch serve`'s API and against
# the floor, the agent's exec made directly, in the same run, on this
# machine. Builds hutch, hutch-serve, hutch-agent and the measuring tool
# (bench/mcp), which starts `hutch mcp` (its client the official Go SDK,
# over the process's stdin and stdout), `hutch serve` on a unix socket and
# a sandbox of its own, each in a temporary directory, and times the calls
# from within one process (no process start in any figure): p50, p90,
# p99, the ratios, and what MCP adds per call over the underlying exec
# (and beyond it and stdio-noop, an MCP call that does nothing, the floor
# of the stdio hop),
# against the goal of 1 ms.
#
# Usage: bench/mcp.sh [--markdown] [-n N] [-w WARMUP]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         timed calls per way (default 200)
#   -w WARMUP    calls per way before the timed ones (default 20)
#
# Needs root (hutch serve). No network traffic: the daemon listens on a
# unix socket, the sandboxes have no network. hutch mcp and the daemon are
# stopped by their pids at the end; the directory is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	-n | -w) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "mcp.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve)"; exit 1; }

work=$(mktemp -d /tmp/hutch-mcp-bench.XXXXXX)
chmod 711 "$work" # the sandboxes reach their workspaces through it
tool=""
cleanup() {
	set +e
	# The tool still running (this script was interrupted): stop it by its
	# pid; it ends hutch mcp and the daemon, which die with it too.
	stop_pid "$tool"
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work" mcp
"$work/mcp" -bin "$work" -work "$work" "${args[@]}" &
tool=$!
wait "$tool"
