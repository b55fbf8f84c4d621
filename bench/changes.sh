#!/usr/bin/env bash
# Change-set benchmark: `hutch changes show --stat` on a 20,000-file
# workspace with 200 changed files (100 edited, 50 added, 50 deleted)
# against what git needs for the same answer on the same tree, `git status
# --porcelain` then `git diff --stat`, in the same run, on this machine;
# goal: at most 1.0x. Builds hutch into a temporary directory, makes the
# workspace there (a git repository, committed), makes the changes once
# through overlayfs into a change set of a store of its own
# (XDG_STATE_HOME in the directory), as hutch run --review keeps them, and
# once in a copy of the repository's working tree for git; then times each
# way N times, alternating, and prints p50, p90 and the ratio.
#
# Usage: bench/changes.sh [--markdown] [-n N] [-w WARMUP]
#   --markdown   print a markdown table (for docs/benchmarks.md)
#   -n N         timed rounds (default 50)
#   -w WARMUP    untimed rounds first (default 5)
#
# Needs unshare (util-linux) and a kernel that mounts overlayfs with
# userxattr in a user namespace (5.11 or later), and git. No network. The
# directory is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=50 warmup=5 markdown=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "changes.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
command -v git >/dev/null || { log "needs git"; exit 1; }

work=$(mktemp -d /tmp/hutch-changes-bench.XXXXXX)
cleanup() {
	set +e
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work"
ws=$work/ws
log "making a 20,000-file workspace"
mkdir -p "$ws"
for d in $(seq -w 0 99); do
	mkdir "$ws/pkg$d"
	for f in $(seq -w 0 199); do printf 'package p%s\n\n// file %s of %s\nvar X = %s\n' "$d" "$f" "$d" "$f" >"$ws/pkg$d/f$f.go"; done
done
git -C "$ws" init -q -b main
git -C "$ws" config gc.auto 0 # no gc in the background while the tree is copied
git -C "$ws" add -A
git -C "$ws" -c user.name=bench -c user.email=bench@localhost commit -qm base

# The 200 changes, as one script run in each tree.
changes='for d in $(seq -w 0 99); do echo "// edited" >> pkg$d/f000.go; done
for d in $(seq -w 0 49); do echo "package p$d" > pkg$d/new.go; rm pkg$d/f199.go; done'

# The change set: the store's layout (meta.json, upper, work), filled
# through overlayfs as hutch run --review does.
id=0123456789ab
set_dir=$work/state/hutch/changes/$id
mkdir -p "$set_dir/upper" "$set_dir/work" "$work/mnt"
chmod 700 "$work/state/hutch/changes" "$set_dir"
printf '{"id": "%s", "workspace": "%s", "created": "%s", "runs": 1}\n' "$id" "$ws" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$set_dir/meta.json"
unshare --user --map-root-user --mount sh -ec \
	'mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/work,userxattr" "$3" && cd "$3" && eval "$4"' \
	sh "$ws" "$set_dir" "$work/mnt" "$changes"

# The same changes in a copy of the repository, for git.
cp -a "$ws" "$work/git"
(cd "$work/git" && eval "$changes")
git -C "$work/git" status --porcelain >/dev/null # the index refreshed once, as a user's would be

export XDG_STATE_HOME=$work/state
hutch_stat() { "$work/hutch" changes show --stat "$id" >/dev/null; }
git_stat() { git -C "$work/git" status --porcelain >/dev/null && git -C "$work/git" diff --stat >/dev/null; }
"$work/hutch" changes show --stat "$id" | tail -1 | grep -q ' 200 files changed' ||
	{ log "hutch changes show --stat does not count the 200 changes"; exit 1; }

ns() { date +%s%N; }
for _ in $(seq "$warmup"); do hutch_stat; git_stat; done
: >"$work/hutch.t"
: >"$work/git.t"
for _ in $(seq "$n"); do
	t0=$(ns); hutch_stat; t1=$(ns); git_stat; t2=$(ns)
	echo $(((t1 - t0) / 1000)) >>"$work/hutch.t"
	echo $(((t2 - t1) / 1000)) >>"$work/git.t"
done
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100+0.5); if (i<1) i=1; printf "%.1f", a[i]/1000}'; }
h50=$(pct "$work/hutch.t" 50) h90=$(pct "$work/hutch.t" 90)
g50=$(pct "$work/git.t" 50) g90=$(pct "$work/git.t" 90)
ratio=$(awk -v a="$h50" -v b="$g50" 'BEGIN {printf "%.2f", a/b}')
if [ -n "$markdown" ]; then
	echo "| way | p50 (ms) | p90 (ms) |"
	echo "|---|---|---|"
	echo "| hutch changes show --stat | $h50 | $h90 |"
	echo "| git status --porcelain + git diff --stat | $g50 | $g90 |"
	echo
	echo "hutch / git at p50: **${ratio}×** (goal ≤ 1.0×); $n rounds, 20,000 files, 200 changed."
else
	printf '%-44s %10s %10s\n' way "p50 ms" "p90 ms"
	printf '%-44s %10s %10s\n' "hutch changes show --stat" "$h50" "$h90"
	printf '%-44s %10s %10s\n' "git status --porcelain + git diff --stat" "$g50" "$g90"
	echo "ratio hutch/git (p50): ${ratio}x (goal <= 1.0x)"
fi
