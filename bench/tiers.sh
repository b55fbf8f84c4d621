#!/usr/bin/env bash
# Isolation tiers benchmark, in one run on this machine:
#   1. start-up: `hutch run --tier gvisor -- /bin/true`, with gVisor's file
#      access through its gofer (hutch's default, "gvisor") and direct
#      (--gvisor-directfs, "gvisor-dfs"), against
#        runsc-run    `runsc run` of hutch's own spec (taken from a sandbox
#                     hutch runs, the workspace bound directly) with hutch's
#                     runsc flags: runsc's part of hutch's sandbox, the
#                     floor of the tier, without hutch's own process and
#                     preparation;
#        runsc-do-eq  `runsc do` with the isolation of hutch's sandbox where
#                     do can give it: the same runsc flags (no direct file
#                     access, no host sockets, no network), the command's
#                     ids mapped as hutch maps them, no overlay over the
#                     read-only root;
#        runsc-do     `runsc do` with gVisor's defaults: direct file
#                     access, an in-memory overlay over the root, the
#                     Sentry and the command root (no user namespace of the
#                     spec's), no network;
#      both `runsc do` on a read-only bind of the host's root filesystem
#      (never "/" itself); and against hutch's namespace tier. Every gVisor
#      command line goes through the same one-line /bin/sh wrapper;
#   2. file-heavy workloads: `git status` in a committed tree of 10,000
#      files with one changed, and a compile (`make -B` of small C files),
#      outside any sandbox, under the namespace tier and under gVisor
#      through its gofer and with direct file access, each in a copy of
#      its own (git rewrites the index where its stat data differ: gVisor
#      numbers inodes its own way, so every run there rehashes the tree).
# Both with the measuring tool of bench/startup.sh (interleaved rounds,
# fork to wait4), and ratios.
#
# Usage: bench/tiers.sh [--markdown] [-n N] [-w WARMUP] [--wn N] [--ww WARMUP] [--files COUNT]
#   --markdown     print markdown tables (for docs/benchmarks.md)
#   -n N           timed sequential runs per command, start-up (default 50)
#   -w WARMUP      untimed warm-up runs per command, start-up (default 5)
#   --wn N         timed runs per command, workloads (default 10)
#   --ww WARMUP    untimed warm-up runs per command, workloads (default 2)
#   --files COUNT  files in the git tree (default 10000)
#
# Needs root (the gVisor tier does, for now), runsc ($RUNSC, else runsc on
# PATH; the README's test command installs the pinned version), git, make
# and a C compiler. No network traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=50 warmup=5 wn=10 ww=2 markdown="" files=10000
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	-n) n=$2; shift ;;
	-w) warmup=$2; shift ;;
	--wn) wn=$2; shift ;;
	--ww) ww=$2; shift ;;
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
for tool in git make cc; do
	command -v "$tool" >/dev/null || { log "needs $tool"; exit 2; }
done

