#!/usr/bin/env bash
# Daemon benchmark: `hutch serve` through its Go SDK, per isolation tier
# (namespace, and gVisor when runsc is there), against runc, in the same
# run, on this machine. Builds hutch and the measuring tool (bench/serve),
# which starts a daemon of its own per tier (its --default-tier) on a unix
# socket in a temporary directory and reports: create → first exec output
# → destroy (cold, and warm when `hutch serve` has a --warm flag), the
# exec round trip on a live sandbox (run to completion and streaming),
# execs/s with concurrent clients on one sandbox and on one sandbox each,
# and the memory of idle sandboxes; with two tiers, the figures side by
# side and the ratio gvisor/namespace. runc is the peer: `runc exec` in a
# running container, and create → start → exec → delete. The issue's
# targets are printed next to the namespace tier's figures.
#
# Usage: bench/serve.sh [--markdown] [--tiers LIST] [--runsc PATH] [-n N] [-e N] [-c N] [-dur D] [-idle N[,TIER=N]] [-runc-n N]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   --tiers LIST tiers to measure, comma-separated: namespace, gvisor,
#                microvm (default: namespace and gvisor when there is a
#                runsc, else namespace, saying that gvisor is skipped;
#                microvm when asked: it needs scripts/guest-kernel.sh's
#                kernel, and emulates where there is no KVM)
#   --runsc PATH runsc for the gvisor tier (default: $RUNSC, else runsc on
#                PATH); it must be the pinned version hutch serve accepts
#   -n N         create → output → destroy cycles per tier (default 200)
#   -e N         exec round trips per way and tier (default 2000)
#   -c N         concurrent clients in the throughput phase (default 16)
#   -dur D       length of each throughput run (default 3s)
#   -idle N[,TIER=N]  idle sandboxes for the memory figure: N for every
#                tier, TIER=N for one (default 500,gvisor=20; 0 skips)
#   -runc-n N    runc samples per way (default 200)
#
# Needs root. Installs runc and busybox-static with apt-get when missing.
# No network traffic otherwise: the daemons listen on unix sockets only
# and their sandboxes have no network. Every daemon is stopped by its pid
# at the end (destroying its sandboxes, gVisor's included), every runc
# container of the run deleted and the directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

args=() tiers="" runsc=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) args+=(-markdown) ;;
	--tiers) tiers=$2; shift ;;
	--runsc) runsc=$2; shift ;;
	-n | -e | -c | -dur | -idle | -runc-n) args+=("$1" "$2"); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "serve.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve, runc)"; exit 1; }

# The gvisor tier needs runsc: measured when asked for or when there is
# one; skipped, and said so, when neither.
runsc=${runsc:-${RUNSC:-$(command -v runsc || true)}}
if [ -n "$runsc" ] && [ ! -x "$runsc" ]; then
	log "runsc $runsc: not an executable file"
	exit 2
fi
if [ -z "$tiers" ]; then
	tiers=namespace
	if [ -n "$runsc" ]; then
		tiers=namespace,gvisor
	else
		log "no runsc: the gvisor tier is skipped (give --runsc PATH or RUNSC=PATH, or put runsc on PATH; the README's test command installs the pinned version)"
	fi
elif [[ ",$tiers," == *,gvisor,* ]] && [ -z "$runsc" ]; then
	log "--tiers $tiers: the gvisor tier needs runsc (give --runsc PATH or RUNSC=PATH, or put runsc on PATH)"
	exit 2
fi
args+=(-tiers "$tiers")
[ -z "$runsc" ] || args+=(-runsc "$runsc")

need=()
command -v runc >/dev/null 2>&1 || need+=(runc)
static_busybox || need+=(busybox-static)
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

work=$(mktemp -d /tmp/hutch-serve-bench.XXXXXX)
chmod 711 "$work" # the sandboxes reach their workspaces through it
runc_prefix="hutchserve-$$-"
cleanup() {
	set +e
	# A daemon still running (the tool was killed): stop it by its pid.
	for f in "$work"/*/serve.pid; do
		[ -f "$f" ] || continue
		pid=$(cat "$f")
		if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$work"; then
			stop_pid "$pid"
		fi
	done
	runc_delete_all "$runc_prefix"
	# Nothing of the run may stay mounted.
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work" serve

# runc: a busybox bundle whose process sleeps until killed, isolated as
# bench/startup.sh's runc (see runc_bundle in bench/lib.sh), without the
# memory and CPU limits: served sandboxes have none by default.
runc_bundle "$work/runc" '["/bin/sleep", "86400"]' '{"pids": {"limit": 4096}}' sh true echo sleep

log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/serve" -hutch "$work/hutch" -work "$work" -runc "$(command -v runc)" -bundle "$work/runc" \
	-prefix "$runc_prefix" "${args[@]}"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
