#!/usr/bin/env bash
# Review-mode benchmark: what `hutch run --review` costs over a plain
# `hutch run`, in the same run, on this machine. Goal: at most 1.2 × its
# time. Builds hutch and the measuring tool (bench/startup) and times, in
# a workspace of 2,000 files:
#   run, review            /bin/true: the overlay's set-up and a change set
#                          made, found empty and discarded;
#   run-write, review-write /bin/sh write.sh, which writes one new file and
#                          changes one of the workspace's: the change set
#                          kept, with its base recorded and its summary
#                          printed (the plain run's writes are undone
#                          between runs by the script's own next write).
#
# Usage: bench/review.sh [--markdown] [-n N] [-w WARMUP]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         timed runs per command (default 200)
#   -w WARMUP    untimed runs per command first (default 10)
#
# No network traffic: every sandbox runs without a network. The change
# sets go to the run's own directory (XDG_STATE_HOME), removed at the end.
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
	*) echo "review.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

work=$(mktemp -d /var/tmp/hutch-bench-review.XXXXXX)
chmod 755 "$work"
trap 'remove_work "$work"' EXIT
trap 'exit 130' INT TERM
build_tools "$work" startup

ws="$work/ws"
mkdir -p "$ws/src"
for i in $(seq 2000); do echo "line $i" >"$ws/src/f$i.txt"; done
cat >"$ws/write.sh" <<'EOF'
echo "$$" > out.txt
echo "$$" >> src/f1.txt
EOF
export XDG_STATE_HOME="$work/state"

"$work/startup" -n "$n" -warmup "$warmup" -p 0 -rss-runs 0 -dir "$ws" $markdown \
	-ratio "review/run,review-write/run-write" \
	"run=$work/hutch run -- /bin/true" \
	"review=$work/hutch run --review -- /bin/true" \
	"run-write=$work/hutch run -- /bin/sh write.sh" \
	"review-write=$work/hutch run --review -- /bin/sh write.sh"
log "change sets kept: $(find "$XDG_STATE_HOME/hutch/changes" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l)"
