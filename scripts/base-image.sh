#!/usr/bin/env bash
# Builds hutch's base image from Debian's packages (mmdebstrap from the
# Debian mirror apt is configured with; no container registry, no PyPI) and
# imports it into a hutch image store as hutch.local/base:latest, the image
# E2B's `base` template starts when the daemon's store holds it. With
# --code-interpreter it builds hutch's code-interpreter image instead,
# hutch.local/code-interpreter:latest, the one of E2B's template
# `code-interpreter-v1`.
#
#   sudo scripts/base-image.sh [--code-interpreter] [--state-dir DIR] [--hutch BIN] [--cache DIR] [--no-import]
#
# What the base image holds, after E2B's own base image: Debian 12 with
# bash, python3 (`python` too), pip and venv, git, curl, build-essential,
# nodejs and npm, the user `user` (uid 1000, home /home/user, shell bash),
# and a `sudo` that asks the sandbox's agent to run the command as root (no
# set-id bit: see README's "The base image").
# The code-interpreter image is the base image and Debian's Jupyter kernel
# for Python (python3-ipykernel) with matplotlib, pandas, numpy and Pillow,
# and TypeScript's compiler for node (node-typescript); its label
# org.hutch.code-interpreter names the languages its interpreter serves.
# matplotlib's font cache is not built in advance: with the image's fonts
# (DejaVu, LyX's and matplotlib's own) the first import of
# matplotlib.pyplot builds it in a tenth or two of a second more than the
# next ones (measured: 0.8-0.95 s against 0.6-0.85 s), into the user's
# ~/.cache/matplotlib, which in an E2B sandbox is the workspace's anyway
# (a cache in the image's /home/user would be out of view there).
#
# Idempotent: the image is tagged with a digest of its recipe too (the
# suite, the packages, the hooks below; the code-interpreter image's label
# too), and nothing is done when the store already holds that tag.
# The built image (a docker save tarball) is kept in --cache (default
# /var/cache/hutch/base-image) under the same digest, so another store —
# a test's — imports it in about a minute instead of building it again. With
# --no-import it is only built (or found) there; either way its path is
# the one line printed on standard output.
# Reproducible as far as the mirror is: every timestamp is
# SOURCE_DATE_EPOCH, entries are in name order, and the packages are
# those the mirror serves the day it is built.
set -euo pipefail
cd "$(dirname "$0")/.."

state_dir=""
hutch=""
cache=/var/cache/hutch/base-image
import=1
kind=base
while [ $# -gt 0 ]; do
	case "$1" in
	--code-interpreter) kind=code-interpreter; shift ;;
	--state-dir) state_dir=$2; shift 2 ;;
	--hutch) hutch=$2; shift 2 ;;
	--cache) cache=$2; shift 2 ;;
	--no-import) import=0; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "base-image: unknown argument $1 (want --code-interpreter, --state-dir DIR, --hutch BIN, --cache DIR, --no-import)" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "base-image: must run as root (mmdebstrap builds the tree as root; the image keeps its owners)" >&2; exit 2; }

log() { echo "base-image: $*" >&2; }

packages=(
	ca-certificates curl git openssh-client less procps util-linux
	python3 python3-pip python3-venv python-is-python3
	build-essential nodejs npm
)
suite=bookworm
export SOURCE_DATE_EPOCH=1767225600 # 2026-01-01, every timestamp of the image
# The tree as mmdebstrap leaves it, made E2B's: the user, and the sudo of
# the image, which has no set-id bit (hutch strips those from every layer,
# and no_new_privs would void them anyway): it asks the sandbox's agent,
# which serves it because /etc/hutch/sudo exists.
hooks=(
	'chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash user'
	'mkdir -p "$1/etc/hutch" && echo "user ALL=(ALL:ALL) NOPASSWD: ALL (served by the sandbox agent of hutch)" >"$1/etc/hutch/sudo"'
	'printf "%s\n" "#!/bin/sh" "# sudo of the base image of hutch: the agent of the sandbox runs the command as root." "exec /dev/hutch sudo \"\$@\"" >"$1/usr/bin/sudo" && chmod 0755 "$1/usr/bin/sudo"'
	'rm -rf "$1"/var/cache/apt/*.bin "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/etc/machine-id "$1"/root/.cache "$1"/tmp/*'
)
title="hutch base"
labels="" flag=""
if [ "$kind" = code-interpreter ]; then
	# The Jupyter kernel of Python and what its plots and tables need (the
	# fonts come as matplotlib's dependencies); JavaScript and TypeScript
	# run on the base image's nodejs.
	packages+=(python3-ipykernel python3-matplotlib python3-pandas python3-numpy python3-pil node-typescript)
	title="hutch code-interpreter" flag=" --code-interpreter"
	labels=',"org.hutch.code-interpreter":"python,javascript,typescript"'
