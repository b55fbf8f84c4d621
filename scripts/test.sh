#!/usr/bin/env bash
# The whole test suite of hutch: installs what the tests need, then runs the
# linters and every test. Run as root on Debian to include the root-only
# tests; HUTCH_TEST_ROOT=1 makes a test that cannot run a failure, not a skip.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$PATH:/usr/local/go/bin"
export PATH="$PATH:$(go env GOPATH)/bin"
export CGO_ENABLED=0

# Debian packages the tests use (skipped when present or not root).
need=()
for tool in setpriv:util-linux ip:iproute2 git:git busybox:busybox-static curl:curl ssh:openssh-client npm:npm chromium:chromium mkfs.erofs:erofs-utils; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
# pip, for the test that installs a package through the egress proxy.
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# A Jupyter kernel with matplotlib and pandas, for the tests of
# internal/kernel.
/usr/bin/python3 -c 'import ipykernel' >/dev/null 2>&1 || need+=(python3-ipykernel)
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || need+=(python3-matplotlib)
/usr/bin/python3 -c 'import pandas' >/dev/null 2>&1 || need+=(python3-pandas)
# TypeScript, for the code interpreter's JavaScript and TypeScript contexts
# (internal/interp).
[ -e /usr/share/nodejs/typescript/package.json ] || need+=(node-typescript)
# containerd, runc and Docker's engine, for the tests of hutch-runc
# (test/oci), which start their own daemons: the packages' services are
# not started on install.
for tool in containerd:containerd ctr:containerd runc:runc dockerd:docker.io; do
	command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool#*:}")
done
# The CNI plugins (bridge, host-local, loopback) of the Kubernetes cluster
# the tests start (internal/testutil/k8stest).
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
# gcc and libseccomp's static library, for the runc 1.5 of that cluster
# (scripts/k8s-binaries.sh builds it with cgo and seccomp).
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
	no_start=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		no_start=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' >"$no_start" && chmod 755 "$no_start"
	fi
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
	[ -z "$no_start" ] || rm -f "$no_start"
fi
command -v staticcheck >/dev/null 2>&1 || go install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# gVisor's runsc at the version hutch pins, for the tests of --tier gvisor
# (they take it from $HUTCH_TEST_RUNSC). Static (CGO_ENABLED=0): runsc
# re-executes itself in an empty chroot. Built once, in about 3 minutes.
runsc_version=$(sed -n 's/^[[:space:]]*PinnedVersion *= *"\(.*\)"$/\1/p' internal/gvisor/gvisor.go)
runsc_dir="$(go env GOPATH)/hutch-runsc/$runsc_version"
if ! go version -m "$runsc_dir/runsc" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]gvisor.dev/gvisor[[:space:]]$runsc_version[[:space:]]"; then
	echo "== building runsc $runsc_version (about 3 minutes)"
	GOBIN="$runsc_dir" CGO_ENABLED=0 go install "gvisor.dev/gvisor/runsc@$runsc_version" ||
		echo "warning: could not build runsc; the tests of --tier gvisor cannot run"
fi
export HUTCH_TEST_RUNSC="$runsc_dir/runsc"
# gVisor's containerd shim of the same version, beside it, for the pods of
# the RuntimeClass hutch-gvisor in test/k8s's cluster (they take it from
# $HUTCH_TEST_RUNSC_SHIM). Static too; built once.
runsc_shim="$runsc_dir/containerd-shim-runsc-v1"
if ! go version -m "$runsc_shim" 2>/dev/null | grep -q "^[[:space:]]mod[[:space:]]gvisor.dev/gvisor[[:space:]]$runsc_version[[:space:]]"; then
	echo "== building gVisor's containerd shim $runsc_version"
	shim_tmp=$(mktemp -d)
	{ GOBIN="$shim_tmp" CGO_ENABLED=0 go install "gvisor.dev/gvisor/shim@$runsc_version" && mv "$shim_tmp/shim" "$runsc_shim"; } ||
		echo "warning: could not build containerd-shim-runsc-v1; the tests of the RuntimeClass hutch-gvisor cannot run"
	rm -rf "$shim_tmp"
fi
export HUTCH_TEST_RUNSC_SHIM="$runsc_shim"

