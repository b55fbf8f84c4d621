#!/usr/bin/env bash
# Fetches the guest kernel of hutch's microVM tier: Debian's cloud kernel
# (the current kernel package linux-image-cloud-amd64 depends on, from the
# mirror apt is configured with), unpacked once and kept in
#
#   /var/cache/hutch/guest-kernel/<release>/
#     vmlinuz        the kernel as the package has it (compressed)
#     vmlinux        the same kernel uncompressed, an ELF file with a PVH
#                    entry, which QEMU boots (-kernel) without the
#                    decompression and relocation a vmlinuz starts with
#                    (a second or so of each boot under emulation); hutch
#                    boots vmlinuz where there is none
#     config         the package's /boot/config-<release>
#     modules/*.ko   the modules the guest loads, uncompressed
#     modules.order  their file names (modules/NAME.ko), one a line, in load
#                    order: every module after the modules it depends on
#                    (from the modules.dep depmod makes of the package)
#     builtin        the wanted drivers the kernel has built in, one a line
#     SHA256SUMS     sha256sum's list of every file above: hutch checks it
#                    before it boots the kernel
#
# and a symbolic link `current` next to it naming the last one fetched.
#
#   sudo scripts/guest-kernel.sh [--cache DIR] [--print-dir]
#
# The directory is the one line printed on standard output. With
# --print-dir nothing is fetched: it prints the directory `current` names,
# and fails when there is none. It also installs qemu-system-x86 (QEMU,
# which boots the guests), kmod (depmod) and erofs-utils (mkfs.erofs, for
# the EROFS roots of guests from images) when they are missing, and the
# decompressor of the kernel's own compression (lz4, xz, zstd, gzip).
#
# The guest's modules: what the virtio-serial port of hutch's agent needs
# (virtio_mmio, the transport of QEMU's microvm machine, and
# virtio_console), and what the image root and shared directories will
# need (virtio_blk, erofs, overlay, fuse, virtiofs), each with the modules
# it depends on. Those the kernel has built in are listed in `builtin`
# instead. Debian's cloud kernel (6.1, bookworm) builds all of them as
# modules, and has no CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES: the guest finds
# microvm's virtio-mmio devices in its ACPI tables.
set -euo pipefail

cache=/var/cache/hutch/guest-kernel
print_only=0
while [ $# -gt 0 ]; do
	case "$1" in
	--cache) cache=$2; shift 2 ;;
	--print-dir) print_only=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "guest-kernel: unknown argument $1 (want --cache DIR, --print-dir)" >&2; exit 2 ;;
	esac
done

log() { echo "guest-kernel: $*" >&2; }

if [ "$print_only" = 1 ]; then
	dir=$(readlink -f "$cache/current" 2>/dev/null || true)
	if [ -z "$dir" ] || [ ! -f "$dir/SHA256SUMS" ]; then
		log "no guest kernel in $cache (run scripts/guest-kernel.sh as root to fetch one)"
		exit 1
	fi
	echo "$dir"
	exit 0
fi

[ "$(id -u)" = 0 ] || { echo "guest-kernel: must run as root (apt-get installs QEMU and fetches the kernel package)" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive

# The modules the guest wants, by module name.
wanted=(virtio_mmio virtio_console virtio_blk erofs overlay fuse virtiofs)
# Their Kconfig symbols, in the same order, to tell built-in from module.
symbols=(VIRTIO_MMIO VIRTIO_CONSOLE VIRTIO_BLK EROFS_FS OVERLAY_FS FUSE_FS VIRTIO_FS)

updated=0
apt_update() {
	if [ "$updated" = 0 ]; then
		log "apt-get update"
		apt-get update -qq >&2
		updated=1
	fi
}

missing=()
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
command -v depmod >/dev/null || [ -x /usr/sbin/depmod ] || missing+=(kmod)
# mkfs.erofs makes the EROFS roots of guests from images.
command -v mkfs.erofs >/dev/null || [ -x /usr/bin/mkfs.erofs ] || missing+=(erofs-utils)
if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	log "apt-get install ${missing[*]}"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
PATH=$PATH:/usr/sbin:/sbin

# The kernel package the metapackage depends on names the release.
kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -n1 || true)
if [ -z "$kpkg" ]; then
	apt_update
	kpkg=$(apt-cache depends linux-image-cloud-amd64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -n1)
