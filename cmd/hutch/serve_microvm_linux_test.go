package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestServeMicroVM: hutch serve --default-tier microvm --allow-emulation
// runs its sandboxes in microVMs, in one boot: hutch create (--tier
// microvm, the default's tier too) makes one,
// whose commands run on the guest's kernel (uname -r is not the host's)
// with the create's environment and their exit codes, /dev/hutch, and a
// root whose writable layer is --disk's size; a file copied in
// through the files API is read by a command, one a command wrote in the
// workspace is copied out; -t gives a command a terminal; an HTTP GET
// reaches a loopback upstream through the relayed proxy, a host not
// allowed is refused; pause stops the guest (commands refused) and resume
// lets it go on; a pause without memory and a snapshot are refused naming
// the tier; hutch rm leaves no QEMU or virtiofsd and no sandbox directory
// (a daemon killed: TestServeMicroVMDiesWithDaemon).
func TestServeMicroVM(t *testing.T) {
	t.Parallel()
	env := microVMEnv(t, t.TempDir())
	kernelEnv := env[len(env)-1]
	up := startUpstream(t)
	_, port, _ := net.SplitHostPort(up.addr)

	d := startDaemonEnv(t, []string{kernelEnv}, nil, "--default-tier", "microvm", "--allow-emulation", "--allow-private", "127.0.0.1/32")

	start := time.Now()
	r := d.admin(t, "create", "--tier", "microvm", "--disk", "300m", "--env", "GREETING=hello", "--allow-domain", "allowed.test:"+port,
		"--add-host", "allowed.test:127.0.0.1", "--add-host", "blocked.test:127.0.0.1")
	wantOK(t, r)
	id := lastLine(r.stdout)
	created := time.Since(start)
	r = d.admin(t, "exec", id, "--", "uname", "-r")
	wantOK(t, r)
	t.Logf("microVM under hutch serve: create %v, create to first output %v", created, time.Since(start))
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(r.stdout); got == "" || got == unix.ByteSliceToString(host.Release[:]) {
		t.Errorf("uname -r in the guest %q, the host's %q: want the guest's own kernel", got, unix.ByteSliceToString(host.Release[:]))
	}
	r = d.admin(t, "ls")
	if wantOK(t, r); !strings.Contains(r.stdout, " running  microvm ") {
		t.Errorf("hutch ls does not name the tier:\n%s", r.stdout)
	}

	r = d.admin(t, "exec", id, "--", "sh", "-c", `echo "$GREETING $(pwd) $(id -u)"; test -x /dev/hutch && echo self
df -m / | awk 'NR == 2 { print "disk " $2 }'; echo written >out.txt; exit 7`)
	wantCode(t, r, 7)
	if got := strings.TrimSpace(r.stdout); got != "hello /workspace 0\nself\ndisk 300" {
		t.Errorf("exec: %q, want the create's environment, the workspace, the guest's root, /dev/hutch and the root's layer of --disk", got)
	}

	// The files API, both ways.
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "in.txt"), "from the host\n", 0o644)
	wantOK(t, d.admin(t, "cp", filepath.Join(local, "in.txt"), id+":/workspace/in.txt"))
	r = d.admin(t, "exec", id, "--", "cat", "/workspace/in.txt")
	if wantOK(t, r); r.stdout != "from the host\n" {
		t.Errorf("a file copied in, read in the guest: %q", r.stdout)
	}
	wantOK(t, d.admin(t, "cp", id+":/workspace/out.txt", filepath.Join(local, "out.txt")))
	if b, err := os.ReadFile(filepath.Join(local, "out.txt")); err != nil || string(b) != "written\n" {
		t.Errorf("a file the guest wrote, copied out: %q, %v", b, err)
	}

	r = d.as(t, "", "", strings.NewReader(""), "exec", "-t", id, "--", "sh", "-c", "test -t 0 && test -t 1 && echo on a terminal")
	if wantOK(t, r); strings.TrimSpace(r.stdout) != "on a terminal" {
		t.Errorf("exec -t in a microVM: %s", r)
	}

	r = d.admin(t, "exec", id, "--", "sh", "-c", `curl -sS --max-time 60 http://allowed.test:`+port+`/served; echo "RC allowed $?"
curl -sS --max-time 60 -o /dev/null -w '%{http_code}\n' http://blocked.test:`+port+`/no; echo "RC blocked $?"`)
	wantOK(t, r)
	for _, want := range []string{"hello from allowed.test:" + port + "/served", "RC allowed 0", "403", "RC blocked 0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("egress through the relay: stdout lacks %q\n%s", want, r)
		}
	}
	if reqs := up.requests(); len(reqs) != 1 || reqs[0] != "allowed.test:"+port+"/served" {
		t.Errorf("the upstream got %q, want the allowed request only", reqs)
	}

	// Pause in memory (QEMU's stop), resume (cont).
	wantOK(t, d.admin(t, "pause", id))
	r = d.admin(t, "exec", id, "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "is paused") {
		t.Errorf("exec in a paused microVM: %s\nwant a refusal", r)
	}
	wantOK(t, d.admin(t, "resume", id))
	r = d.admin(t, "exec", id, "--", "cat", "/workspace/out.txt")
	if wantOK(t, r); r.stdout != "written\n" {
		t.Errorf("after resume: %q", r.stdout)
	}

	// What the tier cannot do yet, refused by name.
	r = d.admin(t, "pause", "--no-memory", id)
	if r.code == 0 || !strings.Contains(r.stderr, "tier microvm: a pause without memory") || !strings.Contains(r.stderr, "not supported in this version") {
		t.Errorf("hutch pause --no-memory of a microVM: %s\nwant a refusal naming the tier", r)
	}
	// A snapshot of a guest over the host's root is its files (its
	// agent's export of its layer): a namespace sandbox starts from
	// them; a microVM does not yet.
	r = d.admin(t, "snapshot", id)
	wantOK(t, r)
	sid := lastLine(r.stdout)
	r = d.admin(t, "create", "--snapshot", sid)
	if r.code == 0 || !strings.Contains(r.stderr, "tier microvm: a start from a snapshot's files") {
		t.Errorf("hutch create --snapshot of a microVM's files, as a microVM: %s\nwant a refusal naming the tier", r)
	}
	r = d.admin(t, "create", "--snapshot", sid, "--tier", "namespace")
	wantOK(t, r)
	ns := lastLine(r.stdout)
	if r := d.admin(t, "exec", ns, "--", "cat", "/workspace/out.txt"); r.stdout != "written\n" {
		t.Errorf("a namespace sandbox from a microVM's snapshot: %s", r)
	}
	wantOK(t, d.admin(t, "rm", ns))
	wantOK(t, d.admin(t, "snapshot", "rm", sid))
	r = d.admin(t, "exec", id, "--", "true")
	wantOK(t, r)

	// Destroyed: nothing of it is left on the host.
	below := processesBelow(t, d.cmd.Process.Pid)
	var qemu, virtiofsd int
	for _, p := range below {
		switch {
		case strings.HasPrefix(p.comm, "qemu-system"):
			qemu++
		case p.comm == "virtiofsd":
			virtiofsd++
		}
	}
	if qemu != 1 || virtiofsd == 0 {
		t.Errorf("processes below the daemon: %+v\nwant one QEMU and its virtiofsd", below)
	}
	sbDir := filepath.Join(d.stateDir, "sandboxes", id)
	if _, err := os.Stat(filepath.Join(sbDir, "microvm")); err != nil {
		t.Errorf("the VM's directory: %v", err)
	}
	wantOK(t, d.admin(t, "rm", id))
	waitGone(t, below, "after hutch rm")
	if _, err := os.Stat(sbDir); !os.IsNotExist(err) {
		t.Errorf("after hutch rm, the sandbox's directory: %v", err)
	}

}