# E2B's JavaScript SDK, pinned by test/e2b/package-lock.json, for
# TestE2BSDK; it needs node 20.18 or later, which Debian 12's nodejs is not:
# then node comes from the npm registry too, into test/e2b/.node (git-ignored).
node_ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a==20&&b>=18)?0:1)' 2>/dev/null; }
if command -v npm >/dev/null 2>&1; then
	if ! { command -v node >/dev/null 2>&1 && node_ok node; } && ! node_ok test/e2b/.node/node_modules/.bin/node; then
		npm install --prefix test/e2b/.node --no-audit --no-fund --silent node@20.20.2 ||
			echo "warning: could not install node 20 from the npm registry; TestE2BSDK cannot run"
	fi
	# Every package test/e2b/package.json names (the SDK and its earlier
	# releases, under aliases) must be installed, else npm ci.
	e2b_installed() { node -e 'const fs=require("fs");for(const d of Object.keys(require("./test/e2b/package.json").dependencies))fs.statSync("test/e2b/node_modules/"+d+"/package.json")' 2>/dev/null; }
	e2b_installed || (cd test/e2b && npm ci --no-audit --no-fund --silent) ||
		echo "warning: npm ci in test/e2b failed; TestE2BSDK cannot run"
	# MCP's TypeScript SDK, its conformance suite and a third-party server,
	# pinned by test/mcp/package-lock.json, for the tests of hutch mcp and
	# /mcp; the conformance suite needs node 22, which comes from the npm
	# registry into test/mcp/.node (git-ignored).
	node22_ok() { "$1" -e 'process.exit(Number(process.versions.node.split(".")[0])>=22?0:1)' 2>/dev/null; }
	if ! node22_ok test/mcp/.node/node_modules/.bin/node; then
		npm install --prefix test/mcp/.node --no-audit --no-fund --silent node@22.22.0 ||
			echo "warning: could not install node 22 from the npm registry; the MCP client tests cannot run"
	fi
	[ -f test/mcp/node_modules/@modelcontextprotocol/sdk/package.json ] || (cd test/mcp && npm ci --no-audit --no-fund --silent) ||
		echo "warning: npm ci in test/mcp failed; the MCP client tests cannot run"
fi

# hutch's base image (E2B's template base), for TestE2BSDKBaseImage: built
# from Debian's packages once per recipe (about 28 minutes on two cores),
# then kept as a tarball in /var/cache/hutch/base-image, which the test
# imports into its daemon's store in about a minute. Likewise hutch's
# code-interpreter image (E2B's template code-interpreter-v1: the base
# image with Jupyter's Python kernel, matplotlib, pandas and TypeScript),
# for TestCodeInterpreterImage, in the same cache (measured: built in about
# 4 minutes on two cores, a 1.9 GB tarball; imported in about a minute).
if [ "$(id -u)" = 0 ]; then
	if base_image=$(scripts/base-image.sh --no-import); then
		export HUTCH_TEST_BASE_IMAGE="$base_image"
	else
		echo "warning: could not build hutch's base image; TestE2BSDKBaseImage cannot run"
	fi
	if code_interpreter_image=$(scripts/base-image.sh --code-interpreter --no-import); then
		export HUTCH_TEST_CODE_INTERPRETER_IMAGE="$code_interpreter_image"
	else
		echo "warning: could not build hutch's code-interpreter image; TestCodeInterpreterImage cannot run"
	fi
fi

# The microVM tier's guest kernel (Debian's cloud kernel and the modules
# the guest loads) in /var/cache/hutch/guest-kernel, with QEMU: fetched once
# (about a minute), then found there; the tests of internal/microvm take its
# directory from $HUTCH_TEST_GUEST_KERNEL.
if [ "$(id -u)" = 0 ]; then
	if guest_kernel=$(scripts/guest-kernel.sh); then
		export HUTCH_TEST_GUEST_KERNEL="$guest_kernel"
	else
		echo "warning: could not fetch the guest kernel; the tests of internal/microvm cannot run"
	fi
fi

# The binaries of that cluster (Kubernetes, etcd, containerd 2, runc 1.5), built from
# the Go module proxy once per pinned version (measured: about 21 minutes
# on two cores) into /var/cache/hutch/k8s, then found there in a tenth of a
# second; the tests take their directory from $HUTCH_TEST_K8S_BIN.
if [ "$(id -u)" = 0 ]; then
	if k8s_bin=$(scripts/k8s-binaries.sh); then
		export HUTCH_TEST_K8S_BIN="$k8s_bin"
	else
		echo "warning: could not build the Kubernetes binaries; the tests of test/k8s cannot run"
	fi
fi

