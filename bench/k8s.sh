#!/usr/bin/env bash
# hutch serve --kubernetes benchmark, on one single-node cluster of the
# script's own (test/k8s's: etcd, the control plane, containerd 2 and a
# kubelet in a temporary directory, runc 1.5, hutch-runc as RuntimeClass
# hutch), run by the Go harness TestBenchKubernetes (test/k8s/bench_test.go),
# interleaved sample by sample:
#   floor runc        a pod of the default runtime handler (runc) running
#                     `echo ready; exec sleep`: API create → Running (a
#                     watch), and → its first line read from the pod's log
#                     (follow, opened once Running)
#   floor hutch-runc  the same pod of RuntimeClass hutch (no agent)
#   hutch cold        hutch serve --kubernetes, no pool: client.Create →
#                     the output of client.Run("echo")
#   hutch warm        the same with --warm 2, the pool full before each sample
# then claims: K creates at once from a full pool of K (claims/s, p50/p99
# of create → echo's output), and a command's round trip on a running
# sandbox: client.Run("true") against `kubectl exec POD -- true` (a kubectl
# process each, next to `kubectl get pod`: kubectl's own cost) on the same
# pod. Prints p50/p90 and ratios to the floors.
#
# Usage: bench/k8s.sh [--markdown] [-n N] [-k K]
#   --markdown  print markdown tables (for docs/benchmarks.md)
#   -n N        samples per measure (default 10), after one untimed round
#   -k K        concurrent claims, and the claims pool's size (default 8)
#
# Needs root and the cluster's binaries (scripts/k8s-binaries.sh builds
# them). No traffic leaves the machine. The harness (its test binary,
# which the script stops by pid if interrupted) stops everything it started
# by pid at its end (hutch serve, the kubelet, the control plane,
# containerd and its shims) and removes its directories; the script
# removes its own.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

markdown=0 n=10 k=8
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) n=$2; shift ;;
	-k) k=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "k8s.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
[ "$(id -u)" = 0 ] || { log "needs root (a cluster of its own)"; exit 1; }
bin=$(scripts/k8s-binaries.sh 2>/dev/null) || { log "the cluster's binaries are not built: run scripts/k8s-binaries.sh"; exit 1; }

work=$(mktemp -d /tmp/hutch-k8s-bench.XXXXXX)
pid=
cleanup() {
	set +e
	stop_pid "$pid"
	rm -rf "$work"
}
trap cleanup EXIT

log "$n samples per measure, $k concurrent claims (a cluster starts first)"
go test -c -o "$work/k8s.test" ./test/k8s/
# In the package's directory, as go test runs it.
(cd test/k8s && exec env HUTCH_BENCH_K8S=1 HUTCH_BENCH_N="$n" HUTCH_BENCH_K="$k" HUTCH_BENCH_MARKDOWN=$markdown \
	HUTCH_BENCH_OUT="$work/tables" HUTCH_TEST_ROOT=1 HUTCH_TEST_K8S_BIN="$bin" \
	"$work/k8s.test" -test.run '^TestBenchKubernetes$' -test.count=1 -test.v -test.timeout 60m) >"$work/test.log" 2>&1 &
pid=$!
if ! wait "$pid"; then
	pid=
	log "the harness failed:"
	tail -50 "$work/test.log" >&2
	exit 1
fi
pid=
cat "$work/tables"
log "machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
