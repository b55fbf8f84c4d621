#!/usr/bin/env bash
# e2b-suite.sh runs E2B's own JavaScript SDK test suite (packages/js-sdk of
# github.com/e2b-dev/E2B, vitest, unchanged) against a hutch serve of this
# tree, and prints the results per test file. It is the measure of hutch's
# E2B compatibility (docs/e2b-suite.md holds the latest results).
#
#   sudo scripts/e2b-suite.sh --e2b-repo DIR [--commit SHA] [--out DIR]
#                             [--timeout DURATION] [--domain D]
#                             [-- vitest args...]
#
# DIR is a git clone of e2b-dev/E2B; the suite is taken from its commit SHA
# (default: E2B_COMMIT below), exported into a temporary directory. Its
# dependencies come from the npm registry (pnpm, at the version the
# repository pins); node 22 too when the host's node is older. Arguments
# after -- go to vitest (e.g. test files to run). Files that mock E2B's API
# (msw) run in a second pass, without hutch's URLs, as E2B's CI runs them.
# --out DIR keeps vitest's JSON reports, its output and the daemon's log
# there. --timeout bounds both passes together (default 25m). The daemon runs on
# loopback in a state directory of its own and is stopped at the end; the
# temporary directory is removed. Needs root (hutch serve does), go, npm.
# --domain D runs the server pass as E2B's own cloud is used, with
# E2B_DOMAIN=D alone: hutch serve --domain D over TLS with a wildcard
# certificate of a CA made here (openssl; NODE_EXTRA_CA_CERTS), *.D
# answered on loopback by test/e2b/resolve-domain.cjs (NODE_OPTIONS
# --require), and sandboxes' ports public unless a create says otherwise
# (--e2b-public-traffic, E2B's default).
set -euo pipefail

# The commit of e2b-dev/E2B the results in docs/e2b-suite.md are of.
E2B_COMMIT=b8029973aa7da5f741f7bb1a9f833b38a0885438
# pnpm as the repository's package.json pins it (packageManager).
PNPM_VERSION=10.34.5
# node for the suite: its dev dependencies (tsdown) need 22.18 or later.
NODE_VERSION=22.18.0

