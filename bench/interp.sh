#!/usr/bin/env bash
# Code interpreter benchmark: hutch's code interpreter through `hutch
# serve`'s API and its Go SDK, against an exec of python3 on the same
# sandbox, in the same run, on this machine. Builds hutch and the
# measuring tool (bench/interp), which imports the code-interpreter image
# into a daemon of its own (a unix socket in a temporary directory;
# --template ci=hutch.local/code-interpreter:latest --warm ci=1) and
# reports: the round trip of RunCode("1+1") in a warm context against
# Run(python3 -c 'print(1+1)') — p50, p90, p99 and their ratio, against the
# goal of 0.5 — and create → first RunCode result from the warm pool,
# back to back and once the pool settled.
#
# Usage: bench/interp.sh [--markdown] [--image TARBALL] [-n N] [-w WARMUP] [-c N]
#   --markdown      print markdown tables (for docs/benchmarks.md)
#   --image TARBALL the code-interpreter image (docker save; default:
#                   $HUTCH_TEST_CODE_INTERPRETER_IMAGE, else the newest
#                   /var/cache/hutch/base-image/code-interpreter-*.tar that
#                   scripts/base-image.sh --code-interpreter leaves)
#   -n N            timed round trips per way (default 200)
#   -w WARMUP       round trips per way before the timed ones (default 10)
#   -c N            create → first result cycles per series (default 10)
#   -settle D       how long the settled series waits once the pool is
#                   full (default 5s)
#
# Needs root (hutch serve). No network traffic: the daemon listens on a
# unix socket and its sandboxes have no network. The daemon is stopped by
# its pid at the end; the directory is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

args=() image=${HUTCH_TEST_CODE_INTERPRETER_IMAGE:-}
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	--image) image=$2; shift ;;
	-n | -w | -c | -settle) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "interp.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve)"; exit 1; }
if [ -z "$image" ]; then
	image=$(ls -t /var/cache/hutch/base-image/code-interpreter-*.tar 2>/dev/null | head -n1 || true)
fi
[ -n "$image" ] && [ -f "$image" ] || {
	log "no code-interpreter image: give --image TARBALL, or run scripts/base-image.sh --code-interpreter"
	exit 2
}

work=$(mktemp -d /tmp/hutch-interp-bench.XXXXXX)
chmod 711 "$work" # the sandboxes reach their workspaces through it
cleanup() {
	set +e
	# A daemon still running (the tool was killed): stop it by its pid.
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

build_tools "$work" interp

log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/interp" -hutch "$work/hutch" -work "$work" -image "$image" "${args[@]}"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
