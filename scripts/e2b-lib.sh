# e2b-lib.sh: what the scripts that run E2B's own test suites against a
# hutch serve of this tree share (scripts/e2b-suite.sh, E2B's JavaScript
# SDK; scripts/e2b-interp-suite.sh, its Code Interpreter SDK). Sourced, not
# run. The sourcing script sets `name` (its messages' prefix) first; this
# file makes the temporary directory `work` (removed at exit, with whatever
# the daemon left mounted under it) and defines:
#
#   log MSG...                  a message on standard error
#   check_timeout D             exits unless D is N, Ns, Nm or Nh
#   set_deadline D              the run's end, D (N, Ns, Nm or Nh) from now
#   check_repo REPO COMMIT      exits unless the git directory REPO has COMMIT
#   export_repo REPO COMMIT DIR git archive of COMMIT, extracted into DIR
#   need_node MAJOR MINOR VERSION
#                               the host's node when it is MAJOR.MINOR or
#                               later, else node VERSION from the npm registry
#   pnpm_install DIR VERSION ARGS...
#                               pnpm VERSION install --frozen-lockfile ARGS in
#                               DIR (npx, from the npm registry)
#   build_hutch                 hutch, hutch-serve and hutch-agent of this
#                               tree into $work/bin (CGO_ENABLED=0)
#   import_image [--code-interpreter]
#                               scripts/base-image.sh into $state (the image
#                               is built once per recipe, then imported from
#                               its cache)
#   start_daemon ARGS...        hutch serve on 127.0.0.1:0 in $state with
#                               ARGS; sets daemon_pid, url, and E2B_API_KEY
#                               (exported) to a token of tenant $name
#   run_vitest PASS REPORT DIR ARGS...
#                               vitest run in DIR with a JSON report at
#                               REPORT, within what is left of the deadline;
#                               its output in $work/vitest-PASS.log
#   keep_files OUT FILE...      copies $work's FILEs that exist to OUT
#   results_table PREFIX SERVER.json [MOCK.json]
#                               the per-file table, the totals and each
#                               failure with the first line of its error
#
# The daemon is stopped by its pid at exit (SIGTERM, so that it destroys its
# sandboxes and removes their cgroups and mounts; SIGKILL after 60 s).

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "/tmp/hutch-$name.XXXXXX")
chmod 755 "$work"
state="$work/state"
daemon_pid=""
deadline=""

cleanup() {
	set +e
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid"
		for _ in $(seq 120); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.5; done
		if kill -0 "$daemon_pid" 2>/dev/null; then
			log "hutch serve ($daemon_pid) did not stop in 60s; killing it"
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

log() { echo "$name: $*" >&2; }

check_timeout() {
	[[ $1 =~ ^[0-9]+[smh]?$ ]] || { log "--timeout $1: want N, Ns, Nm or Nh"; exit 2; }
}

set_deadline() {
	local s
	case $1 in
	*h) s=$((${1%h} * 3600)) ;; *m) s=$((${1%m} * 60)) ;; *s) s=${1%s} ;; *) s=$1 ;;
	esac
	deadline=$(($(date +%s) + s))
}

check_repo() {
	git -C "$1" cat-file -e "$2^{commit}" 2>/dev/null ||
		{ log "$1 has no commit $2 (git fetch it, or pass --commit)"; exit 2; }
}

export_repo() {
	log "exporting $2 of $1"
	mkdir -p "$3"
	git -C "$1" archive "$2" | tar -x -C "$3"
}

need_node() {
	local major=$1 minor=$2 version=$3
	local check="const [a,b]=process.versions.node.split('.').map(Number); process.exit(a>$major||(a==$major&&b>=$minor)?0:1)"
	command -v node >/dev/null && node -e "$check" 2>/dev/null && return
	log "installing node $version from the npm registry"
	npm install --prefix "$work/node" --no-audit --no-fund --silent "node@$version" >&2
	export PATH="$work/node/node_modules/.bin:$PATH"
	node -e "$check" 2>/dev/null || { log "node $version did not install"; exit 1; }
}

pnpm_install() {
	local dir=$1 version=$2
	shift 2
	log "installing the suite's dependencies (pnpm $version)"
	(cd "$dir" && npx --yes "pnpm@$version" install --frozen-lockfile --reporter=append-only "$@") >"$work/pnpm.log" 2>&1 ||
		{ tail -40 "$work/pnpm.log" >&2; log "pnpm install failed"; exit 1; }
}

build_hutch() {
	log "building hutch"
	(cd "$root" && CGO_ENABLED=0 go build -o "$work/bin/" ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent)
}

