#!/usr/bin/env bash
# hutch mcp wrap benchmark: what the relay adds to a tools/call. One MCP
# session per way to run @modelcontextprotocol/server-filesystem — directly
# on the host (the floor), behind a process that only copies its stdio
# (io.Copy: the least any relay costs), inside `hutch run` with its stdio
# passed straight through (the sandbox without the relay), under `hutch mcp
# wrap`, and under hutch mcp wrap with a secret and a --redact pattern (the
# filter looking at every message) — each driven by the Go SDK's client;
# p50 and p99 of a
# tools/call per way, with the ratio to the floor, for a call with a tiny
# answer, a 1 KiB file read and a 1 MiB one, the calls round robin across
# the ways in one run.
#
# Usage: bench/mcpwrap.sh [--markdown] [-n CALLS] [-warmup CALLS] [-big BYTES]
# Needs root (the sandboxes) and test/mcp's packages (node 22 and the
# server; scripts/test.sh installs them). Nothing leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
. bench/lib.sh
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	-n | -warmup | -big) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "mcpwrap.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
node=$PWD/test/mcp/.node/node_modules/.bin/node
server=$PWD/test/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
for f in "$node" "$server"; do
	[ -e "$f" ] || { log "$f is missing (scripts/test.sh installs test/mcp's packages)"; exit 1; }
done
# The workspace outside /tmp, which every sandbox replaces with its own.
dir=$(mktemp -d /var/tmp/hutch-mcpwrap-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/bin" "$dir/ws"
build_tools "$dir/bin" mcpwrap
log "measuring"
"$dir/bin/mcpwrap" -hutch "$dir/bin/hutch" -node "$node" -server "$server" -dir "$dir/ws" "${args[@]}"