// TestServeMicroVMImage: a microVM of hutch serve from an image: the
// guest's root is the image's (its EROFS root, built in the daemon's
// image store, from a block device), with nothing of the host's; its
// commands run as the image's user, in a workspace of the guest's own
// that the user owns; nothing is shared (no virtiofsd); a warm pool of
// the image's template keeps a guest booted.
func TestServeMicroVMImage(t *testing.T) {
	t.Parallel()
	env := microVMEnv(t, t.TempDir())
	kernelEnv := env[len(env)-1]
	img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, func(c *v1.Config) {
		c.User = "app"
	}, imagetest.File("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:App:/home/app:/bin/sh\n", 0o644),
		imagetest.File("etc/group", "root:x:0:\napp:x:1000:\n", 0o644), imagetest.Dir("home/"), imagetest.Dir("home/app/"))
	tar := imagetest.DockerSave(t, img, "hutch.test/vmapp:1", hostDir(t))
	d := startDaemonEnv(t, []string{kernelEnv}, func(state string) {
		wantOK(t, hutch(t, invocation{args: []string{"image", "import", tar, "--state-dir", state}}))
	}, "--default-tier", "microvm", "--allow-emulation", "--template", "vmapp=hutch.test/vmapp:1", "--warm", "vmapp=1")

	r := d.admin(t, "create", "--image", "hutch.test/vmapp:1")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "exec", id, "--", "sh", "-c", `cat /etc/motd; id -u; pwd; stat -c '%u:%g' .; test -e /usr/bin/env || echo no-host-usr
grep -q '^overlay / overlay .*lowerdir=/root-lower' /proc/mounts && test "$(cat /sys/block/vda/ro)" = 1 && echo block-root
echo mine > own.txt && cat own.txt`)
	if wantOK(t, r); r.stdout != "from the image\n1000\n/workspace\n1000:1000\nno-host-usr\nblock-root\nmine\n" {
		t.Errorf("a microVM of an image: %q", r.stdout)
	}
	ents, err := os.ReadDir(filepath.Join(d.stateDir, "images", "erofs"))
	var built int
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".erofs") {
			built++
		}
	}
	if err != nil || built != 1 {
		t.Errorf("the image store's EROFS roots: %v, %v; want one", ents, err)
	}
	for _, p := range processesBelow(t, d.cmd.Process.Pid) {
		if p.comm == "virtiofsd" {
			t.Errorf("a virtiofsd runs for a microVM of an image: %+v", p)
		}
	}

	// The template's warm pool (of an image's, refused before EROFS
	// roots) fills.
	if !testutil.Eventually(5*time.Minute, func() bool {
		return strings.Contains(d.metrics(t), `hutch_warm_sandboxes{template="vmapp"} 1`)
	}) {
		t.Errorf("the warm pool of the image's template did not fill:\n%s", d.log)
	}
	wantOK(t, d.admin(t, "rm", id))
}

