#!/usr/bin/env bash
# Egress benchmark: hutch's proxy against a direct connection, in the same
# run. A 1 GiB download from a loopback server with curl, directly on the
# host and inside `hutch run --net proxy` (through CONNECT with curl -p, and
# through plain HTTP forwarding); then the latency the proxy adds to a new
# connection and to a request on a kept-alive one (p50, p99).
#
# Usage: bench/egress.sh [--markdown] [-size BYTES] [-runs N] [-n SAMPLES]
# Needs curl (installed with apt-get when missing, as root). All traffic
# stays on this machine's loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	-size | -runs | -n) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "egress.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if ! command -v curl >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "egress.sh: curl is missing" >&2; exit 1; }
	apt-get install -y -qq curl >/dev/null
fi
dir=$(mktemp -d /tmp/hutch-egress-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
CGO_ENABLED=0 go build -o "$dir/hutch" ./cmd/hutch
go build -o "$dir/egress" ./bench/egress
cd "$dir"
"$dir/egress" -hutch "$dir/hutch" "${args[@]}"
