#!/usr/bin/env bash
# hutch-runc benchmark: `docker run --rm --runtime R IMAGE true` with R =
# runc (Docker's own, the floor an OCI runtime of runc's kind cannot go
# below: hutch-runc hands its containers to it), hutch-runc with a node
# policy of network.mode host (its confinement and user namespace, no
# egress of its own: "hutch-open"), with no policy (its proxy refusing
# everything: "hutch"), with a policy that allows a host
# ("hutch-allowed"), and runsc (gVisor, when $HUTCH_TEST_RUNSC or runsc on
# PATH is there), interleaved, in the same run, on a dockerd of the script's own
# (data in a temporary directory, in a network namespace of its own).
# Prints p50/p90 per runtime and its ratio to runc; then the same for the
# runtimes alone, without Docker: `runc run` and `hutch-runc run` (policy
# open, and none) of one bundle.
#
# Usage: bench/oci.sh [--markdown] [-n N]
#   --markdown  print a markdown table (for docs/benchmarks.md)
#   -n N        runs per runtime (default 30), after 3 untimed ones
#
# Needs root, Debian's docker.io (dockerd), containerd and runc. No
# network traffic leaves the machine: the containers run `true`. dockerd
# is stopped by its pid at the end and its directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

markdown=0 n=30
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) n=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "oci.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (dockerd)"; exit 1; }
for tool in dockerd containerd runc unshare ip busybox; do
	command -v "$tool" >/dev/null || { log "needs $tool"; exit 1; }
done

work=$(mktemp -d /tmp/hutch-oci-bench.XXXXXX)
cleanup() {
	set +e
	if [ -f "$work/dockerd.pid" ]; then
		pid=$(cat "$work/dockerd.pid")
		kill "$pid" 2>/dev/null
		for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
	fi
	grep -o " $work[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$m"; done
	rm -rf "$work"
}
trap cleanup EXIT

log "building hutch-runc"
CGO_ENABLED=0 go build -o "$work/hutch-runc" ./cmd/hutch-runc
mkdir -p "$work/policies"
printf 'network:\n  allowed_domains: ["example.test"]\n' >"$work/policies/allowed.yaml"
printf 'network:\n  mode: host\n' >"$work/policies/open.yaml"
runsc=${HUTCH_TEST_RUNSC:-$(command -v runsc || true)}
runtimes='"hutch": {"path": "'$work/hutch-runc'", "runtimeArgs": ["--hutch-policy-dir", "'$work/policies'"]},
  "hutch-allowed": {"path": "'$work/hutch-runc'", "runtimeArgs": ["--hutch-policy-dir", "'$work/policies'", "--hutch-policy", "allowed"]},
  "hutch-open": {"path": "'$work/hutch-runc'", "runtimeArgs": ["--hutch-policy-dir", "'$work/policies'", "--hutch-policy", "open"]}'
names=(runc hutch-open hutch hutch-allowed)
if [ -n "$runsc" ] && [ -x "$runsc" ]; then
	runtimes+=', "runsc": {"path": "'$runsc'"}'
	names+=(runsc)
fi
echo "{\"runtimes\": {$runtimes}}" >"$work/daemon.json"

log "starting dockerd"
unshare --net -- sh -c 'ip link set lo up && exec "$0" "$@"' dockerd --data-root "$work/root" --exec-root "$work/exec" \
	--pidfile "$work/dockerd.pid" -H "unix://$work/docker.sock" --config-file "$work/daemon.json" \
	--userland-proxy=false --log-level error >"$work/dockerd.log" 2>&1 &
export DOCKER_HOST="unix://$work/docker.sock" DOCKER_CONFIG="$work/client"
for _ in $(seq 300); do docker version >/dev/null 2>&1 && break; sleep 0.1; done
docker version >/dev/null || { log "dockerd did not start:"; cat "$work/dockerd.log" >&2; exit 1; }