// TestServeMicroVMPauseRestart: a microVM of an image without the
// proxy's relay, paused, is saved to disk (QEMU's state in its checkpoint
// directory) and outlives hutch serve stopped with SIGTERM: the next
// daemon lists it paused, and hutch resume gives it back with its
// processes and their memory (a count kept in a shell variable goes on,
// in the same process) and its files. One with the proxy's relay is saved
// and restored too, and reaches an allowed host after.
func TestServeMicroVMPauseRestart(t *testing.T) {
	t.Parallel()
	d, port := microVMImageDaemon(t, "hutch.test/vmbb:1")

	r := d.admin(t, "create", "--image", "hutch.test/vmbb:1", "--net", "none")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "create", "--image", "hutch.test/vmbb:1", "--allow-domain", "allowed.test:"+port, "--add-host", "allowed.test:127.0.0.1")
	wantOK(t, r)
	relayed := lastLine(r.stdout)
	fetch := func(path string) {
		t.Helper()
		r := d.admin(t, "exec", relayed, "--", "wget", "-q", "-O", "-", "http://allowed.test:"+port+path)
		if wantOK(t, r); !strings.Contains(r.stdout, "hello from allowed.test:"+port+path) {
			t.Errorf("through the relay: %s", r)
		}
	}
	fetch("/before")
	ask := startCounter(t, d, id)
	before, pid := ask()
	wantOK(t, d.admin(t, "pause", id))
	state := filepath.Join(d.stateDir, "sandboxes", id, "checkpoint", "state")
	if fi, err := os.Stat(state); err != nil {
		t.Errorf("paused: no saved state: %v", err)
	} else {
		t.Logf("saved state: %d MiB", fi.Size()>>20)
	}
	wantOK(t, d.admin(t, "pause", relayed))
	if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", relayed, "checkpoint", "state")); err != nil {
		t.Errorf("a microVM with the relay, paused: no saved state: %v", err)
	}

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.start(t)
	r = d.admin(t, "ls", "-q", "--state", "paused")
	if wantOK(t, r); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, relayed) {
		t.Errorf("paused after the restart: %q, want %s and %s", r.stdout, id, relayed)
	}
	wantResumed(t, d, id, ask, before, pid)
	wantOK(t, d.admin(t, "resume", relayed))
	fetch("/after")
	wantOK(t, d.admin(t, "rm", id))
	wantOK(t, d.admin(t, "rm", relayed))
}