fi
recipe_of=("$suite" "$SOURCE_DATE_EPOCH" "${packages[@]}" "${hooks[@]}")
[ -z "$labels" ] || recipe_of+=("$labels")
recipe=$(printf '%s\n' "${recipe_of[@]}" | sha256sum | cut -c1-16)
repo=hutch.local/$kind
tag="$repo:$recipe"

work=""
cleanup() { [ -z "$work" ] || rm -rf "$work"; }
trap cleanup EXIT

if [ -z "$hutch" ] && [ "$import" = 1 ]; then
	export CGO_ENABLED=0 PATH="$PATH:/usr/local/go/bin"
	work=$(mktemp -d /tmp/hutch-base-image.XXXXXX)
	go build -o "$work/hutch-serve" ./cmd/hutch-serve
	hutch="$work/hutch-serve"
fi
store=()
[ -z "$state_dir" ] || store=(--state-dir "$state_dir")

tarball="$cache/$kind-$recipe.tar"
if [ "$import" = 1 ] && "$hutch" image inspect "${store[@]}" "$tag" >/dev/null 2>&1; then
	log "$tag is in the store already"
	echo "$tarball"
	exit 0
fi

if [ ! -s "$tarball" ]; then
	command -v mmdebstrap >/dev/null || {
		log "installing mmdebstrap"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null
	}
	[ -n "$work" ] || work=$(mktemp -d /tmp/hutch-base-image.XXXXXX)
	mkdir -p "$cache"
	root="$work/root"
	start=$(date +%s)
	log "building $tag from Debian $suite (${packages[*]})"
	hookargs=()
	for h in "${hooks[@]}"; do hookargs+=(--customize-hook="$h"); done
	mmdebstrap --variant=apt --include="$(IFS=,; echo "${packages[*]}")" "${hookargs[@]}" \
		"$suite" "$root" >"$work/mmdebstrap.log" 2>&1 || { tail -30 "$work/mmdebstrap.log" >&2; log "mmdebstrap failed"; exit 1; }
	log "mmdebstrap took $(($(date +%s) - start)) s"

	# One layer, devices left out (hutch makes /dev itself), in name
	# order with numeric owners and the fixed time.
	img="$work/img"
	mkdir "$img"
	tar -C "$root" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
		--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		--exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -cf "$img/layer.tar" .
	diff_id=$(sha256sum "$img/layer.tar" | cut -d' ' -f1)
	created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
	cat >"$img/config.json" <<EOF
{"architecture":"$(dpkg --print-architecture)","os":"linux","created":"$created","config":{"User":"user","WorkingDir":"/home/user","Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"],"Cmd":["/bin/bash"],"Labels":{"org.opencontainers.image.title":"$title","org.opencontainers.image.description":"Debian $suite: ${packages[*]}; user (1000) with sudo through the sandbox's agent","org.hutch.$kind.recipe":"$recipe"$labels}},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created":"$created","created_by":"scripts/base-image.sh$flag (mmdebstrap $suite)"}]}
EOF
	cat >"$img/manifest.json" <<EOF
[{"Config":"config.json","RepoTags":["$tag","$repo:latest"],"Layers":["layer.tar"]}]
EOF
	tar -C "$img" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		-cf "$tarball.tmp" manifest.json config.json layer.tar
	mv "$tarball.tmp" "$tarball"
	rm -rf "$root" "$img"
	log "built $tarball ($(du -h "$tarball" | cut -f1)) in $(($(date +%s) - start)) s"
	# Older recipes' tarballs are of no further use.
	find "$cache" -maxdepth 1 -name "$kind-*.tar" ! -name "$kind-$recipe.tar" -delete
fi

if [ "$import" = 1 ]; then
	start=$(date +%s)
	"$hutch" image import "${store[@]}" "$tarball" >/dev/null
	log "imported $tag and $repo:latest in $(($(date +%s) - start)) s"
fi
echo "$tarball"