import_image() {
	local what="base image"
	[ $# -eq 0 ] || what="code-interpreter image"
	log "importing hutch's $what (scripts/base-image.sh${*:+ $*}; built once per recipe, about 28 minutes)"
	[ -d "$state" ] || mkdir -m 700 "$state"
	"$root/scripts/base-image.sh" "$@" --state-dir "$state" --hutch "$work/bin/hutch-serve" >/dev/null ||
		{ log "scripts/base-image.sh failed"; exit 1; }
}

start_daemon() {
	[ -d "$state" ] || mkdir -m 700 "$state"
	"$work/bin/hutch" serve --socket "$work/hutch.sock" --state-dir "$state" --listen 127.0.0.1:0 "$@" >"$work/serve.log" 2>&1 &
	daemon_pid=$!
	url=""
	for _ in $(seq 120); do
		url=$(sed -n 's/^hutch: listening on \(https\{0,1\}:\/\/.*\)$/\1/p' "$work/serve.log" | head -1)
		[ -n "$url" ] && [ -S "$work/hutch.sock" ] && break
		kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/serve.log" >&2; log "hutch serve ended"; exit 1; }
		sleep 0.5
	done
	[ -n "$url" ] || { cat "$work/serve.log" >&2; log "hutch serve did not listen in 60s"; exit 1; }
	local token
	token=$("$work/bin/hutch" token create --tenant "$name" --e2b --state-dir "$state" | tail -1)
	[[ $token =~ ^e2b_[0-9a-f]{40}$ ]] || { log "token create --e2b gave no E2B key: $token"; exit 1; }
	export E2B_API_KEY=$token
	log "hutch serve (pid $daemon_pid) at $url"
}

run_vitest() {
	local pass=$1 report=$2 dir=$3 left rc
	shift 3
	left=$((deadline - $(date +%s)))
	[ "$left" -gt 0 ] || { log "no time left for the $pass pass"; return; }
	log "running vitest, $pass pass (${left}s left)"
	set +e
	(cd "$dir" && timeout --kill-after=60s "$left" npx vitest run \
		--reporter=json --outputFile.json="$report" --reporter=dot "$@") >"$work/vitest-$pass.log" 2>&1
	rc=$?
	set -e
	[ $rc -ne 124 ] || log "vitest's $pass pass did not finish in time"
	[ -s "$report" ] || { tail -60 "$work/vitest-$pass.log" >&2; log "vitest's $pass pass wrote no report (exit $rc)"; }
}

keep_files() {
	local out=$1 f
	shift
	for f in "$@"; do
		[ ! -f "$work/$f" ] || cp -f "$work/$f" "$out/"
	done
}

# A test of the mock report counts as passed if it passed there or in the
# server report; its failure is the server's. Without a mock report the
# table has no mocks column.
results_table() {
	node - "$@" <<'EOF'
const fs = require('fs')
const [prefix, serverFile, mockFile] = process.argv.slice(2)
const load = (f) => (fs.existsSync(f) && fs.statSync(f).size > 0 ? JSON.parse(fs.readFileSync(f, 'utf8')).testResults : null)
const server = load(serverFile), mock = mockFile ? load(mockFile) || [] : null
if (!server) { console.log('no report of the server pass'); process.exit(1) }
const rel = (n) => (n.startsWith(prefix) ? n.slice(prefix.length) : n)
const mockPassed = new Set()
for (const f of mock || []) for (const a of f.assertionResults) if (a.status === 'passed') mockPassed.add(rel(f.name) + '\0' + a.fullName)
const mockFiles = new Set((mock || []).map((f) => rel(f.name)))
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
  rows.push(`| ${name} |${mock ? ` ${mockFiles.has(name) ? 'yes' : ''} |` : ''} ${c.passed} | ${c.failed} | ${c.skipped} |`)
}
console.log(`| file |${mock ? ' mocks |' : ''} passed | failed | skipped |\n|---|${mock ? '---|' : ''}---:|---:|---:|`)
console.log(rows.join('\n'))
console.log(`| **total** (${rows.length} files) |${mock ? ' |' : ''} **${tot.passed}** | **${tot.failed}** | **${tot.skipped}** |`)
if (mock) console.log(`\nof the ${tot.passed} passed, ${tot.mockOnly} passed on mocks only (the mock pass), ${tot.passed - tot.mockOnly} against hutch`)
console.log(`\nfailures (${fails.length}):`)
for (const f of fails) console.log('- ' + f)
EOF
}
