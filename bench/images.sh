#!/usr/bin/env bash
# Images benchmark: how much starting a sandbox from an image of hutch's
# store costs against starting it on the host's root, in the same run
# (`hutch run --image IMG -- /bin/true` against `hutch run -- /bin/true`),
# with the measuring tool of bench/startup.sh.
#
# Usage: bench/images.sh [--markdown] [-n N] [-w WARMUP]
#   --markdown   print markdown tables (for docs/benchmarks.md)
#   -n N         timed sequential runs per sandbox (default 200)
#   -w WARMUP    untimed warm-up runs per sandbox (default 10)
#
# Needs root (a sandbox from an image does, for now). The image is made
# here from the host's busybox (busybox-static is installed with apt-get
# when missing): a root with busybox and its applets, saved in the `docker
# save` format and brought in with `hutch image import` into a state
# directory of this run's own. No network traffic.
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
	*) echo "images.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	log "needs root: a sandbox from an image does, for now"
	exit 2
fi
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"
static_busybox || apt_install busybox-static

work=$(mktemp -d /tmp/hutch-bench.XXXXXX)
chmod 755 "$work"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
build_tools "$work" startup

# The image: one layer, a root made of busybox.
busybox_image_tar "$work" bench.local/busybox:1
export HUTCH_STATE_DIR="$work/state"
"$work/hutch" image import "$work/image.tar" >/dev/null
mkdir "$work/ws"

log "hutch $(git rev-parse --short HEAD 2>/dev/null || echo '?'), image of $(du -sh "$work/rootfs" | cut -f1) ($(find "$work/rootfs" | wc -l) entries)"
"$work/startup" -n "$n" -warmup "$warmup" -p 0 -rss-runs 10 -dir "$work/ws" $markdown \
	-ratio "image/host" \
	"host=$work/hutch run -- /bin/true" \
	"image=$work/hutch run --image bench.local/busybox:1 -- /bin/true"