usage() {
	sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

repo="" commit=$E2B_COMMIT out="" run_timeout=25m domain=""
while [ $# -gt 0 ]; do
	case $1 in
	--e2b-repo) repo=${2:?--e2b-repo needs a directory}; shift 2 ;;
	--commit) commit=${2:?--commit needs a commit}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--domain) domain=${2:?--domain needs a domain name}; shift 2
		[[ $domain =~ ^[a-z0-9-]+(\.[a-z0-9-]+)+$ ]] || { echo "e2b-suite: --domain $domain: want a lower-case DNS name such as e2b.hutch.test" >&2; exit 2; } ;;
	--timeout) run_timeout=${2:?--timeout needs a duration}; shift 2 ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) echo "e2b-suite: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$repo" ] || { echo "e2b-suite: --e2b-repo DIR is required (a git clone of github.com/e2b-dev/E2B)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "e2b-suite: must run as root (hutch serve needs it)" >&2; exit 2; }
name=e2b-suite
# shellcheck source=scripts/e2b-lib.sh
. "$(dirname "$0")/e2b-lib.sh"
check_timeout "$run_timeout"
check_repo "$repo" "$commit"
[ -z "$out" ] || { mkdir -p "$out" && out=$(realpath "$out"); }

need_node 22 18 "$NODE_VERSION"
export_repo "$repo" "$commit" "$work/e2b"
sdk="$work/e2b/packages/js-sdk"

# The tests import the SDK from src/. pnpm installs
# the package's dependencies, the browser and Cloudflare extras included
# (playwright and workerd are plain npm packages; the browser itself is not
# downloaded, and the browser project is not run).
pnpm_install "$work/e2b" "$PNPM_VERSION" --filter ./packages/js-sdk

# tests/bundle checks the built package (dist/): build it, as the
# package's build script does (tsdown); without it that file fails.
(cd "$sdk" && npx tsdown) >"$work/build.log" 2>&1 || log "could not build the SDK's dist/ (tests/bundle needs it): see --out's build.log"

build_hutch
domain_flags=()
if [ -n "$domain" ]; then
	# A CA of this run and a certificate for *.D it signs.
	log "making a CA and a certificate for *.$domain"
	(cd "$work" && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=hutch e2b-suite CA" -keyout ca.key -out ca.pem &&
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=*.$domain" \
			-keyout tls.key -out tls.csr &&
		printf 'subjectAltName=DNS:*.%s,DNS:api.%s\nextendedKeyUsage=serverAuth\n' "$domain" "$domain" >tls.ext &&
		openssl x509 -req -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile tls.ext -out tls.pem) \
		>"$work/openssl.log" 2>&1 || { cat "$work/openssl.log" >&2; log "openssl could not make the certificates"; exit 1; }
	domain_flags=(--domain "$domain" --tls-cert "$work/tls.pem" --tls-key "$work/tls.key" --e2b-public-traffic)
fi
# hutch's base image is E2B's template base, as for hutch serve on a host
# that has it (built once, then imported from its cache).
import_image
# The suite's files run in parallel, several sandboxes each, of 1 GiB
# (the default) each: more than this host has GiB of memory.
start_daemon --tenant-memory 64g --max-sandboxes 500 ${domain_flags[@]+"${domain_flags[@]}"}

# The server pass runs every file against hutch: the SDK reaches hutch's
# API and envd on the same listener, as test/e2b/sdk.test.mjs does. Files
# that import msw mock E2B's API for some or all of their tests, at E2B's
# URLs (from E2B_DOMAIN), so those tests fail whenever E2B_API_URL points
# elsewhere: these files run again in a mock pass, as E2B's CI runs them,
# without E2B_API_URL and E2B_SANDBOX_URL (and with no route to E2B's
# cloud, so their tests that need a server still fail there).
mapfile -t mocked < <(cd "$sdk" && grep -rlE "from ['\"]msw(/|['\"])" tests --include='*.test.ts' | sort)
export NO_COLOR=1 CI=1
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy E2B_DOMAIN E2B_ACCESS_TOKEN E2B_DEBUG E2B_VOLUME_API_URL

# vitest PASS REPORT ARGS...: every project but the browser one (it needs
# a Chromium from playwright's CDN, unreachable here) within what is left
# of the overall timeout; vitest's own test timeouts are the suite's.
set_deadline "$run_timeout"
vitest() {
	local pass=$1 report=$2
	shift 2
	run_vitest "$pass" "$report" "$sdk" --project unit --project template --project connectionConfig --passWithNoTests "$@"
}
if [ -n "$domain" ]; then
	E2B_DOMAIN=$domain NODE_EXTRA_CA_CERTS=$work/ca.pem NODE_OPTIONS="--require $root/test/e2b/resolve-domain.cjs" \
		HUTCH_E2B_RESOLVE_DOMAIN=$domain HUTCH_E2B_RESOLVE_ADDR=${url#https://} vitest server "$work/server.json" "$@"
else
	E2B_API_URL=$url E2B_SANDBOX_URL=$url E2B_VOLUME_API_URL=$url vitest server "$work/server.json" "$@"
fi

# vitest's file filters are alternatives: the mock pass gets the mocked
# files that the filters given after -- match (all without filters).
filters=() opts=()
for a in "$@"; do case $a in -*) opts+=("$a") ;; *) filters+=("$a") ;; esac; done
mock_files=()
for f in "${mocked[@]}"; do
	[ ${#filters[@]} -gt 0 ] || { mock_files+=("$f"); continue; }
	for p in "${filters[@]}"; do [[ $f != *"$p"* ]] || { mock_files+=("$f"); break; }; done
done
[ ${#mock_files[@]} -eq 0 ] || vitest mock "$work/mock.json" "${mock_files[@]}" ${opts[@]+"${opts[@]}"}
[ -z "$out" ] || keep_files "$out" server.json mock.json vitest-server.log vitest-mock.log serve.log build.log

# The table: a line per test file, then the totals and the failures, each
# with the first line of its error. A test of a mocked file counts as
# passed if it passed in either pass (on mocks, or against hutch); its
# failure is the server pass's.
results_table "$sdk/" "$work/server.json" "$work/mock.json"