// TestServeMicroVMFork: hutch fork of a microVM of an image with the
// proxy's relay saves the guest while it goes on and restores that state
// into two new guests: in each, and in the source, a count kept in a
// shell variable goes on in the same process, the files are there, and
// an allowed host is reached through the relay (the source's has a new
// host end). The copies are their own: a file one writes is not in the
// other, and their kernels draw different random numbers. A snapshot of
// a copy holds all it and its source wrote over the image in one layer,
// its deletions too: a namespace sandbox started from its files does not
// see what the copy removed, nor does a microVM started from the files
// of a snapshot of that sandbox (its root the image's and the snapshots'
// layers, one EROFS root). A copy pauses to disk and resumes.
func TestServeMicroVMFork(t *testing.T) {
	t.Parallel()
	d, port := microVMImageDaemon(t, "hutch.test/vmfork:1")

	r := d.admin(t, "create", "--image", "hutch.test/vmfork:1", "--allow-domain", "allowed.test:"+port, "--add-host", "allowed.test:127.0.0.1")
	wantOK(t, r)
	src := lastLine(r.stdout)
	fetch := func(id, path string) {
		t.Helper()
		r := d.admin(t, "exec", id, "--", "wget", "-q", "-O", "-", "http://allowed.test:"+port+path)
		if wantOK(t, r); !strings.Contains(r.stdout, "hello from allowed.test:"+port+path) {
			t.Errorf("%s through the relay: %s", id, r)
		}
	}
	fetch(src, "/before")
	ask := startCounter(t, d, src)
	before, pid := ask()

	r = d.admin(t, "fork", "-n", "2", src)
	wantOK(t, r)
	forks := strings.Fields(r.stdout)
	if len(forks) != 2 {
		t.Fatalf("hutch fork -n 2 printed %q", r.stdout)
	}
	if after, pid2 := ask(); pid2 != pid || after <= before {
		t.Errorf("the source's counter after the fork: %d (pid %d), before: %d (pid %d)", after, pid2, before, pid)
	}
	fetch(src, "/source-after")
	var uuids []string
	for i, f := range forks {
		if got, pid2 := startCounterOf(t, d, f)(); pid2 != pid || got < before {
			t.Errorf("fork %d's counter: %d (pid %d), the source's at the fork: %d (pid %d)", i, got, pid2, before, pid)
		}
		if r := d.admin(t, "exec", f, "--", "cat", "/etc/kept"); r.stdout != "kept\n" {
			t.Errorf("fork %d's files: %s", i, r)
		}
		fetch(f, fmt.Sprintf("/fork%d", i))
		r := d.admin(t, "exec", f, "--", "cat", "/proc/sys/kernel/random/uuid")
		wantOK(t, r)
		uuids = append(uuids, r.stdout)
	}
	if uuids[0] == uuids[1] {
		t.Errorf("two forks drew the same random UUID %q", uuids[0])
	}
	wantOK(t, d.admin(t, "exec", forks[0], "--", "sh", "-c", "echo fork0 > /workspace/mine; rm /etc/kept"))
	if r := d.admin(t, "exec", forks[1], "--", "sh", "-c", "test ! -e /workspace/mine && cat /etc/kept"); r.stdout != "kept\n" {
		t.Errorf("one fork's write reached the other: %s", r)
	}

	// snapshotStart snapshots sandbox of and starts a sandbox of tier
	// from the snapshot; in it the fork's file is there and the file it
	// removed is not (what wants adds is there too).
	snapshotStart := func(of, tier, wants, want string) (sid, id string) {
		t.Helper()
		sid = d.adminID(t, "snapshot", of)
		id = d.adminID(t, "create", "--snapshot", sid, "--tier", tier)
		if r := d.admin(t, "exec", id, "--", "sh", "-c", "cat /workspace/mine; test -e /etc/kept && echo kept-is-back; "+wants); r.stdout != "fork0\n"+want {
			t.Errorf("a %s sandbox from a snapshot of %s: %s\nwant the fork's file, not the file it removed", tier, of, r)
		}
		return sid, id
	}
	// A snapshot of a copy: one layer over the image, its deletion kept.
	sid, ns := snapshotStart(forks[0], "namespace", "", "")
	// A microVM from a snapshot's files: a snapshot of the namespace
	// sandbox, its layer over the fork's over the image, in an EROFS root.
	files, fromFiles := snapshotStart(ns, "microvm", "grep -q '^overlay / overlay .*lowerdir=/root-lower' /proc/mounts && echo block-root", "block-root\n")
	r = d.admin(t, "create", "--snapshot", sid)
	wantOK(t, r)
	again := lastLine(r.stdout)
	if got, pid2 := startCounterOf(t, d, again)(); pid2 != pid || got < before {
		t.Errorf("a copy of a fork's snapshot: its counter %d (pid %d)", got, pid2)
	}
	// A copy is paused to disk and resumed as any guest of an image.
	wantOK(t, d.admin(t, "pause", forks[1]))
	if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", forks[1], "checkpoint", "state")); err != nil {
		t.Errorf("a fork paused: no saved state: %v", err)
	}
	wantOK(t, d.admin(t, "resume", forks[1]))
	if got, pid2 := startCounterOf(t, d, forks[1])(); pid2 != pid || got < before {
		t.Errorf("a fork after its pause to disk: its counter %d (pid %d)", got, pid2)
	}
	for _, id := range append(forks, src, ns, again, fromFiles) {
		wantOK(t, d.admin(t, "rm", id))
	}
	for _, s := range []string{sid, files} {
		wantOK(t, d.admin(t, "snapshot", "rm", s))
	}
	if ents, err := os.ReadDir(filepath.Join(d.stateDir, "snapshots", "erofs")); err != nil || len(ents) > 1 {
		t.Errorf("the snapshots' EROFS roots after their snapshots' removal: %v, %v", ents, err)
	}
}

