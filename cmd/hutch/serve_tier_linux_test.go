package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/gvisor"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestServeTier: without a runsc (none on PATH, no --runsc) hutch serve
// refuses to start with a default or minimum tier of gvisor, printing the
// command that installs runsc; a --runsc that is not runsc of the pinned
// version is refused too, and so are a default weaker than the minimum
// and an unknown tier. A daemon of the namespace tier without runsc
// refuses hutch create --tier gvisor, saying why, creates a sandbox of
// its default tier without --tier, and hutch ls names it.
func TestServeTier(t *testing.T) {
	testutil.RequireRoot(t)
	const noRunsc = `hutch serve does not run the gvisor tier: runsc: tier "gvisor" needs gVisor's runsc, and there is none on PATH; install it with:
  ` + gvisor.InstallCommand
	for _, c := range []struct {
		flags []string
		code  int
		want  string
	}{
		{[]string{"--default-tier", "gvisor"}, 1, noRunsc},
		{[]string{"--min-tier", "gvisor"}, 1, noRunsc},
		{[]string{"--default-tier", "gvisor", "--min-tier", "gvisor"}, 1, noRunsc},
		{[]string{"--runsc", "/bin/true"}, 1, "hutch: --runsc: runsc /bin/true: not a Go binary with build information"},
		{[]string{"--runsc", "/nonexistent/runsc"}, 1, "hutch: --runsc: runsc /nonexistent/runsc: stat /nonexistent/runsc: no such file or directory"},
		{[]string{"--default-tier", "namespace", "--min-tier", "gvisor"}, 1, "the default tier namespace is weaker than the minimum tier gvisor"},
		{[]string{"--default-tier", "kvm"}, 2, `--default-tier: unknown tier "kvm"`},
		{[]string{"--min-tier", "vm"}, 2, `--min-tier: unknown tier "vm"`},
	} {
		base := t.TempDir()
		// No runsc on PATH, whatever the machine has installed.
		env := []string{"PATH=" + base, "HOME=" + base, "LANG=C.UTF-8"}
		r := hutch(t, invocation{args: append([]string{"serve", "--socket", filepath.Join(base, "s.sock"), "--state-dir", filepath.Join(base, "state")}, c.flags...), env: env})
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("hutch serve %q: %s\nwant exit %d and %q", c.flags, r, c.code, c.want)
		}
	}

	d := startDaemonWith(t, nil, "--default-tier", "namespace", "--min-tier", "namespace", "--runsc", "")
	r := d.admin(t, "create", "--tier", "gvisor")
	if r.code != 1 || !strings.Contains(r.stderr, "hutch serve does not run the gvisor tier") || !strings.Contains(r.stderr, "400 invalid") {
		t.Errorf("hutch create --tier gvisor: %s", r)
	}
	r = d.admin(t, "create", "--runsc", "/usr/local/bin/runsc")
	if r.code != 2 || !strings.Contains(r.stderr, "--runsc is for hutch run") {
		t.Errorf("hutch create --runsc: %s", r)
	}
	r = d.admin(t, "create", "--label", "suite=tier")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "ls", "--label", "suite=tier")
	wantOK(t, r)
	if ls := lines(r.stdout); len(ls) != 2 || !strings.HasPrefix(ls[0], "ID ") || !strings.Contains(ls[0], " TIER ") ||
		!strings.HasPrefix(ls[1], id) || !strings.Contains(ls[1], " running  namespace  -  ") {
		t.Errorf("hutch ls:\n%s", r.stdout)
	}
	r = d.admin(t, "create", "--tier", "namespace")
	wantOK(t, r)
}

// TestServeGVisor: hutch serve --runsc R --default-tier gvisor runs its
// sandboxes under gVisor: hutch create makes one, hutch exec runs in
// gVisor's kernel, hutch ls names the tier; --tier namespace is still
// honoured, and refused by a daemon of --min-tier gvisor.
func TestServeGVisor(t *testing.T) {
	testutil.RequireRoot(t)
	runsc := testutil.Runsc(t)
	d := startDaemonWith(t, nil, "--runsc", runsc, "--default-tier", "gvisor")
	r := d.admin(t, "create", "--label", "suite=gvisor")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "exec", id, "--", "sh", "-c", "dmesg | grep -c -i gvisor; id -u")
	wantOK(t, r)
	if ls := lines(r.stdout); len(ls) != 2 || ls[0] == "0" || ls[1] != "0" {
		t.Errorf("hutch exec in a gVisor sandbox: %s\nwant gVisor's kernel messages and uid 0", r)
	}
	r = d.admin(t, "ls", "--label", "suite=gvisor")
	wantOK(t, r)
	if ls := lines(r.stdout); len(ls) != 2 || !strings.HasPrefix(ls[1], id) || !strings.Contains(ls[1], " running  gvisor  ") {
		t.Errorf("hutch ls:\n%s", r.stdout)
	}
	r = d.admin(t, "create", "--tier", "namespace", "--label", "suite=gvisor")
	wantOK(t, r)
	ns := lastLine(r.stdout)
	r = d.admin(t, "exec", ns, "--", "sh", "-c", "dmesg 2>/dev/null | grep -c -i gvisor; true")
	if strings.TrimSpace(r.stdout) != "0" && strings.TrimSpace(r.stdout) != "" {
		t.Errorf("a namespace sandbox of a gVisor daemon: %s", r)
	}

	strict := startDaemonWith(t, nil, "--runsc", runsc, "--min-tier", "gvisor")
	r = strict.admin(t, "create", "--tier", "namespace")
	if r.code != 1 || !strings.Contains(r.stderr, "namespace is weaker than gvisor, the minimum tier of this daemon") {
		t.Errorf("hutch create --tier namespace on a daemon of --min-tier gvisor: %s", r)
	}
}