# hutch's binaries are built once for every package's tests
# (testutil.Build): hutch, hutch-serve, hutch-agent and hutch-runc. Then
# hutch's built images go into the run's shared image stores
# (internal/testutil/storetest's prime) while the linters run: a test
# that asks for one first then waits on this import rather than making
# it on a machine as busy as the tests' start makes it (the
# code-interpreter image's import took six minutes there, one alone).
export HUTCH_TEST_RUN=$$
prime_pid=""
HUTCH_TEST_BIN=$(mktemp -d /tmp/hutch-test-bin-XXXXXX)
trap 'rm -rf "$HUTCH_TEST_BIN"; [ -z "$prime_pid" ] || kill "$prime_pid" 2>/dev/null || true' EXIT
chmod 755 "$HUTCH_TEST_BIN"
go build -o "$HUTCH_TEST_BIN/" ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent ./cmd/hutch-runc ./internal/testutil/storetest/prime
export HUTCH_TEST_BIN
if [ "$(id -u)" = 0 ] && [ -n "${HUTCH_TEST_CODE_INTERPRETER_IMAGE:-}${HUTCH_TEST_BASE_IMAGE:-}" ]; then
	"$HUTCH_TEST_BIN/prime" ${HUTCH_TEST_CODE_INTERPRETER_IMAGE:-} ${HUTCH_TEST_BASE_IMAGE:-} &
	prime_pid=$!
fi
echo "== gofmt (at ${SECONDS}s)"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt wants to change: $unformatted"; exit 1; fi
echo "== go vet (at ${SECONDS}s)"
go vet ./...
echo "== staticcheck (at ${SECONDS}s)"
staticcheck ./...
echo "== go test (at ${SECONDS}s)"
# The gVisor tier makes its state directory a private mount point of its
# own, kept for the next sandbox. When the suite made it, the suite
# removes it once every test ended, if no sandbox is left in it.
gvisor_state=/run/hutch-gvisor
gvisor_state_was_mounted=0
mountpoint -q "$gvisor_state" 2>/dev/null && gvisor_state_was_mounted=1
# One run of every package, three at a time, the longest first: go test
# starts them in the order given, and a long one started last would end
# the run alone. The cluster's tests (test/k8s) wait on the cluster much
# of their time, so they go first, beside the others; the engines' tests
# (test/oci, test/k8s) run beside hutch's own sandboxes, whose copies of
# the host's mounts an engine's removal of a container's root detaches
# (test/oci's TestContainerdRecreateWhileHeld).
# HUTCH_GO_TEST_FLAGS adds flags to go test (-v, -run, -json) for a
# measurement of the suite's time.
module=$(go list -m)
first=""
for p in test/k8s cmd/hutch test/escape internal/daemon internal/e2b internal/interp internal/api test/oci internal/mcp internal/kernel internal/webui internal/changes; do
	first="$first $module/$p"
done
rest=$(go list ./... | grep -Fvx -f <(printf '%s\n' $first))
# A failed run cleans up as a passed one does (set -e would end the script).
status=0
go test -count=1 -timeout 30m -p 3 ${HUTCH_GO_TEST_FLAGS:-} $first $rest 2>&1 | tee /tmp/hutch-test.$$.log || status=${PIPESTATUS[0]}
if [ "$gvisor_state_was_mounted" = 0 ] && mountpoint -q "$gvisor_state" 2>/dev/null && [ -z "$(ls -A "$gvisor_state")" ]; then
	umount "$gvisor_state" && rmdir "$gvisor_state" || echo "warning: could not remove $gvisor_state"
fi
# The images the run's tests imported once and linked from (storetest).
rm -rf /var/tmp/hutch-test-stores
# The lock of the host's root between the packages' tests (testutil.HostRootChanges).
rm -f /run/hutch-test-host-root.lock
# The tests' own state directories of the tier (/run/hutch-gvisor-test-*), once empty.
rmdir /run/hutch-gvisor-test-* 2>/dev/null || true
# Packages, each once (-v may print a package's line twice; a bare FAIL
# line ends a failed package's output).
passed=$(awk '/^ok[[:space:]]/ {print $2}' /tmp/hutch-test.$$.log | sort -u | wc -l)
failed=$(awk '/^FAIL[[:space:]]/ {print $2}' /tmp/hutch-test.$$.log | sort -u | wc -l)
rm -f /tmp/hutch-test.$$.log
echo "packages: $passed passed, $failed failed (in ${SECONDS}s)"
exit "$status"