mkdir -p "$work/image/bin"
cp "$(command -v busybox)" "$work/image/bin/busybox"
ln -s busybox "$work/image/bin/true"
tar -C "$work/image" -c . | docker import - hutch.bench/true:1 >/dev/null

log "$n runs per runtime, interleaved (${names[*]})"
for name in "${names[@]}"; do
	for _ in 1 2 3; do docker run --rm --runtime "$name" hutch.bench/true:1 /bin/true >/dev/null; done
	: >"$work/$name.times"
done
for _ in $(seq "$n"); do
	for name in "${names[@]}"; do
		start=$(date +%s%N)
		docker run --rm --runtime "$name" hutch.bench/true:1 /bin/true >/dev/null
		echo $(( ($(date +%s%N) - start) / 1000 )) >>"$work/$name.times"
	done
done

# pct FILE P prints the P-th percentile (nearest rank) of the numbers in
# FILE, in milliseconds.
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int((p*NR+99)/100); if (i<1) i=1; printf "%.1f", a[i]/1000}'; }
# table TITLE BASE NAME... prints p50, p90 and the ratio of p50 to BASE's
# for each NAME's times.
table() {
	local title=$1 base=$2 name p50 p90 ratio base50
	shift 2
	base50=$(pct "$work/$base.times" 50)
	if [ "$markdown" = 1 ]; then
		echo
		echo "| $title | p50 (ms) | p90 (ms) | p50 / $base |"
		echo "|---|---:|---:|---:|"
	fi
	for name in "$@"; do
		p50=$(pct "$work/$name.times" 50) p90=$(pct "$work/$name.times" 90)
		ratio=$(awk -v a="$p50" -v b="$base50" 'BEGIN {printf "%.2f", a/b}')
		if [ "$markdown" = 1 ]; then
			echo "| $name | $p50 | $p90 | $ratio× |"
		else
			printf '%-16s p50 %8s ms  p90 %8s ms  p50/%s %s×\n' "$name" "$p50" "$p90" "$base" "$ratio"
		fi
	done
}
table "docker run --runtime" runc "${names[@]}"
base90=$(pct "$work/runc.times" 90)
log "runc p90 $base90 ms; machine load: $(cut -d' ' -f1-3 /proc/loadavg)"

# The runtimes alone, without Docker: `runc run` and `hutch-runc run` of
# one bundle (busybox in a directory, /bin/true, a network namespace of
# its own), interleaved.
log "the runtimes alone: $n runs each of runc run and hutch-runc run on a bundle"
bundle=$work/bundle
mkdir -p "$bundle/rootfs/bin"
cp "$(command -v busybox)" "$bundle/rootfs/bin/busybox"
ln -s busybox "$bundle/rootfs/bin/true"
(cd "$bundle" && runc spec)
sed -i 's/"terminal": true/"terminal": false/; s/"sh"$/"\/bin\/true"/' "$bundle/config.json"
direct=(runc-run hutch-runc-open hutch-runc)
run_direct() {
	case "$1" in
	runc-run) runc --root "$work/runc-root" run -b "$bundle" "$2" ;;
	hutch-runc-open) "$work/hutch-runc" --root "$work/hutch-root" --hutch-policy-dir "$work/policies" --hutch-policy open run -b "$bundle" "$2" ;;
	hutch-runc) "$work/hutch-runc" --root "$work/hutch-root" --hutch-policy-dir "$work/policies" run -b "$bundle" "$2" ;;
	esac
}
for name in "${direct[@]}"; do
	run_direct "$name" "warm-$name" >/dev/null
	: >"$work/$name.times"
done
for i in $(seq "$n"); do
	for name in "${direct[@]}"; do
		start=$(date +%s%N)
		run_direct "$name" "b$i-$name" >/dev/null
		echo $(( ($(date +%s%N) - start) / 1000 )) >>"$work/$name.times"
	done
done
table "runtime alone" runc-run "${direct[@]}"