// TestServeMicroVMSnapshotQuota: a microVM started from a snapshot's
// files boots from an EROFS root of the image's files and the
// snapshot's, kept with the snapshot, which counts against the tenant's
// snapshot bytes: with room for the snapshot (a few kB) but not for that
// root (about the busybox image's, 2 MB), the start is refused with the
// quota's error naming it, and no root is left in the store; the tenant's
// sandboxes of other tiers start from the snapshot as before.
func TestServeMicroVMSnapshotQuota(t *testing.T) {
	t.Parallel()
	const ref = "hutch.test/vmquota:1"
	d, _ := microVMImageDaemon(t, ref, "--max-snapshot-bytes", strconv.Itoa(1<<20))
	src := d.adminID(t, "create", "--image", ref, "--tier", "namespace")
	wantOK(t, d.admin(t, "exec", src, "--", "sh", "-c", "echo kept > /etc/kept"))
	sid := d.adminID(t, "snapshot", src)
	r := d.admin(t, "create", "--snapshot", sid, "--tier", "microvm")
	if r.code == 0 || !strings.Contains(r.stderr, "EROFS root") || !strings.Contains(r.stderr, "of 1048576 bytes allowed") {
		t.Fatalf("a microVM from the snapshot's files past the tenant's snapshot bytes: want the quota's refusal naming the EROFS root:\n%s", r)
	}
	if ents, err := os.ReadDir(filepath.Join(d.stateDir, "snapshots", "erofs")); err == nil && len(ents) > 0 {
		t.Errorf("the refused start left %d entries in the store's EROFS roots", len(ents))
	}
	ns := d.adminID(t, "create", "--snapshot", sid, "--tier", "namespace")
	if c := d.admin(t, "exec", ns, "--", "cat", "/etc/kept"); c.stdout != "kept\n" {
		t.Errorf("control: a namespace sandbox from the snapshot: %s", c)
	}
}

