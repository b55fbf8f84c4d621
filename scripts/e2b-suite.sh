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
	--timeout) run_timeout=${2:?--timeout needs a duration}; shift 2
		[[ $run_timeout =~ ^[0-9]+[smh]?$ ]] || { echo "e2b-suite: --timeout $run_timeout: want N, Ns, Nm or Nh" >&2; exit 2; } ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) echo "e2b-suite: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$repo" ] || { echo "e2b-suite: --e2b-repo DIR is required (a git clone of github.com/e2b-dev/E2B)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "e2b-suite: must run as root (hutch serve needs it)" >&2; exit 2; }
git -C "$repo" cat-file -e "$commit^{commit}" 2>/dev/null ||
	{ echo "e2b-suite: $repo has no commit $commit (git fetch it, or pass --commit)" >&2; exit 2; }
[ -z "$out" ] || { mkdir -p "$out" && out=$(realpath "$out"); }

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/hutch-e2b-suite.XXXXXX)
chmod 755 "$work"
daemon_pid=""

cleanup() {
	set +e
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		# SIGTERM, as an operator stops it: the daemon destroys its
		# sandboxes and removes their cgroups and mounts.
		kill -TERM "$daemon_pid"
		for _ in $(seq 120); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
		if kill -0 "$daemon_pid" 2>/dev/null; then
			echo "e2b-suite: hutch serve ($daemon_pid) did not stop in 60s; killing it" >&2
			kill -KILL "$daemon_pid"
		fi
		wait "$daemon_pid" 2>/dev/null
	fi
	# Whatever the daemon left mounted under the work directory, deepest first.
	findmnt -rn -o TARGET | awk -v w="$work/" 'index($0, w) == 1' | sort -r | while read -r m; do
		umount -l "$m"
	done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "e2b-suite: $*" >&2; }

# timeout_secs DURATION: DURATION (N, Ns, Nm or Nh) in seconds.
timeout_secs() {
	case $1 in
	*h) echo $((${1%h} * 3600)) ;; *m) echo $((${1%m} * 60)) ;; *s) echo "${1%s}" ;; *) echo "$1" ;;
	esac
}