work=$(mktemp -d /tmp/hutch-bench.XXXXXX)
chmod 755 "$work"
root="$work/root"
cleanup() {
	# runsc run binds a network namespace into each state directory.
	if [ -d "$work/state" ]; then
		grep -F " $work/state/" /proc/self/mountinfo | awk '{print $5}' | while read -r m; do
			umount "$m" 2>/dev/null || true
		done
	fi
	if mountpoint -q "$root" 2>/dev/null; then umount "$root" || true; fi
	# Never remove through the host's root: leave it all if it stays bound.
	if mountpoint -q "$root" 2>/dev/null; then
		log "could not unmount $root; leaving $work"
		return
	fi
	rm -rf "$work" || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
build_tools "$work" startup

log "hutch $(git rev-parse --short HEAD 2>/dev/null || echo '?'), runsc $runsc"

# The root of runsc do: the host's root filesystem, bound read-only (and
# private, so that nothing mounted later below / shows in it), as hutch
# gives runsc the host's root read-only.
mkdir "$root"
mount --bind / "$root"
mount --make-private "$root"
mount -o remount,bind,ro,nosuid,nodev "$root"

ws="$work/ws"
mkdir "$ws" "$work/state"
: >"$work/empty"
# wrap NAME COMMAND... writes $work/NAME, a one-line wrapper that runs
# COMMAND with the wrapper's arguments after it.
wrap() {
	local name=$1
	shift
	printf '#!/bin/sh\nexec %s "$@"\n' "$*" >"$work/$name"
	chmod +x "$work/$name"
}
flags="--network=none --overlay2=none --oci-seccomp --directfs=false --host-uds=none --ignore-cgroups"
ids="-uid-map '0 1000000000 65536' -gid-map '0 1000000000 65536'"
wrap gvisor "$work/hutch" run --tier gvisor --runsc "$runsc"
wrap gvisor-dfs "$work/hutch" run --tier gvisor --runsc "$runsc" --gvisor-directfs
wrap runsc-do "$runsc" --network=none do -root "$root"
wrap runsc-do-eq "$runsc" "$flags" do -root "$root" -force-overlay=false "$ids"
# runsc run: ID gets a state directory of its own, as in hutch.
printf '#!/bin/sh\nexec %s --root %s/state/"$1" --log %s/state/"$1".log --log-format=json %s run --bundle %s/bundle "$1"\n' \
	"$runsc" "$work" "$work" "$flags" "$work" >"$work/runsc-run"
chmod +x "$work/runsc-run"

# hutch's own spec for the workspace, from a sandbox while it runs: its
# root becomes the read-only bind, the writable area the workspace itself,
# its command /bin/true (which ignores the argument).
log "hutch's spec"
(cd "$ws" && exec "$work/hutch" run --tier gvisor --runsc "$runsc" -- /bin/sleep 30 </dev/null >/dev/null 2>&1) &
hp=$!
spec=""
for _ in $(seq 300); do
	for d in /run/hutch-gvisor/hutch-*; do
		if [ -f "$d/config.json" ] && [ "$(cut -d' ' -f1 "$d/owner" 2>/dev/null)" = "$hp" ]; then
			spec=$d
		fi
	done
	[ -n "$spec" ] && break
	sleep 0.1
done
[ -n "$spec" ] || { log "no spec of hutch's found"; exit 1; }
mkdir "$work/bundle"
sed -e "s#$spec/rootfs#$root#; s#$spec/areas/0#$ws#; s#$spec/empty#$work/empty#; s#\"/bin/sleep\"#\"/bin/true\"#" \
	"$spec/config.json" >"$work/bundle/config.json"
kill -TERM "$hp"
wait "$hp" || true
if ! grep -q '"/bin/true"' "$work/bundle/config.json"; then
	log "hutch's spec does not run the command it was given"
	exit 1
fi
if grep -q /run/hutch-gvisor/ "$work/bundle/config.json"; then
	log "hutch's spec names more of its state than the root, the area and the mask file:"
	grep /run/hutch-gvisor/ "$work/bundle/config.json" >&2
	exit 1
fi

log "start-up"
"$work/startup" -n "$n" -warmup "$warmup" -p 0 -rss-runs 5 -dir "$ws" $markdown \
	-ratio "gvisor/runsc-run,gvisor/runsc-do-eq,gvisor-dfs/runsc-do,gvisor/runsc-do,runsc-run/runsc-do-eq,runsc-do-eq/runsc-do,gvisor-dfs/gvisor,gvisor/namespace" \
	"namespace=$work/hutch run -- /bin/true" \
	"gvisor=$work/gvisor -- /bin/true" \
	"gvisor-dfs=$work/gvisor-dfs -- /bin/true" \
	"runsc-run=$work/runsc-run {id}" \
	"runsc-do-eq=$work/runsc-do-eq /bin/true" \
	"runsc-do=$work/runsc-do /bin/true"

# The tree: COUNT small files in directories of 100, committed (and
# packed), one of them changed, so that git status stats every file and
# reads the index; and a compile: small C files that include a few
# system headers, built into one program. One copy per environment.
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
	git -c gc.auto=0 -c user.name=bench -c user.email=bench@localhost commit -qm tree
	git gc -q
	echo changed >d0/f0
)
src="$work/src"
mkdir "$src"
for i in 1 2 3 4 5 6 7 8; do
	cat >"$src/m$i.c" <<EOF
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int f$i(int x) { char b[64]; snprintf(b, sizeof b, "%d", x); return (int)strlen(b) + x * $i; }
EOF
done
printf '#include <stdio.h>\nint main(void) { puts("ok"); return 0; }\n' >"$src/main.c"
printf 'OBJS := $(patsubst %%.c,%%.o,$(wildcard *.c))\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%%.o: %%.c\n\t$(CC) -O1 -c -o $@ $<\n' >"$src/Makefile"
for env in outside namespace gvisor gvisor-dfs; do
	cp -a "$tree" "$work/tree-$env"
	cp -a "$src" "$work/src-$env"
done

log "git status in the tree"
"$work/startup" -n "$wn" -warmup "$ww" -p 0 -rss-runs 3 -dir "$tree" $markdown \
	-ratio "namespace/outside,gvisor/outside,gvisor-dfs/outside,gvisor-dfs/gvisor" \
	"outside@$work/tree-outside=/usr/bin/git status --porcelain" \
	"namespace@$work/tree-namespace=$work/hutch run -- git status --porcelain" \
	"gvisor@$work/tree-gvisor=$work/gvisor -- git status --porcelain" \
	"gvisor-dfs@$work/tree-gvisor-dfs=$work/gvisor-dfs -- git status --porcelain"

log "a compile: make -B of $(ls "$src"/*.c | wc -l) C files"
"$work/startup" -n "$wn" -warmup "$ww" -p 0 -rss-runs 3 -dir "$src" $markdown \
	-ratio "namespace/outside,gvisor/outside,gvisor-dfs/outside,gvisor-dfs/gvisor" \
	"outside@$work/src-outside=make -B -s" \
	"namespace@$work/src-namespace=$work/hutch run -- make -B -s" \
	"gvisor@$work/src-gvisor=$work/gvisor -- make -B -s" \
	"gvisor-dfs@$work/src-gvisor-dfs=$work/gvisor-dfs -- make -B -s"
