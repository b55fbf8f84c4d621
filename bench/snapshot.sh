#!/usr/bin/env bash
# Snapshot benchmark: what `hutch snapshot`, `hutch create --snapshot` and
# `hutch fork -n 1` / `-n 10` cost on a served sandbox's data, against
# copying the same files with cp and tar, in the same run, on this machine.
# Builds hutch, starts `hutch serve` on a state directory of its own (on
# the disk of /var/tmp, as /var/lib/hutch would be), and for each base —
# an image (busybox, imported into that state directory) and the host's
# root — makes two source sandboxes with the CLI: one that wrote 100 MiB
# (four files of 20 MiB, 2048 of 10 KiB, after writing and deleting a few
# more) and one that wrote 7 KiB (three small files). Each round, per
# source, times (the CLI's start included, `sync` before each):
#   hutch ls                the CLI's and the API's own cost (reference)
#   hutch create            a sandbox of the base, no snapshot (reference)
#   hutch snapshot          the source's writes copied to the state dir
#   hutch create --snapshot a sandbox from that snapshot
#   hutch fork -n 1, -n 10  a snapshot and one or ten sandboxes from it
# and, on the same files — the source's own upper directory (a tmpfs),
# and the snapshot's layer in the state dir:
#   cp -a upper to tmpfs    (a tmpfs of the run's own)
#   cp -a upper to disk     (the state dir's file system: where a snapshot
#                           writes)
#   tar | tar upper to disk
#   cp -a layer to tmpfs    (what a fork over the host's root copies)
# The base "gvisor" is the host's root under the gVisor tier, whose
# snapshots save the sandbox's kernel, processes and memory too (runsc
# checkpoint) and whose creates from them restore copies (runsc restore):
# its rows compare that with the same copies of its files. The base
# "microvm" is the image under the microvm tier (under emulation where
# there is no KVM, with scripts/guest-kernel.sh's kernel): its snapshots
# save the guest while it goes on (QEMU's migration) with the files its
# agent exports, and its creates from them restore copies; its files are
# in the guest's memory, so its rows compare with copying the saved
# state and the snapshot's layer:
#   cp -a memory to disk    (the saved state, in the state dir's file
#                           system: what a snapshot's save writes)
# Sandboxes, snapshots and copies are removed between rounds (untimed).
# `cp --reflink=auto` is not measured: neither tmpfs nor ext4 makes
# reflinks, so it is cp -a.
#
# Usage: bench/snapshot.sh [--markdown] [-n N] [--bases LIST] [--runsc PATH]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         rounds (default 5)
#   --bases LIST of image, host, gvisor, microvm (default image,host, and
#                gvisor when there is a runsc, and microvm when there is
#                a guest kernel)
#   --runsc PATH runsc for gvisor (default: $RUNSC, else runsc on PATH)
#
# Needs root; installs busybox-static with apt-get when missing. No
# network: the daemon listens on a unix socket of the run only. It is
# stopped by its pid at the end (destroying its sandboxes), everything
# mounted under the run's directory unmounted, the directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=5 markdown="" bases="" runsc=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) n=$2; shift ;;
	--bases) bases=$2; shift ;;
	--runsc) runsc=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "snapshot.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
runsc=${runsc:-${RUNSC:-$(command -v runsc || true)}}
if [ -z "$bases" ]; then
	bases=image,host
	[ -z "$runsc" ] || bases=$bases,gvisor
	[ ! -e /var/cache/hutch/guest-kernel/current ] || bases=$bases,microvm
fi
for b in ${bases//,/ }; do
	case "$b" in image | host | gvisor | microvm) ;; *) echo "snapshot.sh: --bases: unknown base $b" >&2; exit 2 ;; esac
done
case ",$bases," in *,gvisor,*) [ -x "$runsc" ] || { echo "snapshot.sh: gvisor needs runsc (--runsc PATH)" >&2; exit 2; } ;; esac
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve, images)"; exit 1; }
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
static_busybox || apt_install busybox-static

