# Helpers shared by the benchmark scripts (bench/startup.sh, bench/serve.sh),
# sourced by them once they have changed to the repository's root.

# log prints its arguments on stderr, after the name of the script.
log() { echo "${0##*/}: $*" >&2; }

# static_busybox succeeds when the busybox on PATH is statically linked (it
# then runs in a bundle that holds nothing else).
static_busybox() {
	local b
	b=$(command -v busybox 2>/dev/null) || return 1
	! ldd "$b" >/dev/null 2>&1 # ldd fails on a static binary
}

# apt_install PACKAGE... installs the packages with apt-get, updating the
# package lists first only when the install fails without.
apt_install() {
	log "installing $*"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

# build_tools DIR TOOL... builds hutch (and hutch-serve, the daemon's
# binary, and hutch-agent, the sandboxes' PID 1 in hutch serve) into DIR
# and each measuring tool bench/TOOL into DIR/TOOL, statically.
build_tools() {
	local dir=$1 t
	shift
	log "building hutch and the measuring tool"
	CGO_ENABLED=0 go build -o "$dir/" ./cmd/hutch ./cmd/hutch-serve ./cmd/hutch-agent
	for t in "$@"; do CGO_ENABLED=0 go build -o "$dir/$t" "./bench/$t"; done
}

# runc_delete_all PREFIX deletes, forcibly, every runc container whose id
# starts with PREFIX (nothing when runc is not installed).
runc_delete_all() {
	local id
	command -v runc >/dev/null 2>&1 || return 0
	for id in $(runc list -q 2>/dev/null | grep "^$1"); do
		runc delete -f "$id" >/dev/null 2>&1
	done
}

# runc_bundle DIR ARGS_JSON RESOURCES_JSON APPLET... makes a runc bundle in
# DIR: DIR/rootfs with the static busybox and a link to it for each applet
# in /bin, and DIR/config.json, whose process runs ARGS_JSON (a JSON array)
# under the cgroup limits RESOURCES_JSON (a JSON object, linux.resources).
# Isolation like hutch's: user (root mapped to an unprivileged host uid, as
# hutch does when root runs it), pid, net, ipc, uts, mount and cgroup
# namespaces; read-only root; no capabilities; no_new_privs; a seccomp deny
# list of the same syscalls hutch's filter refuses outright.
runc_bundle() {
	local dir=$1 args=$2 resources=$3 a
	shift 3
	mkdir -p "$dir/rootfs/bin" "$dir/rootfs/proc" "$dir/rootfs/dev" "$dir/rootfs/sys" "$dir/rootfs/tmp"
	cp "$(command -v busybox)" "$dir/rootfs/bin/busybox"
	for a in "$@"; do ln -s busybox "$dir/rootfs/bin/$a"; done
	cat >"$dir/config.json" <<EOF
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": $args,
    "env": ["PATH=/bin"],
    "cwd": "/",
    "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": [], "ambient": []},
    "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": true},
  "hostname": "runc",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]}
  ],
  "linux": {
    "uidMappings": [{"containerID": 0, "hostID": 1000000000, "size": 1}],
    "gidMappings": [{"containerID": 0, "hostID": 1000000000, "size": 1}],
    "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"},
                   {"type": "mount"}, {"type": "user"}, {"type": "cgroup"}],
    "resources": $resources,
    "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    "seccomp": {
      "defaultAction": "SCMP_ACT_ALLOW",
      "syscalls": [{
        "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
        "names": ["ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
          "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
          "fsmount", "fspick", "mount_setattr", "setns", "keyctl", "add_key", "request_key", "bpf",
          "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
          "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
          "swapon", "swapoff", "iopl", "ioperm", "syslog", "acct", "quotactl", "vhangup",
          "open_by_handle_at", "name_to_handle_at", "fanotify_init", "settimeofday", "clock_settime",
          "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "uselib", "ustat", "sysfs",
          "lookup_dcookie", "nfsservctl"]
      }]
    }
  }
}
EOF
}

# busybox_image_tar DIR TAG writes DIR/image.tar, a `docker save` tarball of
# a one-layer image tagged TAG: a root (DIR/rootfs) of the host's busybox
# and its sh, true, cat, ls, echo and sleep applets.
busybox_image_tar() {
	local dir=$1 tag=$2 root=$1/rootfs save=$1/save diff_id a
	mkdir -p "$root/bin" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/root" "$save"
	cp "$(command -v busybox)" "$root/bin/busybox"
	for a in sh true cat ls echo sleep; do ln -s busybox "$root/bin/$a"; done
	echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
	tar --numeric-owner --owner=0 --group=0 -C "$root" -cf "$save/layer.tar" .
	diff_id=$(sha256sum "$save/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"config":{"Env":["PATH=/bin"]}}' "$diff_id" >"$save/config.json"
	printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$tag" >"$save/manifest.json"
	tar -C "$save" -cf "$dir/image.tar" manifest.json config.json layer.tar
}

# stop_pid PID: ends the process PID this script started, if it still
# runs: SIGTERM, then SIGKILL after 30 s.
stop_pid() {
	[ -n "$1" ] && [ -d "/proc/$1" ] || return 0
	kill -TERM "$1" 2>/dev/null
	for _ in $(seq 300); do [ -d "/proc/$1" ] || break; sleep 0.1; done
	kill -KILL "$1" 2>/dev/null
	return 0
}

# remove_work DIR: unmounts everything of the run under DIR (deepest
# first), then removes DIR.
remove_work() {
	awk -v w="$1" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m"
	done
	rm -rf "$1"
}

# serve_start HUTCH WORK STATE FLAGS...: starts HUTCH serve on the socket
# WORK/hutch.sock and the state directory STATE, with FLAGS, its log in
# WORK/serve.log; sets serve_pid (for stop_pid) and exports HUTCH_HOST;
# waits until it answers, or fails saying why.
serve_start() {
	local hutch=$1 work=$2 state=$3
	shift 3
	"$hutch" serve --socket "$work/hutch.sock" --state-dir "$state" "$@" >"$work/serve.log" 2>&1 &
	serve_pid=$!
	export HUTCH_HOST=unix://$work/hutch.sock
	for _ in $(seq 150); do "$hutch" ls >/dev/null 2>&1 && break; sleep 0.1; done
	"$hutch" ls >/dev/null || { log "hutch serve does not answer: $(tail -5 "$work/serve.log")"; return 1; }
}
