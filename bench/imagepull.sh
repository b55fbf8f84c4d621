#!/usr/bin/env bash
# Image pull benchmark: `hutch image pull` of a multi-layer image (about
# 100 MiB, made here) from a registry on loopback, into an empty store,
# against `crane pull` of the same image followed by `tar -x` of each of
# its layers, in the same run (bench/imagepull).
#
# Usage: bench/imagepull.sh [--markdown] [-n N] [--size MIB] [--layers L]
#
# It builds hutch and the measuring tool, and installs crane
# (go-containerregistry's CLI) with `go install` from the Go module proxy
# when it is missing. No traffic leaves the machine: the registry listens
# on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

n=5 size=100 layers=5 markdown=""
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=-markdown ;;
	-n) n=$2; shift ;;
	--size) size=$2; shift ;;
	--layers) layers=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "imagepull.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin:$(go env GOPATH)/bin"
if ! command -v crane >/dev/null 2>&1; then
	log "installing crane (go install github.com/google/go-containerregistry/cmd/crane)"
	go install github.com/google/go-containerregistry/cmd/crane@v0.22.1
fi
work=$(mktemp -d /var/tmp/hutch-bench.XXXXXX)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
build_tools "$work" imagepull
log "hutch $(git rev-parse --short HEAD 2>/dev/null || echo '?'), crane $(crane version 2>/dev/null || echo '?')"
"$work/imagepull" -n "$n" -size "$size" -layers "$layers" -hutch "$work/hutch" -crane "$(command -v crane)" -dir "$work" $markdown