// microVMImageDaemon starts hutch serve with the microvm tier as its
// default, under emulation, that may reach the loopback upstream it
// starts too (on port), with ref a busybox image with sleep, mv and wget
// in its store, and flags.
func microVMImageDaemon(t *testing.T, ref string, flags ...string) (d *daemonProc, port string) {
	env := microVMEnv(t, t.TempDir())
	kernelEnv := env[len(env)-1]
	img := imagetest.BusyboxWith(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) }, nil,
		imagetest.Symlink("bin/sleep", "busybox"), imagetest.Symlink("bin/mv", "busybox"), imagetest.Symlink("bin/wget", "busybox"))
	tar := imagetest.DockerSave(t, img, ref, hostDir(t))
	d = startDaemonEnv(t, []string{kernelEnv}, func(state string) {
		wantOK(t, hutch(t, invocation{args: []string{"image", "import", tar, "--state-dir", state}}))
	}, append([]string{"--default-tier", "microvm", "--allow-emulation", "--allow-private", "127.0.0.1/32"}, flags...)...)
	up := startUpstream(t)
	_, port, _ = net.SplitHostPort(up.addr)
	return d, port
}

// TestServeMicroVMWarm: hutch serve --default-tier microvm --warm 1 keeps
// a guest booted, its memory (QEMU's resident memory) the gauge
// hutch_warm_memory_bytes; a create with the default policy takes it (the
// warm count's hit) and its commands run on the guest's kernel with the
// create's environment; the pool boots another.
func TestServeMicroVMWarm(t *testing.T) {
	t.Parallel()
	env := microVMEnv(t, t.TempDir())
	d := startDaemonEnv(t, []string{env[len(env)-1]}, nil, "--default-tier", "microvm", "--allow-emulation", "--warm", "1")
	const ready = `hutch_warm_sandboxes{template=""} 1`
	if !testutil.Eventually(3*time.Minute, func() bool { return strings.Contains(d.metrics(t), ready+"\n") }) {
		t.Fatalf("the warm pool did not fill: no %s in\n%s", ready, d.metrics(t))
	}
	mem := regexp.MustCompile(`(?m)^hutch_warm_memory_bytes\{template=""\} (\S+)$`).FindStringSubmatch(d.metrics(t))
	if mem == nil {
		t.Fatalf("no hutch_warm_memory_bytes of the pool:\n%s", d.metrics(t))
	}
	if n, err := strconv.ParseFloat(mem[1], 64); err != nil || n < 10<<20 {
		t.Errorf("hutch_warm_memory_bytes %s: want a booted guest's QEMU, tens of MiB at least", mem[1])
	} else {
		t.Logf("an idle warm guest holds %.0f MiB", n/(1<<20))
	}

	start := time.Now()
	r := d.admin(t, "create", "--env", "GREETING=warm")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "exec", id, "--", "sh", "-c", `echo "$GREETING $(uname -r)"`)
	wantOK(t, r)
	t.Logf("a warm microVM: create to first output %v", time.Since(start))
	if got := strings.Fields(r.stdout); len(got) != 2 || got[0] != "warm" || !strings.Contains(got[1], "cloud") {
		t.Errorf("exec in the warm guest: %q, want the create's environment and the guest's kernel", r.stdout)
	}
	if m := d.metrics(t); !strings.Contains(m, `hutch_warm_creates_total{template="",result="hit"} 1`+"\n") {
		t.Errorf("the create did not take the warm guest:\n%s", m)
	}
	if !testutil.Eventually(3*time.Minute, func() bool { return strings.Contains(d.metrics(t), ready+"\n") }) {
		t.Errorf("the warm pool did not boot another guest: no %s in\n%s", ready, d.metrics(t))
	}
	wantOK(t, d.admin(t, "rm", id))
}

// waitGone waits up to a minute for procs to end.
func waitGone(t *testing.T, procs []belowProc, when string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var left []belowProc
		for _, p := range procs {
			if p.alive() {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = unix.Kill(p.pid, unix.SIGKILL)
			}
			t.Fatalf("%s, still running: %+v", when, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// belowProc is a process below another in the process tree.
type belowProc struct {
	pid   int
	comm  string
	start string
}

func (p belowProc) alive() bool {
	f, err := procStat(p.pid)
	return err == nil && f[19] == p.start && f[0] != "Z"
}

// processesBelow lists the processes below root, in any pid namespace.
func processesBelow(t *testing.T, root int) []belowProc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	procs := map[int]belowProc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		parent[pid], _ = strconv.Atoi(f[1])
		procs[pid] = belowProc{pid: pid, comm: strings.TrimSpace(string(comm)), start: f[19]}
	}
	var out []belowProc
	for pid, p := range procs {
		for q, n := parent[pid], 0; q > 1 && n < 1000; q, n = parent[q], n+1 {
			if q == root {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
