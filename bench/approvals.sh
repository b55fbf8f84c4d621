#!/usr/bin/env bash
# Approval-rules benchmark: what deciding a command costs at hutch run's
# start. `hutch run --policy P -- /bin/true` with P's approvals: section
# (the read-only preset, hutch's default rules and a rule that allows
# true; and the same with 1,000 more rules) against the same policy
# without approvals, in the same run (bench/startup measures; ratios to
# the run without approvals). The decision itself, against 1,000 rules,
# is the Go benchmark BenchmarkDecide1000 in internal/approve, run
# here too.
#
# Usage: bench/approvals.sh [--markdown] [-n N] [-w WARMUP]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         timed sequential runs per command (default 200)
#   -w WARMUP    untimed warm-up runs per command (default 10)
#
# Needs root (hutch run's sandboxes as in bench/startup.sh). No network.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=200 warmup=10 markdown=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "approvals.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin"

work=$(mktemp -d /tmp/hutch-approvals-bench.XXXXXX)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
build_tools "$work" startup
mkdir "$work/ws"

printf 'filesystem:\n  allow_write: []\n' >"$work/off.yaml"
printf 'filesystem:\n  allow_write: []\napprovals:\n  default: ask\n  commands:\n    - allow: ["true"]\n' >"$work/on.yaml"
{
	cat "$work/on.yaml"
	for i in $(seq 1 1000); do printf '    - ask: [tool%d, sub%d, "*"]\n' "$i" "$i"; done
} >"$work/on1000.yaml"

# The decision alone: 1,000 rules.
log "Go benchmark of the decision"
go test -run '^$' -bench 'BenchmarkDecide' -benchtime 2000x ./internal/approve | grep -E '^Benchmark' || true

"$work/startup" -n "$n" -warmup "$warmup" -p 1 -pn 20 -dir "$work/ws" \
	-ratio "approvals-on/approvals-off,approvals-1000/approvals-off" $markdown \
	"approvals-off=$work/hutch run --policy $work/off.yaml -- /bin/true" \
	"approvals-on=$work/hutch run --policy $work/on.yaml -- /bin/true" \
	"approvals-1000=$work/hutch run --policy $work/on1000.yaml -- /bin/true"
