#!/usr/bin/env bash
# Start-up benchmark: `hutch run -- /bin/true` against bubblewrap and runc
# (and sandbox-runtime's srt, and gVisor's runsc when it is installed), in
# the same run, on this machine. Builds hutch and the measuring tool
# (bench/startup), prepares the peers, and prints a table with ratios.
#
# Usage: bench/startup.sh [--markdown] [--breakdown] [-n N] [-w WARMUP] [-p P] [--pn COUNT]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   --breakdown  also time pieces of hutch's start-up: `hutch version` (one
#                Go process start and exit), `hutch run --no-default-denies`,
#                as root `hutch run` with its workspace on a tmpfs, and the
#                floor of any Go launcher (bench/floor: clone into the seven
#                namespaces and exec /bin/true, nothing else), and as root
#                hutch with and without the stand-ins it serves (which
#                report file refusals)
#   -n N         timed sequential runs per sandbox (default 200)
#   -w WARMUP    untimed warm-up runs per sandbox (default 10)
#   -p P         concurrent workers in the parallel phase (default 2 × nproc)
#   --pn COUNT   runs per sandbox in the parallel phase (default N)
#
# As root it installs the peers it lacks (bubblewrap, runc, busybox-static)
# with apt-get, and srt with npm; runsc is used only if already installed. No network
# traffic otherwise: every sandbox runs without a network.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=200 warmup=10 workers=$((2 * $(nproc))) pn="" markdown="" breakdown="" tmpfs_mounted=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	--breakdown) breakdown=1 ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	-p) workers=$2; shift ;;
	--pn) pn=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "startup.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$pn" ] || pn=$n

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

# Peers: install what is missing, only as root.
need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v runc >/dev/null 2>&1 || need+=(runc)
static_busybox || need+=(busybox-static)
# srt (sandbox-runtime, from npm) runs bwrap and needs ripgrep and socat.
command -v rg >/dev/null 2>&1 || need+=(ripgrep)
command -v socat >/dev/null 2>&1 || need+=(socat)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ]; then
		apt_install "${need[@]}"
	else
		log "not root: not installing ${need[*]}; those peers are skipped"
	fi
fi

if ! command -v srt >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	log "installing srt (npm @anthropic-ai/sandbox-runtime)"
	npm install -g --silent @anthropic-ai/sandbox-runtime >/dev/null 2>&1 || log "srt could not be installed: skipped"
fi

work=$(mktemp -d /tmp/hutch-bench.XXXXXX)
touch "$work/.started" # what this run leaves in /tmp is newer
chmod 755 "$work" # the sandboxes run as unprivileged host uids
runc_prefix="hutchbench-$$-"
cleanup() {
	set +e
	[ "$(id -u)" != 0 ] || runc_delete_all "$runc_prefix"
	[ -z "$tmpfs_mounted" ] || umount "$work/tmpfs"
	# srt leaves a socket per run in /tmp: remove those of this run.
	find /tmp -maxdepth 1 -name 'srt-mux-*.sock' -type s -newer "$work/.started" -delete 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work" startup floor
mkdir "$work/ws" # hutch's workspace: it makes the current directory writable

cmds=(
	"hutch=$work/hutch run -- /bin/true"
	"hutch-limits=$work/hutch run --memory 256m --pids 256 --cpus 1 -- /bin/true"
)
ratios="hutch/bwrap,hutch-limits/bwrap,hutch/runc,hutch-limits/runc,hutch/runsc,hutch/srt"
if [ -n "$breakdown" ]; then
	cmds+=(
		"hutch-version=$work/hutch version"
		"hutch-nodenies=$work/hutch run --no-default-denies -- /bin/true"
		"go-floor=$work/floor /bin/true"
	)
	ratios="$ratios,go-floor/bwrap,hutch/go-floor"
	# What serving the masks and placeholders costs (root: hutch's own
	# FUSE stand-ins, which report refusals) against the tmpfs ones; both
	# through env(1), so that the two pay the same extra exec.
	if [ "$(id -u)" = 0 ]; then
		cmds+=(
			"hutch-served=env HUTCH_BENCH=1 $work/hutch run -- /bin/true"
			"hutch-unserved=env HUTCH_TEST_MISSING=fuse $work/hutch run -- /bin/true"
		)
		ratios="$ratios,hutch-served/hutch-unserved"
	fi
	# The same sandbox with its workspace on tmpfs: shows what creating and
	# removing the placeholder files costs on the disk under /tmp.
	if [ "$(id -u)" = 0 ] && mkdir "$work/tmpfs" && mount -t tmpfs -o size=64m,mode=755 hutch-bench "$work/tmpfs"; then
		tmpfs_mounted=1
		cmds+=("hutch-tmpfs-ws@$work/tmpfs=$work/hutch run -- /bin/true")
	fi
fi

if command -v bwrap >/dev/null 2>&1; then
	cmds+=("bwrap=$(command -v bwrap) --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp /bin/true")
else
	log "bwrap not installed: skipped"
fi

# runc: a busybox bundle made afresh for this run, isolated like hutch (see
# runc_bundle in bench/lib.sh), with cgroup limits as hutch-limits.
if command -v runc >/dev/null 2>&1 && static_busybox && [ "$(id -u)" = 0 ]; then
	bundle="$work/runc"
	runc_bundle "$bundle" '["/bin/true"]' \
		'{"memory": {"limit": 268435456}, "pids": {"limit": 256}, "cpu": {"quota": 100000, "period": 100000}}' \
		sh true
	cmds+=("runc=$(command -v runc) run --bundle $bundle $runc_prefix{id}")
else
	log "runc needs root, runc and a static busybox: skipped"
fi

if command -v runsc >/dev/null 2>&1; then
	cmds+=("runsc=$(command -v runsc) --network=none do /bin/true")
else
	log "runsc not installed: skipped (not installed by this script)"
fi
if command -v srt >/dev/null 2>&1; then
	cmds+=("srt=$(command -v srt) /bin/true")
else
	log "srt not installed: skipped"
fi

hutch_cgroups() { find /sys/fs/cgroup -maxdepth 5 -type d -name 'hutch-*' 2>/dev/null | wc -l; }
cgroups_before=$(hutch_cgroups)
versions="hutch $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
command -v bwrap >/dev/null 2>&1 && versions+=", $(bwrap --version)"
command -v runc >/dev/null 2>&1 && versions+=", $(runc --version | head -1)"
command -v runsc >/dev/null 2>&1 && versions+=", runsc $(runsc --version 2>/dev/null | head -1)"
if [ -n "$markdown" ]; then echo "Versions: $versions."; echo; else echo "$versions"; fi
"$work/startup" -n "$n" -warmup "$warmup" -p "$workers" -pn "$pn" -dir "$work/ws" \
	-ratio "$ratios" $markdown "${cmds[@]}"

# Nothing may outlive the benchmark.
leaked=$(($(hutch_cgroups) - cgroups_before))
[ "$leaked" -le 0 ] || log "warning: $leaked hutch cgroups appeared during the run and are still there"