# node: the host's when it is new enough, else from the npm registry.
node_ok() { "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a==22&&b>=18)?0:1)' 2>/dev/null; }
if ! { command -v node >/dev/null && node_ok node; }; then
	log "installing node $NODE_VERSION from the npm registry"
	npm install --prefix "$work/node" --no-audit --no-fund --silent "node@$NODE_VERSION" >&2
	export PATH="$work/node/node_modules/.bin:$PATH"
	node_ok node || { log "node $NODE_VERSION did not install"; exit 1; }
fi

log "exporting e2b-dev/E2B $commit"
mkdir "$work/e2b"
git -C "$repo" archive "$commit" | tar -x -C "$work/e2b"
sdk="$work/e2b/packages/js-sdk"

# The tests import the SDK from src/. pnpm installs
# the package's dependencies, the browser and Cloudflare extras included
# (playwright and workerd are plain npm packages; the browser itself is not
# downloaded, and the browser project is not run).
log "installing the js-sdk's dependencies (pnpm $PNPM_VERSION)"
(cd "$work/e2b" && npx --yes "pnpm@$PNPM_VERSION" install --frozen-lockfile --filter ./packages/js-sdk --reporter=append-only) >"$work/pnpm.log" 2>&1 ||
	{ tail -40 "$work/pnpm.log" >&2; log "pnpm install failed"; exit 1; }

# tests/bundle checks the built package (dist/): build it, as the
# package's build script does (tsdown); without it that file fails.
(cd "$sdk" && npx tsdown) >"$work/build.log" 2>&1 || log "could not build the SDK's dist/ (tests/bundle needs it): see --out's build.log"

log "building hutch"
(cd "$root" && CGO_ENABLED=0 go build -o "$work/bin/" ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent)

state="$work/state"
mkdir -m 700 "$state"
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
log "importing hutch's base image (scripts/base-image.sh; built once per recipe, about 28 minutes)"
"$root/scripts/base-image.sh" --state-dir "$state" --hutch "$work/bin/hutch-serve" >/dev/null ||
	{ log "scripts/base-image.sh failed"; exit 1; }
# The suite's files run in parallel, several sandboxes each, of 1 GiB
# (the default) each: more than this host has GiB of memory.
"$work/bin/hutch" serve --socket "$work/hutch.sock" --state-dir "$state" --listen 127.0.0.1:0 \
	--tenant-memory 64g --max-sandboxes 500 ${domain_flags[@]+"${domain_flags[@]}"} >"$work/serve.log" 2>&1 &
daemon_pid=$!
url=""
for _ in $(seq 120); do
	url=$(sed -n 's/^hutch: listening on \(https\{0,1\}:\/\/.*\)$/\1/p' "$work/serve.log" | head -1)
	[ -n "$url" ] && [ -S "$work/hutch.sock" ] && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/serve.log" >&2; log "hutch serve ended"; exit 1; }
	sleep 0.5
done
[ -n "$url" ] || { cat "$work/serve.log" >&2; log "hutch serve did not listen in 60s"; exit 1; }
token=$("$work/bin/hutch" token create --tenant e2b-suite --e2b --state-dir "$state" | tail -1)
[[ $token =~ ^e2b_[0-9a-f]{40}$ ]] || { log "token create --e2b gave no E2B key: $token"; exit 1; }
log "hutch serve (pid $daemon_pid) at $url"

# The server pass runs every file against hutch: the SDK reaches hutch's
# API and envd on the same listener, as test/e2b/sdk.test.mjs does. Files
# that import msw mock E2B's API for some or all of their tests, at E2B's
# URLs (from E2B_DOMAIN), so those tests fail whenever E2B_API_URL points
# elsewhere: these files run again in a mock pass, as E2B's CI runs them,
# without E2B_API_URL and E2B_SANDBOX_URL (and with no route to E2B's
# cloud, so their tests that need a server still fail there).
mapfile -t mocked < <(cd "$sdk" && grep -rlE "from ['\"]msw(/|['\"])" tests --include='*.test.ts' | sort)
export E2B_API_KEY=$token NO_COLOR=1 CI=1
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy E2B_DOMAIN E2B_ACCESS_TOKEN E2B_DEBUG E2B_VOLUME_API_URL

# vitest PASS REPORT ARGS...: every project but the browser one (it needs
# a Chromium from playwright's CDN, unreachable here) within what is left
# of the overall timeout; vitest's own test timeouts are the suite's.
deadline=$(($(date +%s) + $(timeout_secs "$run_timeout")))
vitest() {
	local pass=$1 report=$2 left rc
	shift 2
	left=$((deadline - $(date +%s)))
	[ "$left" -gt 0 ] || { log "no time left for the $pass pass"; return; }
	log "running vitest, $pass pass (${left}s left)"
	set +e
	(cd "$sdk" && timeout --kill-after=60s "$left" npx vitest run \
		--project unit --project template --project connectionConfig --passWithNoTests \
		--reporter=json --outputFile.json="$report" --reporter=dot "$@") >"$work/vitest-$pass.log" 2>&1
	rc=$?
	set -e
	[ $rc -ne 124 ] || log "vitest's $pass pass did not finish in time"
	[ -s "$report" ] || { tail -60 "$work/vitest-$pass.log" >&2; log "vitest's $pass pass wrote no report (exit $rc)"; }
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
if [ -n "$out" ]; then
	for f in server.json mock.json vitest-server.log vitest-mock.log serve.log build.log; do
		[ ! -f "$work/$f" ] || cp -f "$work/$f" "$out/"
	done
fi

# The table: a line per test file, then the totals and the failures, each
# with the first line of its error. A test of a mocked file counts as
# passed if it passed in either pass (on mocks, or against hutch); its
# failure is the server pass's.
node - "$sdk/" "$work/server.json" "$work/mock.json" <<'EOF'
const fs = require('fs')
const [prefix, serverFile, mockFile] = process.argv.slice(2)
const load = (f) => (fs.existsSync(f) && fs.statSync(f).size > 0 ? JSON.parse(fs.readFileSync(f, 'utf8')).testResults : null)
const server = load(serverFile), mock = load(mockFile) || []
if (!server) { console.log('no report of the server pass'); process.exit(1) }
const rel = (n) => (n.startsWith(prefix) ? n.slice(prefix.length) : n)
const mockPassed = new Set()
for (const f of mock) for (const a of f.assertionResults) if (a.status === 'passed') mockPassed.add(rel(f.name) + '\0' + a.fullName)
const mockFiles = new Set(mock.map((f) => rel(f.name)))
const rows = [], fails = []
const tot = { passed: 0, failed: 0, skipped: 0, mockOnly: 0 }
for (const f of server.sort((a, b) => a.name.localeCompare(b.name))) {
  const name = rel(f.name)
  const c = { passed: 0, failed: 0, skipped: 0, mockOnly: 0 }
  for (const a of f.assertionResults) {
    let s = a.status === 'passed' ? 'passed' : a.status === 'failed' ? 'failed' : 'skipped'
    if (s !== 'passed' && mockPassed.has(name + '\0' + a.fullName)) { s = 'passed'; c.mockOnly++ }
    c[s]++
    if (s === 'failed') fails.push(`${name} > ${a.fullName}: ${(a.failureMessages[0] || '').split('\n')[0].slice(0, 240)}`)
  }
  if (f.assertionResults.length === 0 && f.status === 'failed') {
    c.failed = 1
    fails.push(`${name} (the file): ${(f.message || '').split('\n')[0].slice(0, 240)}`)
  }
  for (const k in tot) tot[k] += c[k]
  rows.push(`| ${name} | ${mockFiles.has(name) ? 'yes' : ''} | ${c.passed} | ${c.failed} | ${c.skipped} |`)
}
console.log('| file | mocks | passed | failed | skipped |\n|---|---|---:|---:|---:|')
console.log(rows.join('\n'))
console.log(`| **total** (${rows.length} files) | | **${tot.passed}** | **${tot.failed}** | **${tot.skipped}** |`)
console.log(`\nof the ${tot.passed} passed, ${tot.mockOnly} passed on mocks only (the mock pass), ${tot.passed - tot.mockOnly} against hutch`)
console.log(`\nfailures (${fails.length}):`)
for (const f of fails) console.log('- ' + f)
EOF
