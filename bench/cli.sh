#!/usr/bin/env bash
# CLI start-up benchmark: what one call of hutch's CLI costs, in the same
# run, on this machine, against the floors: a Go hello world for
# `hutch version`, and curl making the same call of the daemon's API for
# `hutch ls` and `hutch exec ID -- true`. Builds hutch, hutch-serve and
# the measuring tool (bench/cli), starts a daemon of its own on a unix
# socket in a temporary directory, creates one sandbox, and prints a table
# with ratios.
#
# Usage: bench/cli.sh [--markdown] [-n N] [-w WARMUP] [--base DIR]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         timed rounds (default 200)
#   -w WARMUP    untimed runs of each command first (default 10)
#   --base DIR   also time DIR/hutch (say, built from an earlier commit):
#                its version, ls and exec, against the same daemon
#
# The daemon needs root; without root only the hello world and
# `hutch version` are timed. Installs curl with apt-get when it is missing.
# No network traffic otherwise: the daemon listens on a unix socket only,
# and is stopped by its pid at the end; the directory is removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=200 warmup=10 markdown="" base=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	--base) base=$(cd "$2" && pwd); shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "cli.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ -z "$base" ] || [ -x "$base/hutch" ] || { log "--base: no executable $base/hutch"; exit 2; }

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
root=""
[ "$(id -u)" = 0 ] && root=1
if [ -n "$root" ] && ! command -v curl >/dev/null 2>&1; then apt_install curl; fi

work=$(mktemp -d /tmp/hutch-cli-bench.XXXXXX)
chmod 711 "$work" # the sandbox reaches its directory through it
pid=""
cleanup() {
	set +e
	stop_pid "$pid"
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work" cli hello

cmds=("hello=$work/hello" "version=$work/hutch version")
ratios="version/hello"
[ -z "$base" ] || { cmds+=("base-version=$base/hutch version"); ratios+=",base-version/hello,version/base-version"; }

if [ -n "$root" ]; then
	sock="$work/s.sock"
	"$work/hutch" serve --socket "$sock" --state-dir "$work/state" >"$work/serve.log" 2>&1 &
	pid=$!
	for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
	[ -S "$sock" ] || { log "hutch serve did not listen:"; cat "$work/serve.log" >&2; exit 1; }
	export HUTCH_HOST="unix://$sock"
	id=$("$work/hutch" create --timeout 1h --label bench=cli)
	api="http://hutch/v1/sandboxes"
	cmds+=(
		"ls=$work/hutch ls"
		"curl-ls=$(command -v curl) -sf --unix-socket $sock $api"
		"exec=$work/hutch exec $id -- true"
		"curl-exec=$(command -v curl) -sf --unix-socket $sock -H Content-Type:application/json -d {\"args\":[\"true\"]} $api/$id/exec"
	)
	ratios+=",ls/curl-ls,exec/curl-exec,curl-ls/hello"
	if [ -n "$base" ]; then
		cmds+=("base-ls=$base/hutch ls" "base-exec=$base/hutch exec $id -- true")
		ratios+=",base-ls/curl-ls,base-exec/curl-exec,ls/base-ls,exec/base-exec"
	fi
else
	log "not root: no daemon, so hutch ls and exec are not timed"
fi

versions="hutch $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')$([ -z "$base" ] || echo ", base $base/hutch ($("$base/hutch" version))"), $(go version | cut -d' ' -f3)$(command -v curl >/dev/null && echo ", $(curl --version | head -1 | cut -d' ' -f1-2)")"
if [ -n "$markdown" ]; then echo "Versions: $versions."; echo; else echo "$versions"; fi
"$work/cli" -n "$n" -warmup "$warmup" -ratio "$ratios" $markdown "${cmds[@]}"
