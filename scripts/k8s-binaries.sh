#!/usr/bin/env bash
# Builds the binaries of the single-node Kubernetes cluster that hutch's
# tests start (internal/testutil/k8stest), from the Go module proxy only:
#
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#   kubectl, kubeadm   k8s.io/kubernetes, pinned by test/k8s/build/go.mod
#   etcd               go.etcd.io/etcd/server/v3 (test/k8s/build/etcd)
#   containerd, containerd-shim-runc-v2, ctr
#                      github.com/containerd/containerd/v2, pinned by
#                      test/k8s/build/containerd/go.mod
#   runc               github.com/opencontainers/runc 1.5, pinned by
#                      test/k8s/build/runc/go.mod: the runtime of the
#                      cluster's pods, and the one hutch-runc hands them to
#                      (runc 1.2 and later give a pod's containers a user
#                      namespace of hutch-runc's; Debian 12's 1.1 cannot)
#
# The CNI plugins are Debian's containernetworking-plugins (/usr/lib/cni).
#
#   scripts/k8s-binaries.sh [--print-dir] [--cache DIR]
#
# Every binary is static: runc with cgo (its nsenter is C) and seccomp,
# linked against Debian's libseccomp-dev (static-pie), the others without
# cgo. gcc and libseccomp-dev must be installed (scripts/test.sh installs
# them). They are built once into DIR/<key>/bin (default DIR
# /var/cache/hutch/k8s), where key is a digest of the pinned modules
# (go.mod, go.sum, the sources in test/k8s/build: a new runc is a new key)
# and of the Go version; when that directory exists nothing is built. Its path is
# the one line printed on standard output, logs go to standard error. With
# --print-dir the path is printed and nothing is built.
# Measured on two cores shared with other work: 22 minutes cold (1286 s
# for Kubernetes, etcd and containerd, 43 s for runc), 0.04 s cached.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=/var/cache/hutch/k8s
print_only=0
while [ $# -gt 0 ]; do
	case "$1" in
	--print-dir) print_only=1; shift ;;
	--cache) cache=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "k8s-binaries: unknown argument $1 (want --print-dir, --cache DIR)" >&2; exit 2 ;;
	esac
done

log() { echo "k8s-binaries: $*" >&2; }

src=test/k8s/build
kube_version=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([^ ]*\).*/\1/p' "$src/go.mod" | head -1)
containerd_version=$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}github.com\/containerd\/containerd\/v2 v\([^ ]*\).*/\2/p' "$src/containerd/go.mod" | head -1)
runc_version=$(sed -n 's/^[[:space:]]*\(require \)\{0,1\}github.com\/opencontainers\/runc v\([^ ]*\).*/\2/p' "$src/runc/go.mod" | head -1)
[ -n "$kube_version" ] && [ -n "$containerd_version" ] && [ -n "$runc_version" ] || { log "cannot read the pinned versions from $src/go.mod, $src/containerd/go.mod and $src/runc/go.mod"; exit 1; }

key=$({ go version; find "$src" -type f \( -name '*.go' -o -name 'go.mod' -o -name 'go.sum' \) | LC_ALL=C sort | xargs cat; } | sha256sum | cut -c1-16)
dir="$cache/$key/bin"
if [ "$print_only" = 1 ] || [ -d "$dir" ]; then
	echo "$dir"
	exit 0
fi

command -v gcc >/dev/null 2>&1 && [ -e /usr/include/seccomp.h ] || { log "runc $runc_version needs gcc and libseccomp-dev (Debian packages; scripts/test.sh installs them)"; exit 1; }
log "building Kubernetes $kube_version, etcd, containerd $containerd_version and runc $runc_version into $dir (about 20 minutes on two cores)"
start=$(date +%s)
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"

# Versions as Kubernetes' own build stamps them (hack/lib/version.sh), so
# that kubectl version, the node's kubeletVersion and kubeadm's checks read
# v1.37.2 rather than v0.0.0-master.
minor=${kube_version#*.}
minor=${minor%%.*}
kv=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kv="$kv -X $pkg.gitVersion=v$kube_version -X $pkg.gitMajor=${kube_version%%.*} -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
(cd "$src" && GOBIN="$tmp/bin" go install -ldflags="-s -w $kv" tool ./etcd)
(cd "$src/containerd" && GOBIN="$tmp/bin" go install \
	-ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=v$containerd_version" \
	-tags "no_btrfs no_devmapper no_zfs" tool)
# As runc's Makefile builds it static (make static), without libpathrs (a
# Rust library Debian 12 does not have: runc falls back to its Go one).
(cd "$src/runc" && CGO_ENABLED=1 GOBIN="$tmp/bin" go install -buildmode=pie \
	-ldflags="-s -w -linkmode external -extldflags -static-pie" \
	-tags "seccomp urfave_cli_no_docs netgo osusergo" tool)
mkdir -p "$cache/$key"
rm -rf "$dir"
mv "$tmp/bin" "$dir"
log "built in $(($(date +%s) - start)) s: $(ls "$dir" | tr '\n' ' ')"
echo "$dir"
