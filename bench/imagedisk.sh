#!/usr/bin/env bash
# Image sharing benchmark: what N live sandboxes of one image take on disk
# and in memory. Each is `hutch run --image IMG -- sleep S`, all running at
# once; the figures are the image store's size before and while they run,
# the disk of the file system that holds it, and the memory the machine
# uses (MemTotal - MemAvailable), before and while they run, per sandbox.
#
# Usage: bench/imagedisk.sh [-n N] [--markdown]
#
# Needs root (it makes the image with the host's busybox, installed with
# apt-get when missing, and runs the sandboxes as root). No network traffic.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=100 markdown=""
while [ $# -gt 0 ]; do
	case "$1" in
	-n) n=$2; shift ;;
	--markdown) markdown=1 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "imagedisk.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$(id -u)" = 0 ] || { log "needs root"; exit 2; }
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
static_busybox || apt_install busybox-static

work=$(mktemp -d /var/tmp/hutch-bench.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
	set +e
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
build_tools "$work"
busybox_image_tar "$work" bench.local/busybox:1
export HUTCH_STATE_DIR="$work/state"
"$work/hutch" image import "$work/image.tar" >/dev/null
mkdir "$work/ws"

used_mem() { awk '/^MemTotal:/ {t=$2} /^MemAvailable:/ {a=$2} END {print (t-a)*1024}' /proc/meminfo; }
used_disk() { df -B1 --output=used "$work" | tail -1; }
store() { du -sb "$HUTCH_STATE_DIR/images" | cut -f1; }

sync
store0=$(store) disk0=$(used_disk) mem0=$(used_mem)
log "starting $n sandboxes of the image"
for i in $(seq "$n"); do
	(cd "$work/ws" && exec "$work/hutch" run --image bench.local/busybox:1 -- sleep 120) &
	pids+=($!)
done
# Wait until every sandbox's command runs.
for _ in $(seq 600); do
	running=$(pgrep -c -f '^sleep 120$' || true)
	[ "$running" -ge "$n" ] && break
	sleep 0.2
done
sleep 2
sync
store1=$(store) disk1=$(used_disk) mem1=$(used_mem)
log "$running sandboxes running"
kib() { echo $(( ($1) / 1024 )); }
if [ -n "$markdown" ]; then
	echo "| measure | before | with $n sandboxes | per sandbox |"
	echo "| --- | ---: | ---: | ---: |"
	echo "| image store (KiB) | $(kib "$store0") | $(kib "$store1") | $(kib "($store1 - $store0) / $n") |"
	echo "| disk used (KiB) | $(kib "$disk0") | $(kib "$disk1") | $(kib "($disk1 - $disk0) / $n") |"
	echo "| memory used (KiB) | $(kib "$mem0") | $(kib "$mem1") | $(kib "($mem1 - $mem0) / $n") |"
else
	printf '%-20s %12s %18s %12s\n' measure before "with $n" "per sandbox"
	printf '%-20s %12s %18s %12s\n' "image store KiB" "$(kib "$store0")" "$(kib "$store1")" "$(kib "($store1 - $store0) / $n")"
	printf '%-20s %12s %18s %12s\n' "disk used KiB" "$(kib "$disk0")" "$(kib "$disk1")" "$(kib "($disk1 - $disk0) / $n")"
	printf '%-20s %12s %18s %12s\n' "memory used KiB" "$(kib "$mem0")" "$(kib "$mem1")" "$(kib "($mem1 - $mem0) / $n")"
fi