fi
[ -n "$kpkg" ] || { log "apt knows no linux-image-cloud-amd64 (is this Debian on amd64?)"; exit 1; }
release=${kpkg#linux-image-}
dir=$cache/$release

# unpack_vmlinux writes to $2 the kernel ELF inside the vmlinuz $1: the
# payload the decompressor stub carries, found by its compression's magic
# number (as the kernel's scripts/extract-vmlinux finds it). It fails when
# no payload turns out an ELF file.
unpack_vmlinux() {
	local src=$1 dst=$2 f tool magic cmd off
	for f in 'lz4 \x02\x21\x4c\x18 lz4 -dc' 'zstd \x28\xb5\x2f\xfd zstd -qdc' 'xz \xfd\x37\x7a\x58\x5a\x00 xz -dc' 'gzip \x1f\x8b\x08 gzip -dc'; do
		read -r tool magic cmd <<<"$f"
		off=$(LC_ALL=C grep -obUaP "$magic" "$src" 2>/dev/null | head -n1 | cut -d: -f1 || true)
		[ -n "$off" ] || continue
		if ! command -v "$tool" >/dev/null; then
			apt_update
			log "apt-get install $tool (the kernel is $tool-compressed)"
			apt-get install -y -qq --no-install-recommends "$([ "$tool" = xz ] && echo xz-utils || echo "$tool")" >&2
		fi
		# The payload is followed by the stub's tail, which decompressors
		# call trailing garbage: their status is not the test, the ELF is.
		tail -c +$((off + 1)) "$src" | $cmd >"$dst" 2>/dev/null || true
		if [ "$(head -c 4 "$dst" | od -An -c | tr -d ' ')" = '177ELF' ]; then
			log "vmlinux: the $tool payload of vmlinuz at byte $off, $(($(stat -c %s "$dst") >> 20)) MiB"
			return 0
		fi
	done
	rm -f "$dst"
	return 1
}

if [ -f "$dir/SHA256SUMS" ] && (cd "$dir" && sha256sum --quiet -c SHA256SUMS >&2); then
	# A directory fetched before vmlinux was: add it.
	if ! grep -q '  vmlinux$' "$dir/SHA256SUMS"; then
		if unpack_vmlinux "$dir/vmlinuz" "$dir/.vmlinux.new"; then
			chmod a+r "$dir/.vmlinux.new"
			mv "$dir/.vmlinux.new" "$dir/vmlinux"
			(cd "$dir" && sha256sum vmlinux >>SHA256SUMS)
		else
			log "vmlinuz holds no kernel this script can uncompress: guests boot vmlinuz"
		fi
	fi
	ln -sfn "$release" "$cache/current"
	echo "$dir"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
mkdir "$tmp/deb"
# apt-get download runs as _apt when it can write there.
chown _apt "$tmp/deb" 2>/dev/null || true
log "apt-get download $kpkg"
if ! (cd "$tmp/deb" && apt-get download -qq "$kpkg" >&2); then
	apt_update
	(cd "$tmp/deb" && apt-get download -qq "$kpkg" >&2)
fi
dpkg-deb -x "$tmp"/deb/*.deb "$tmp/x"
depmod -b "$tmp/x" "$release"

config=$tmp/x/boot/config-$release
moddir=$tmp/x/lib/modules/$release
[ -f "$tmp/x/boot/vmlinuz-$release" ] && [ -f "$config" ] && [ -f "$moddir/modules.dep" ] ||
	{ log "$kpkg holds no vmlinuz, config or modules"; exit 1; }

out=$cache/.new-$release
rm -rf "$out"
mkdir -p "$out/modules"
cp "$tmp/x/boot/vmlinuz-$release" "$out/vmlinuz"
cp "$config" "$out/config"
: >"$out/builtin"
: >"$out/modules.order"

# deps[path] is the list of paths modules.dep gives for the module at path
# (relative to the modules directory); path[name] the path of a module.
declare -A deps path
while IFS= read -r line; do
	p=${line%%:*}
	deps[$p]=${line#*:}
	n=$(basename "$p")
	n=${n%%.ko*}
	path[${n//-/_}]=$p
done <"$moddir/modules.dep"

declare -A done_
visit() {
	local p=$1 d
	[ -n "${done_[$p]:-}" ] && return
	done_[$p]=1
	for d in ${deps[$p]}; do
		visit "$d"
	done
	local n
	n=$(basename "$p")
	case "$n" in
	*.ko) cp "$moddir/$p" "$out/modules/$n" ;;
	*.ko.xz) xz -dc "$moddir/$p" >"$out/modules/${n%.xz}"; n=${n%.xz} ;;
	*.ko.zst) zstd -qdc "$moddir/$p" >"$out/modules/${n%.zst}"; n=${n%.zst} ;;
	*.ko.gz) gzip -dc "$moddir/$p" >"$out/modules/${n%.gz}"; n=${n%.gz} ;;
	*) log "unknown module file $p"; exit 1 ;;
	esac
	echo "modules/$n" >>"$out/modules.order"
}

for i in "${!wanted[@]}"; do
	m=${wanted[$i]}
	s=${symbols[$i]}
	v=$(sed -n "s/^CONFIG_$s=//p" "$config")
	case "$v" in
	y) echo "$m" >>"$out/builtin"; log "$m: built in (CONFIG_$s=y)" ;;
	m)
		[ -n "${path[$m]:-}" ] || { log "$m: CONFIG_$s=m but no such module in modules.dep"; exit 1; }
		visit "${path[$m]}"
		log "$m: module (CONFIG_$s=m)"
		;;
	*) log "$m: not in this kernel (CONFIG_$s unset): the guest goes without it" ;;
	esac
done

images=vmlinuz
if unpack_vmlinux "$out/vmlinuz" "$out/vmlinux"; then
	images="vmlinuz vmlinux"
else
	log "vmlinuz holds no kernel this script can uncompress: guests boot vmlinuz"
fi
(cd "$out" && sha256sum $images config builtin modules.order modules/*.ko >SHA256SUMS)
chmod -R a+rX "$out"
rm -rf "$dir"
mv "$out" "$dir"
ln -sfn "$release" "$cache/current"
log "$kpkg: $(wc -l <"$dir/modules.order") modules in $dir"
echo "$dir"
