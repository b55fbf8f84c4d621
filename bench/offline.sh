#!/usr/bin/env bash
# Offline benchmark: how long a package manager takes to fail in a sandbox
# without a network, in hutch and in sandbox-runtime (srt), in the same run.
# A tool that gets "temporary failure in name resolution" retries (npm for
# over a minute); one that gets a final answer gives up at once. Each tool
# runs in a fresh workspace:
#
#   npm   npm install left-pad          (npm's registry, its cache in the workspace)
#   pip   pip download six              (when python3 has pip)
#   go    go mod download golang.org/x/text@v0.3.0
#   curl  curl https://example.com/
#
# in hutch's default mode (--net none), in hutch --net proxy with nothing
# allowed, in srt with nothing allowed, and with --before BIN also in that
# hutch binary's --net none (an older build, to show what changed). The
# table gives the median wall time of -n runs and the ratios to srt.
#
# Usage: bench/offline.sh [--markdown] [-n RUNS] [--before BIN] [--tools LIST]
#   --markdown   print a markdown table (for docs/benchmarks.md)
#   -n RUNS      runs of each tool in each sandbox (default 3)
#   --before BIN also time this hutch binary (runs may take minutes each)
#   --tools LIST comma-separated tools to time (default npm,pip,go,curl;
#                those not installed are skipped)
#
# As root it installs srt with npm when it is missing (as bench/startup.sh
# does). Nothing leaves this machine: every sandbox is offline, and the
# proxies refuse the tools' hosts before looking them up.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

runs=3 markdown="" before="" tools="npm,pip,go,curl"
while [ $# -gt 0 ]; do
	case "$1" in
	--markdown) markdown=1 ;;
	-n) runs=$2; shift ;;
	--before) before=$(readlink -f "$2"); shift ;;
	--tools) tools=$2; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "offline.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
export PATH="$PATH:/usr/local/go/bin"

if ! command -v srt >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
	command -v rg >/dev/null 2>&1 || apt_install ripgrep
	command -v socat >/dev/null 2>&1 || apt_install socat
	command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap
	log "installing srt (npm @anthropic-ai/sandbox-runtime)"
	npm install -g --silent @anthropic-ai/sandbox-runtime >/dev/null 2>&1 || log "srt could not be installed: skipped"
fi

work=$(mktemp -d /tmp/hutch-offline-bench.XXXXXX)
touch "$work/.started"
chmod 755 "$work" # the sandboxes run as unprivileged host uids
cleanup() {
	set +e
	find /tmp -maxdepth 1 -name 'srt-mux-*.sock' -type s -newer "$work/.started" -delete 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log "building hutch"
CGO_ENABLED=0 go build -o "$work/hutch" ./cmd/hutch

# srt's settings: no host allowed, the workspace writable.
cat >"$work/srt.json" <<'EOF'
{"network": {"allowedDomains": [], "deniedDomains": []},
 "filesystem": {"denyRead": [], "allowWrite": ["."], "denyWrite": []}}
EOF

# tool_cmd TOOL prints the command line that TOOL runs in a workspace (the
# current directory); caches and homes stay in it.
tool_cmd() {
	case "$1" in
	npm) echo "env HOME=$PWD npm install --no-audit --no-fund --no-update-notifier --cache $PWD/.npm left-pad" ;;
	pip) echo "env HOME=$PWD python3 -m pip download --no-deps --no-cache-dir -d $PWD/dl six" ;;
	go) echo "env HOME=$PWD GOPATH=$PWD/go GOCACHE=$PWD/.gocache GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=https://proxy.golang.org GOSUMDB=off go mod download golang.org/x/text@v0.3.0" ;;
	curl) echo "curl -sS -o /dev/null https://example.com/" ;;
	esac
}

# tool_ok TOOL succeeds when TOOL is installed.
tool_ok() {
	case "$1" in
	npm) command -v npm >/dev/null 2>&1 ;;
	pip) python3 -m pip --version >/dev/null 2>&1 ;;
	go) command -v go >/dev/null 2>&1 ;;
	curl) command -v curl >/dev/null 2>&1 ;;
	*) return 1 ;;
	esac
}

# time_run SANDBOX TOOL prints the seconds one failing run took.
time_run() {
	local sb=$1 tool=$2 ws t0 t1
	ws=$(mktemp -d "$work/ws.XXXXXX")
	chmod 777 "$ws"
	cd "$ws"
	local cmd
	cmd=$(tool_cmd "$tool")
	t0=$(date +%s.%N)
	case "$sb" in
	hutch) "$work/hutch" run -- $cmd >"$ws/out" 2>&1 || true ;;
	hutch-proxy) "$work/hutch" run --net proxy -- $cmd >"$ws/out" 2>&1 || true ;;
	hutch-before) "$before" run -- $cmd >"$ws/out" 2>&1 || true ;;
	srt) srt --settings "$work/srt.json" -- $cmd >"$ws/out" 2>&1 || true ;;
	esac
	t1=$(date +%s.%N)
	cd "$work"
	echo "$t1 - $t0" | bc
}

# median prints the median of its arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

sandboxes=(hutch hutch-proxy)
command -v srt >/dev/null 2>&1 && sandboxes+=(srt) || log "srt not installed: skipped"
[ -z "$before" ] || sandboxes+=(hutch-before)

declare -A med
active=()
for tool in ${tools//,/ }; do
	if ! tool_ok "$tool"; then
		log "$tool not installed: skipped"
		continue
	fi
	active+=("$tool")
	for sb in "${sandboxes[@]}"; do
		times=()
		for _ in $(seq "$runs"); do times+=("$(time_run "$sb" "$tool")"); done
		med[$tool,$sb]=$(median "${times[@]}")
		log "$tool in $sb: ${times[*]} s"
	done
done

ratio() { if [ -n "${med[$1,srt]:-}" ]; then printf '%.2f' "$(echo "scale=3; ${med[$1,$2]} / ${med[$1,srt]}" | bc)"; else echo "-"; fi; }
secs() { printf '%.2f' "$1"; }
header=("tool" "hutch (--net none) s" "hutch --net proxy s")
[[ " ${sandboxes[*]} " == *" srt "* ]] && header+=("srt s" "hutch/srt" "hutch --net proxy/srt")
[ -z "$before" ] || header+=("before s")
echo "hutch $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)'), $runs runs each, median wall time until the tool gave up"
if [ -n "$markdown" ]; then
	echo
	(IFS='|'; echo "| ${header[*]} |" | sed 's/|/ | /g; s/  */ /g; s/^ //; s/ $//')
	printf '|%s' $(printf -- '---%.0s ' "${header[@]}"); echo '|'
else
	printf '%-6s' "${header[0]}"; printf '%24s' "${header[@]:1}"; echo
fi
for tool in "${active[@]}"; do
	row=("$tool" "$(secs "${med[$tool,hutch]}")" "$(secs "${med[$tool,hutch-proxy]}")")
	if [[ " ${sandboxes[*]} " == *" srt "* ]]; then
		row+=("$(secs "${med[$tool,srt]}")" "$(ratio "$tool" hutch)" "$(ratio "$tool" hutch-proxy)")
	fi
	[ -z "$before" ] || row+=("$(secs "${med[$tool,hutch-before]}")")
	if [ -n "$markdown" ]; then
		(IFS='|'; echo "| ${row[*]} |" | sed 's/|/ | /g; s/  */ /g; s/^ //; s/ $//')
	else
		printf '%-6s' "${row[0]}"; printf '%24s' "${row[@]:1}"; echo
	fi
done
