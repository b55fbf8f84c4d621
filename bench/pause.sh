#!/usr/bin/env bash
# Pause-to-disk benchmark: what `hutch pause` and `hutch resume` cost for a
# served sandbox that is saved to disk with its memory — a microVM of an
# image (QEMU's state written to the sandbox's checkpoint directory) and,
# when runsc is there, a gVisor sandbox (runsc checkpoint) — against the
# floor of writing and reading the same number of bytes on the same disk
# (dd with fsync, and a read after dropping the page cache), in the same
# run, on this machine. Builds hutch, starts `hutch serve` on a state
# directory of its own (on the disk of /var/tmp, as /var/lib/hutch would
# be) with a busybox image imported, and for each tier and memory size
# makes a sandbox that holds a quarter of its memory in random data (a
# file of its /tmp, a tmpfs: the sandbox's own memory), then times, per
# round:
#   pause       hutch pause, the CLI's start included (saved to disk)
#   resume      hutch resume (the processes go on, their memory back)
#   first exec  hutch exec … true after the resume
# and reports the saved state's size, and pause and resume per GiB of
# state and of the sandbox's memory. E2B's published anchors (about 4 s
# per GiB to pause, about 1 s to resume) are printed beside them.
#
# Usage: bench/pause.sh [--markdown] [-n N] [--tiers LIST] [--memory LIST] [--runsc PATH]
#   --markdown     print a markdown table (for docs/benchmarks.md)
#   -n N           rounds per tier and size (default 3)
#   --tiers LIST   microvm, gvisor (default microvm, and gvisor when there
#                  is a runsc)
#   --memory LIST  the sandboxes' memory, comma-separated (default 512m,1g);
#                  each holds a quarter of it in random data
#   --runsc PATH   runsc for gvisor (default: $RUNSC, else runsc on PATH)
#
# Needs root and, for microvm, scripts/guest-kernel.sh's kernel (it runs
# under emulation where there is no KVM); installs busybox-static and
# erofs-utils with apt-get when missing. No network: the daemon listens on
# a unix socket of the run only, and its sandboxes have none. The daemon is
# stopped by its pid at the end and the run's directory removed.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

markdown=0 rounds=3 tiers="" memory=512m,1g runsc=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) rounds=$2; shift ;;
	--tiers) tiers=$2; shift ;;
	--memory) memory=$2; shift ;;
	--runsc) runsc=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "pause.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
runsc=${runsc:-${RUNSC:-$(command -v runsc || true)}}
if [ -z "$tiers" ]; then
	tiers=microvm
	[ -z "$runsc" ] || tiers=microvm,gvisor
fi
for t in ${tiers//,/ }; do
	case "$t" in microvm | gvisor) ;; *) echo "pause.sh: --tiers: unknown tier $t" >&2; exit 2 ;; esac
done
case ",$tiers," in *,gvisor,*) [ -x "$runsc" ] || { echo "pause.sh: gvisor needs runsc (--runsc PATH)" >&2; exit 2; } ;; esac
[ "$(id -u)" = 0 ] || { log "needs root (hutch serve, microVMs)"; exit 1; }
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
static_busybox || apt_install busybox-static
command -v mkfs.erofs >/dev/null 2>&1 || apt_install erofs-utils

work=$(mktemp -d /var/tmp/hutch-bench-pause.XXXXXX)
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
busybox_image_tar "$work" bench.local/busybox:1
HUTCH_STATE_DIR=$state "$hutch" image import "$work/image.tar" >/dev/null
serve_start "$hutch" "$work" "$state" --default-timeout 2h --tenant-memory 64g --allow-emulation ${runsc:+--runsc "$runsc"}

ms() { echo $(( ($2 - $1) / 1000000 )); }
now() { date +%s%N; }
mib() { local n=${1%[mM]}; case "$1" in *[gG]) n=$(( ${1%[gG]} * 1024 )) ;; esac; echo "$n"; }

rows=()
for tier in ${tiers//,/ }; do
	for mem in ${memory//,/ }; do
		fill=$(( $(mib "$mem") / 4 ))
		flags="--tier $tier --memory $mem --net none --image bench.local/busybox:1"
		p=() r=() x=() s=()
		for i in $(seq "$rounds"); do
			# shellcheck disable=SC2086
			id=$("$hutch" create $flags | tail -n1)
			"$hutch" exec "$id" -- sh -c "busybox head -c ${fill}m /dev/urandom >/tmp/fill; (while :; do busybox sleep 1; done) >/dev/null 2>&1 &"
			sync
			t0=$(now); "$hutch" pause "$id" >/dev/null; t1=$(now)
			size=$(du -sm "$state/sandboxes/$id/checkpoint" | cut -f1)
			t2=$(now); "$hutch" resume "$id" >/dev/null; t3=$(now)
			"$hutch" exec "$id" -- true; t4=$(now)
			"$hutch" rm "$id" >/dev/null
			p+=("$(ms "$t0" "$t1")") r+=("$(ms "$t2" "$t3")") x+=("$(ms "$t3" "$t4")") s+=("$size")
		done
		med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
		mp=$(med "${p[@]}") mr=$(med "${r[@]}") mx=$(med "${x[@]}") ms_=$(med "${s[@]}")
		# The floor: the same bytes written (fsync) and read (cold) on
		# the state directory's disk.
		f0=$(now); dd if=/dev/urandom of="$work/floor" bs=1M count="$ms_" conv=fsync status=none; f1=$(now)
		echo 3 >/proc/sys/vm/drop_caches
		f2=$(now); cat "$work/floor" >/dev/null; f3=$(now)
		rm -f "$work/floor"
		rows+=("$tier|$mem|$fill|$ms_|$mp|$mr|$mx|$(ms "$f0" "$f1")|$(ms "$f2" "$f3")")
	done
done

per() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# secs_per_gib MS MIB: MS milliseconds for MIB MiB, in seconds per GiB.
secs_per_gib() { awk -v ms="$1" -v mib="$2" 'BEGIN { if (mib > 0) printf "%.2f", ms / 1000 / (mib / 1024); else print "-" }'; }
if [ "$markdown" = 1 ]; then
	echo "| tier | memory | held | state | pause | resume | first exec | pause s/GiB of state | resume s/GiB of state | floor write | floor read | pause / floor write |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
else
	printf '%-8s %7s %6s %7s %8s %8s %8s %10s %10s %9s %9s %8s\n' tier memory held state pause resume exec p-s/GiB r-s/GiB fl-write fl-read p/fl-w
fi
for row in "${rows[@]}"; do
	IFS='|' read -r tier mem fill size p r x fw fr <<<"$row"
	ps=$(secs_per_gib "$p" "$size") rs=$(secs_per_gib "$r" "$size") ratio=$(per "$p" "$fw")
	if [ "$markdown" = 1 ]; then
		echo "| $tier | $mem | ${fill} MiB | ${size} MiB | ${p} ms | ${r} ms | ${x} ms | $ps | $rs | ${fw} ms | ${fr} ms | ${ratio}× |"
	else
		printf '%-8s %7s %5sM %6sM %6sms %6sms %6sms %10s %10s %7sms %7sms %7s×\n' "$tier" "$mem" "$fill" "$size" "$p" "$r" "$x" "$ps" "$rs" "$fw" "$fr" "$ratio"
	fi
done
echo "E2B's anchors: about 4 s per GiB to pause, about 1 s to resume (Firecracker snapshots)."
