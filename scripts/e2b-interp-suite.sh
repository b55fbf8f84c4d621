#!/usr/bin/env bash
# e2b-interp-suite.sh runs E2B's own Code Interpreter SDK test suite (js/ of
# github.com/e2b-dev/code-interpreter, vitest, unchanged) against a hutch
# serve of this tree, its template code-interpreter-v1 hutch's
# code-interpreter image, and prints the results per test file
# (docs/e2b-interp-suite.md holds the latest results).
#
#   sudo scripts/e2b-interp-suite.sh --repo DIR [--commit SHA] [--out DIR]
#                                    [--timeout DURATION] [-- vitest args...]
#
# DIR is a git clone of e2b-dev/code-interpreter (a bare one will do); the
# suite is taken from its commit SHA (default: CI_COMMIT below), exported
# into a temporary directory. The tests import the SDK from the
# repository's js/src, as E2B's CI runs them: nothing is built, vitest
# compiles it; its dependencies, e2b (the base SDK) among them, come from
# the npm registry at the versions of the repository's lockfile (pnpm, at
# the version the repository pins). Arguments after -- go to vitest (e.g.
# test files to run). --out DIR keeps vitest's JSON report, its output and
# the daemon's log there. --timeout bounds the run of vitest (default 15m).
# The daemon runs on loopback in a state directory of its own, with hutch's
# code-interpreter image (scripts/base-image.sh --code-interpreter: built
# once, then imported from its cache), and is stopped at the end; the
# temporary directory is removed. Needs root (hutch serve does), go, npm.
set -euo pipefail

# The commit of e2b-dev/code-interpreter the results in
# docs/e2b-interp-suite.md are of.
CI_COMMIT=7df1757bfd5baa037f909ce97c2dbe014da973c0
# pnpm as the repository's package.json pins it (packageManager).
PNPM_VERSION=10.34.5
# node for the suite: vitest 4 needs 20.19 or later (the repository tests
# on node 20, .tool-versions).
NODE_VERSION=20.19.0

usage() {
	sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}

repo="" commit=$CI_COMMIT out="" run_timeout=15m
while [ $# -gt 0 ]; do
	case $1 in
	--repo) repo=${2:?--repo needs a directory}; shift 2 ;;
	--commit) commit=${2:?--commit needs a commit}; shift 2 ;;
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--timeout) run_timeout=${2:?--timeout needs a duration}; shift 2 ;;
	--) shift; break ;;
	-h | --help) usage ;;
	*) echo "e2b-interp-suite: unknown argument $1" >&2; usage ;;
	esac
done
[ -n "$repo" ] || { echo "e2b-interp-suite: --repo DIR is required (a git clone of github.com/e2b-dev/code-interpreter)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "e2b-interp-suite: must run as root (hutch serve needs it)" >&2; exit 2; }
name=e2b-interp-suite
# shellcheck source=scripts/e2b-lib.sh
. "$(dirname "$0")/e2b-lib.sh"
check_timeout "$run_timeout"
check_repo "$repo" "$commit"
[ -z "$out" ] || { mkdir -p "$out" && out=$(realpath "$out"); }

need_node 20 19 "$NODE_VERSION"
# The whole repository: js/ is a package of its pnpm workspace, whose
# lockfile is at the top.
export_repo "$repo" "$commit" "$work/ci"
sdk="$work/ci/js"
pnpm_install "$work/ci" "$PNPM_VERSION" --filter ./js

build_hutch
import_image --code-interpreter
# The suite's files run in parallel, a sandbox per test, of 1 GiB (the
# default) each.
start_daemon --tenant-memory 64g --max-sandboxes 500

# Every file against hutch: the SDK reaches hutch's API, envd and the
# sandbox's code interpreter (its port 49999) on the same listener, as
# test/e2b/interp.test.mjs does. The suite's fixture creates its sandboxes
# of E2B_TESTS_TEMPLATE, code-interpreter-v1 when unset; E2B_DEBUG, when
# set to anything, skips the tests that want a real sandbox.
export NO_COLOR=1 CI=1 E2B_API_URL=$url E2B_SANDBOX_URL=$url
unset HTTP_PROXY HTTPS_PROXY http_proxy https_proxy ALL_PROXY all_proxy E2B_DOMAIN E2B_ACCESS_TOKEN E2B_DEBUG \
	E2B_TESTS_TEMPLATE E2B_INTEGRATION_TEST
set_deadline "$run_timeout"
run_vitest server "$work/server.json" "$sdk" "$@"
[ -z "$out" ] || keep_files "$out" server.json vitest-server.log serve.log

# The table: a line per test file, then the totals and the failures, each
# with the first line of its error.
results_table "$sdk/" "$work/server.json"
