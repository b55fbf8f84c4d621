#!/usr/bin/env bash
# Isolation tiers benchmark, in one run on this machine:
#   1. start-up: `hutch run --tier gvisor -- /bin/true` against `runsc
#      --network=none do /bin/true` (gVisor's own quickest way to run a
#      command, with no network as hutch's default) and against hutch's
#      namespace tier;
#   2. a workload heavy in system calls: `git status` in a tree of 10,000
#      files, outside any sandbox, under the namespace tier and under
#      gVisor.
# Both with the measuring tool of bench/startup.sh (interleaved rounds,
# fork to wait4), and ratios.
#
# Usage: bench/tiers.sh [--markdown] [-n N] [-w WARMUP] [--files COUNT]
#   --markdown     print markdown tables (for docs/benchmarks.md)
#   -n N           timed sequential runs per command (default 50)
#   -w WARMUP      untimed warm-up runs per command (default 5)
#   --files COUNT  files in the git tree (default 10000)
#
# Needs root (the gVisor tier does, for now) and runsc: $RUNSC, else
# runsc on PATH (the README's test command installs the pinned version).
# No network traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=50 warmup=5 markdown="" files=10000
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	--files) files=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "tiers.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	log "needs root: the gVisor tier does, for now"
	exit 2
fi
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
runsc=${RUNSC:-$(command -v runsc || true)}
if [ -z "$runsc" ] || [ ! -x "$runsc" ]; then
	log "no runsc: set RUNSC or put it on PATH (see the README's test command)"
	exit 2
fi

work=$(mktemp -d /tmp/hutch-bench.XXXXXX)
chmod 755 "$work"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
build_tools "$work" startup

log "hutch $(git rev-parse --short HEAD 2>/dev/null || echo '?'), runsc $runsc"
mkdir "$work/ws"
log "start-up"
"$work/startup" -n "$n" -warmup "$warmup" -p 0 -rss-runs 5 -dir "$work/ws" $markdown \
	-ratio "gvisor/runsc,gvisor/namespace,runsc/namespace" \
	"namespace=$work/hutch run -- /bin/true" \
	"gvisor=$work/hutch run --tier gvisor --runsc $runsc -- /bin/true" \
	"runsc=$runsc --network=none do /bin/true"

# The tree: COUNT small files in directories of 100, committed, one of
# them changed, so that git status stats every file and reads the index.
tree="$work/tree"
mkdir "$tree"
log "a git tree of $files files"
(
	cd "$tree"
	for ((d = 0; d < (files + 99) / 100; d++)); do
		mkdir "d$d"
		for ((f = 0; f < 100 && d * 100 + f < files; f++)); do
			echo "$d $f" >"d$d/f$f"
		done
	done
	git init -q .
	git add -A
	git -c user.name=bench -c user.email=bench@localhost commit -qm tree
	echo changed >d0/f0
)
log "git status in the tree"
"$work/startup" -n "$n" -warmup "$warmup" -p 0 -rss-runs 5 -dir "$tree" $markdown \
	-ratio "namespace/outside,gvisor/outside,gvisor/namespace" \
	"outside=/usr/bin/git status --porcelain" \
	"namespace=$work/hutch run -- git status --porcelain" \
	"gvisor=$work/hutch run --tier gvisor --runsc $runsc -- git status --porcelain"