work=$(mktemp -d /var/tmp/hutch-bench-snapshot.XXXXXX)
chmod 711 "$work"
serve_pid=""
cleanup() {
	set +e
	stop_pid "$serve_pid"
	remove_work "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build_tools "$work"
hutch=$work/hutch state=$work/state
mkdir -p "$work/tmpfs" "$work/disk" "$work/t"
mount -t tmpfs -o size=4g,mode=700 tmpfs "$work/tmpfs"
busybox_image_tar "$work" bench.local/busybox:1
HUTCH_STATE_DIR=$state "$hutch" image import "$work/image.tar" >/dev/null

# The daemon: sandboxes live the whole run; the tenant's memory quota
# (the sum of its sandboxes' limits) has room for all of them.
serve_start "$hutch" "$work" "$state" --default-timeout 2h --tenant-memory 64g --allow-emulation ${runsc:+--runsc "$runsc"}

# What the sources write, with busybox's applets (in either base), in
# their workspace.
big='set -e; b=busybox
$b mkdir -p data/big data/small
exec 3</dev/urandom
for i in 1 2 3 4; do $b head -c 20971520 <&3 > data/big/f$i; done
$b head -c 4194304 <&3 > data/big/f5
r=$($b head -c 7677 <&3 | $b base64 | $b tr -d "\n")
i=0
while [ $i -lt 2096 ]; do printf "%04d%s" $i "$r" > data/small/s$i; i=$((i+1)); done
$b rm data/big/f5
while [ $i -gt 2048 ]; do i=$((i-1)); $b rm data/small/s$i; done'
small='set -e; b=busybox
$b head -c 4096 /dev/urandom > a; $b head -c 2048 /dev/urandom > b; $b head -c 1024 /dev/urandom > c'

ns() { date +%s%N; }
# timed NAME CMD...: runs CMD (its output in $work/out), its time in µs
# appended to $work/t/NAME, after a sync.
timed() {
	local name=$1 t0 t1
	shift
	sync
	t0=$(ns)
	"$@" >"$work/out"
	t1=$(ns)
	echo $(((t1 - t0) / 1000)) >>"$work/t/$name"
}
# The sandboxes a command printed (one id a line), destroyed.
rm_printed() { xargs -r "$hutch" rm <"$work/out" >/dev/null; }
copy_to() { cp -a "$1" "$2"; }
tar_to() { mkdir "$2" && tar -C "$1" -cf - . | tar -C "$2" -xf -; }

# The rounds of one source: base $1 (its create flags in $2), data $3.
measure() {
	local base=$1 flags=$2 data=$3 src upper sid layer k
	src=$("$hutch" create $flags --timeout 2h)
	"$hutch" exec "$src" -- sh -c "${!data}; busybox touch .bench-$src"
	upper=$state/sandboxes/$src/layer/upper
	if [ "$base" = microvm ]; then
		upper="" # in the guest's memory
		log "$base/$data: $("$hutch" exec "$src" -- busybox du -sh /workspace | cut -f1) in the guest"
	elif [ "$base" = gvisor ]; then
		# gVisor's layer is in runsc's state directory: the one that
		# holds the mark.
		upper=$(find /run/hutch-gvisor -mindepth 4 -maxdepth 8 -name ".bench-$src" -path '*/layer/upper/*' | head -1)
		upper=${upper%%/layer/upper/*}/layer/upper
	fi
	if [ -n "$upper" ]; then
		[ -d "$upper" ] || { log "no upper directory at $upper"; exit 1; }
		log "$base/$data: $(du -sh "$upper" | cut -f1) in $(find "$upper" | wc -l) entries"
	fi
	k=$base/$data
	mkdir -p "$work/t/$k"
	for _ in $(seq "$n"); do
		timed "$k/ls" "$hutch" ls
		timed "$k/create" "$hutch" create $flags
		rm_printed
		timed "$k/snapshot" "$hutch" snapshot "$src"
		sid=$(cat "$work/out")
		timed "$k/create --snapshot" "$hutch" create --snapshot "$sid"
		rm_printed
		layer=$(find "$state/snapshots/layers" -mindepth 1 -maxdepth 1)
		[ "$(echo "$layer" | wc -l)" = 1 ] || { log "want one snapshot layer, have: $layer"; exit 1; }
		timed "$k/cp -a layer to tmpfs" copy_to "$layer" "$work/tmpfs/c"
		rm -rf "$work/tmpfs/c"
		if [ -z "$upper" ]; then
			timed "$k/cp -a memory to disk" copy_to "$state/snapshots/memory/$sid" "$work/disk/c"
			rm -rf "$work/disk/c"
		fi
		"$hutch" snapshot rm "$sid" >/dev/null
		timed "$k/fork -n 1" "$hutch" fork -n 1 "$src"
		rm_printed
		timed "$k/fork -n 10" "$hutch" fork -n 10 "$src"
		rm_printed
		[ -n "$upper" ] || continue
		timed "$k/cp -a upper to tmpfs" copy_to "$upper" "$work/tmpfs/c"
		rm -rf "$work/tmpfs/c"
		timed "$k/cp -a upper to disk" copy_to "$upper" "$work/disk/c"
		rm -rf "$work/disk/c"
		timed "$k/tar | tar upper to disk" tar_to "$upper" "$work/disk/c"
		rm -rf "$work/disk/c"
	done
	"$hutch" rm "$src" >/dev/null
}

log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for b in ${bases//,/ }; do
	case "$b" in
	image) flags="--image bench.local/busybox:1" ;;
	host) flags="" ;;
	gvisor) flags="--tier gvisor" ;;
	microvm) flags="--tier microvm --image bench.local/busybox:1" ;;
	esac
	measure "$b" "$flags" big
	measure "$b" "$flags" small
done
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# p50 FILE and min, max: milliseconds, one decimal.
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100+0.5); if (i<1) i=1; printf "%.1f", a[i]/1000}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a/b}'; }
for b in ${bases//,/ }; do
	ways=("ls" "create" "snapshot" "create --snapshot" "fork -n 1" "fork -n 10"
		"cp -a upper to tmpfs" "cp -a upper to disk" "tar | tar upper to disk" "cp -a layer to tmpfs")
	ratios='snapshot;cp -a upper to disk
snapshot;cp -a upper to tmpfs
snapshot;tar | tar upper to disk'
	if [ "$b" = microvm ]; then
		ways=("ls" "create" "snapshot" "create --snapshot" "fork -n 1" "fork -n 10" "cp -a memory to disk" "cp -a layer to tmpfs")
		ratios='snapshot;cp -a memory to disk'
	fi
	ratios="$ratios
create --snapshot;create
create --snapshot;(create + cp -a layer to tmpfs)
fork -n 1;(snapshot + create --snapshot)
fork -n 10;fork -n 1"
	for d in big small; do
		k=$b/$d
		case "$b" in
		gvisor) label="host under gVisor (memory too)" ;;
		microvm) label="image under the microVM (memory too)" ;;
		*) label=$b ;;
		esac
		label="$label, $([ "$d" = big ] && echo "100 MiB" || echo "7 KiB")"
		declare -A p=()
		for w in "${ways[@]}"; do p[$w]=$(pct "$work/t/$k/$w" 50); done
		if [ -n "$markdown" ]; then
			echo "| $label | p50 ms | min ms | max ms |"
			echo "| --- | ---: | ---: | ---: |"
			for w in "${ways[@]}"; do
				echo "| \`${w//|/\\|}\` | ${p[$w]} | $(pct "$work/t/$k/$w" 0) | $(pct "$work/t/$k/$w" 100) |"
			done
			echo
			echo "| ratio ($label, p50) | |"
			echo "| --- | ---: |"
		else
			printf '%-30s %10s %10s %10s\n' "$label" "p50 ms" "min ms" "max ms"
			for w in "${ways[@]}"; do
				printf '%-30s %10s %10s %10s\n' "$w" "${p[$w]}" "$(pct "$work/t/$k/$w" 0)" "$(pct "$work/t/$k/$w" 100)"
			done
		fi
		p["(snapshot + create --snapshot)"]=$(awk -v a="${p[snapshot]}" -v b="${p["create --snapshot"]}" 'BEGIN {print a + b}')
		p["(create + cp -a layer to tmpfs)"]=$(awk -v a="${p[create]}" -v b="${p["cp -a layer to tmpfs"]}" 'BEGIN {print a + b}')
		while IFS=';' read -r a b2; do
			r=$(ratio "${p[$a]}" "${p[$b2]}")
			if [ -n "$markdown" ]; then echo "| ${a//|/\\|} / ${b2//|/\\|} | $r |"; else printf '  ratio %-52s %6s\n' "$a / $b2" "$r"; fi
		done <<<"$ratios"
		[ -z "$markdown" ] || echo
		unset p
	done
done