// TestServeGVisorPauseRestart: through the binary, a gVisor sandbox
// paused to disk outlives `hutch serve` stopped with SIGTERM (which
// destroys the running ones): the next daemon lists it paused, and hutch
// resume gives it back with its processes and their memory (a count kept
// in a shell variable goes on, in the same process) and its files.
func TestServeGVisorPauseRestart(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.HostRootSteady(t)
	d := startDaemonWith(t, nil, "--runsc", testutil.Runsc(t), "--default-tier", "gvisor")
	r := d.admin(t, "create")
	wantOK(t, r)
	id := lastLine(r.stdout)
	r = d.admin(t, "create")
	wantOK(t, r)
	running := lastLine(r.stdout)
	ask := startCounter(t, d, id)
	before, pid := ask()
	wantOK(t, d.admin(t, "pause", id))

	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d.start(t)
	r = d.admin(t, "ls", "-q", "--state", "paused")
	if wantOK(t, r); strings.TrimSpace(r.stdout) != id {
		t.Errorf("paused after the restart: %q, want %s", r.stdout, id)
	}
	r = d.admin(t, "ls", "-q")
	if wantOK(t, r); strings.Contains(r.stdout, running) {
		t.Errorf("the running sandbox outlived the daemon's shutdown: %q", r.stdout)
	}
	wantResumed(t, d, id, ask, before, pid)
	wantOK(t, d.admin(t, "rm", id))
}

// startCounter starts, in sandbox id of d, a shell that counts in its own
// memory only and answers when asked, and writes /etc/kept; ask returns
// the count and the shell's pid. A pause that keeps memory keeps both.
func startCounter(t *testing.T, d *daemonProc, id string) (ask func() (count, pid int)) {
	t.Helper()
	wantOK(t, d.admin(t, "exec", id, "--", "sh", "-c", `echo kept >/etc/kept; sh -c 'i=0; while :; do i=$((i+1)); if [ -e /tmp/ask ]; then echo "$i $$" >/tmp/answer.new; mv /tmp/answer.new /tmp/answer; rm -f /tmp/ask; fi; sleep 0.05; done' >/dev/null 2>&1 &`))
	return startCounterOf(t, d, id)
}

// wantResumed resumes sandbox id of d, paused to disk and restored by a
// daemon started again, and checks that startCounter's counter goes on
// in the same process (it answered before in pid) and /etc/kept is there.
func wantResumed(t *testing.T, d *daemonProc, id string, ask func() (count, pid int), before, pid int) {
	t.Helper()
	wantOK(t, d.admin(t, "resume", id))
	if after, pid2 := ask(); pid2 != pid || after <= before {
		t.Errorf("the counter after the restart: %d (pid %d), before: %d (pid %d)", after, pid2, before, pid)
	}
	r := d.admin(t, "exec", id, "--", "cat", "/etc/kept")
	if wantOK(t, r); r.stdout != "kept\n" {
		t.Errorf("the root layer after the restart: %q", r.stdout)
	}
}

// startCounterOf is startCounter's ask of sandbox id, whose counter runs
// already: a copy of the sandbox startCounter started it in.
func startCounterOf(t *testing.T, d *daemonProc, id string) (ask func() (count, pid int)) {
	return func() (count, pid int) {
		t.Helper()
		r := d.admin(t, "exec", id, "--", "sh", "-c", `rm -f /tmp/answer; touch /tmp/ask; while [ -e /tmp/ask ] || [ ! -e /tmp/answer ]; do sleep 0.05; done; cat /tmp/answer`)
		wantOK(t, r)
		if _, err := fmt.Sscanf(r.stdout, "%d %d", &count, &pid); err != nil {
			t.Fatalf("the counter's answer %q: %v", r.stdout, err)
		}
		return count, pid
	}
}
