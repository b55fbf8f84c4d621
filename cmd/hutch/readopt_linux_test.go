package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/client"
	"github.com/hutch-sandbox/hutch/internal/image/imagetest"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// TestServeReadopt: a `hutch serve` killed with SIGKILL leaves its
// sandboxes running, and the next one on the same state directory takes
// them again — the sandbox is listed running, exec works, a process
// started before runs on with its memory (a shell loop's counter goes on
// from where it was, same pid), the files written before are there, its
// egress still goes through the proxy with its rules (an allowed loopback
// host answers, another is refused), a sandbox taken from the warm pool
// keeps its create's environment, one of an image runs on it, a timeout ends its sandbox no earlier
// than the time recorded, and the warm pool is whole again. A sandbox
// whose PID 1 was killed while no daemon ran is cleaned up. Then SIGUSR2
// stops the daemon leaving the sandbox running, and the next one takes it
// again; SIGTERM ends everything, and nothing is left.
func TestServeReadopt(t *testing.T) {
	img := imagetest.Busybox(t, func(ok bool, reason string) { testutil.Need(t, ok, reason) })
	d := startDaemonWith(t, importImage(t, img, "hutch.test/readopt:1"), "--warm", "2", "--allow-private", "127.0.0.1/32")
	p := newReadoptProbe(t, d)
	ctx, c, sb := p.ctx, p.c, p.sb
	id := sb.ID
	// From the warm pool, with an environment its commands get.
	short, err := c.Create(ctx, client.CreateOptions{Timeout: 25 * time.Second, Env: map[string]string{"GREETING": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fromImage, err := c.Create(ctx, client.CreateOptions{Image: "hutch.test/readopt:1"})
	if err != nil {
		t.Fatal(err)
	}
	run := p.run
	curl := func() string { t.Helper(); return p.curl(id) }
	count := func() int { t.Helper(); return p.count(id) }
	p.wantEgress("before", curl())
	loop, before := p.startLoop()
	// The processes of the sandboxes, to end them whatever happens.
	procs := sandboxProcs(t, d.cmd.Process.Pid)
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
		}
	})
	doomedPID1 := pid1Of(t, procs, doomed.ID)

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	// Each sandbox's PID 1 outlives the daemon (the loop's shell is
	// checked inside below; the loop's sleeps come and go).
	for _, sid := range []string{id, short.ID, doomed.ID, fromImage.ID} {
		if p := pid1Of(t, procs, sid); !p.alive() {
			t.Errorf("the PID 1 (%d) of %s ended with the daemon", p.pid, sid)
		}
	}
	doomedPID1.kill()
	d.start(t)

	t.Run("taken again", func(t *testing.T) {
		got, err := c.Get(ctx, id)
		if err != nil || got.State != "running" {
			t.Fatalf("after the restart: %+v, %v; want running", got, err)
		}
		if !got.ExpiresAt.Equal(sb.ExpiresAt) {
			t.Errorf("expires at %v, was %v", got.ExpiresAt, sb.ExpiresAt)
		}
		if out := run(id, "cat /tmp/before; kill -0 "+loop+" && echo same"); out != "written\nsame\n" {
			t.Errorf("the file and the loop after the restart: %q", out)
		}
		if !testutil.Eventually(guard, func() bool { return count() > before }) {
			t.Errorf("the loop stopped counting at %d", before)
		}
		p.wantEgress("after the restart", curl())
		if out := run(fromImage.ID, "cat /etc/motd"); out != "from the image\n" {
			t.Errorf("a sandbox of an image, after the restart: %q", out)
		}
		if out := run(short.ID, `echo "$GREETING"`); out != "hello\n" {
			t.Errorf("the environment of a warm sandbox's create, after the restart: %q", out)
		}
		p.wantUpstreamTwice()
	})
	t.Run("audit", func(t *testing.T) {
		// Each sandbox taken again is a line of the audit log, from the
		// daemon's start; the one gone meanwhile is not.
		took := map[string]bool{}
		for _, e := range auditEntries(t, d.stateDir) {
			if e.Action == "take_back" {
				took[e.Sandbox] = true
				if e.Tenant == "" || e.Subject != "this machine" {
					t.Errorf("a take-back's line: %+v", e)
				}
			}
		}
		for _, sid := range []string{id, short.ID, fromImage.ID} {
			if !took[sid] {
				t.Errorf("no take_back line for %s: %v", sid, took)
			}
		}
		if took[doomed.ID] {
			t.Errorf("a take_back line for %s, whose PID 1 was killed", doomed.ID)
		}
	})
	t.Run("gone while no daemon ran", func(t *testing.T) {
		got, err := c.Get(ctx, doomed.ID)
		if err == nil && got.State != "stopped" {
			t.Errorf("a sandbox whose PID 1 was killed: %+v", got)
		}
		if _, err := os.Stat(filepath.Join(d.stateDir, "sandboxes", doomed.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("its directory remains: %v", err)
		}
	})
	t.Run("warm pool", func(t *testing.T) {
		const whole = `hutch_warm_sandboxes{template=""} 2`
		if !testutil.Eventually(guard, func() bool { return strings.Contains(d.metrics(t), whole) }) {
			t.Errorf("the warm pool is not whole again:\n%s", d.metrics(t))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		var got *client.Sandbox
		if !testutil.Eventually(2*guard, func() bool {
			got, err = c.Get(ctx, short.ID)
			return err != nil || got.State != "running"
		}) {
			t.Fatalf("the sandbox of %s was not ended by its timeout (expires at %v)", short.ID, short.ExpiresAt)
		}
		if now := time.Now(); now.Before(short.ExpiresAt) {
			t.Errorf("the sandbox ended at %v, before its time %v (%+v, %v)", now, short.ExpiresAt, got, err)
		}
	})

	// SIGUSR2: the daemon stops and the sandbox runs on, for the next.
	if err := d.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if !strings.Contains(d.log.String(), "sandbox left running for the next hutch serve") {
		t.Errorf("SIGUSR2 left no sandbox running:\n%s", d.log.String())
	}
	d.start(t)
	if out := run(id, "kill -0 "+loop+" && echo same"); out != "same\n" {
		t.Errorf("the loop after SIGUSR2 and a restart: %q", out)
	}
	p.wantEgress("after SIGUSR2", curl())

	// SIGTERM ends everything, as ever.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if d.waitErr != nil {
		t.Errorf("hutch serve after SIGTERM: %v\n%s", d.waitErr, d.log.String())
	}
	for _, p := range procs {
		if !testutil.Eventually(guard, func() bool { return !p.alive() }) {
			t.Errorf("sandbox process %d outlived the daemon's SIGTERM", p.pid)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(d.stateDir, "sandboxes"))
	if len(entries) > 0 {
		t.Errorf("left in the sandboxes directory: %v", entries)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), d.stateDir) {
		t.Errorf("mounts left under the state directory (%v):\n%s", err, mi)
	}
}

// pid1Of is the process of procs that is PID 1 of sandbox id (its cgroup
// is named after it, its parent is not in it).
func pid1Of(t *testing.T, procs []sandboxProc, id string) sandboxProc {
	t.Helper()
	in := func(pid int) bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		return err == nil && strings.Contains(string(b), "hutch-"+id)
	}
	for _, p := range procs {
		f, err := procStat(p.pid)
		if err != nil {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		if in(p.pid) && !in(ppid) {
			return p
		}
	}
	t.Fatalf("no PID 1 of %s among %v", id, procs)
	return sandboxProc{}
}

// TestServeReadoptGVisor: TestServeReadopt's sandbox under gVisor. A
// `hutch serve` killed with SIGKILL leaves its gVisor sandbox running (its
// Sentry, started detached, is no child of the daemon's), and the next one
// takes it again: the same Sentry, a shell loop that still counts, the
// files written before, its egress through the proxy made again (an
// allowed host answers, another is refused), gVisor's kernel. SIGUSR2
// leaves it running too; SIGTERM ends it and leaves nothing: no process of
// its Sentry's, no runsc state, no mount of its bundle directory.
func TestServeReadoptGVisor(t *testing.T) {
	d := startDaemonWith(t, nil, "--default-tier", "gvisor", "--runsc", testutil.Runsc(t), "--allow-private", "127.0.0.1/32")
	p := newReadoptProbe(t, d)
	ctx, c, sb, id := p.ctx, p.c, p.sb, p.sb.ID
	run := func(script string) string { t.Helper(); return p.run(id, script) }
	curl := func() string { t.Helper(); return p.curl(id) }
	count := func() int { t.Helper(); return p.count(id) }
	wantEgress := p.wantEgress
	wantKernel := func(when string) {
		t.Helper()
		if out := run(`dmesg | grep -c -i gvisor`); strings.TrimSpace(out) == "0" {
			t.Errorf("%s: no gVisor kernel messages in dmesg", when)
		}
	}
	wantEgress("before", curl())
	wantKernel("before")
	loop, before := p.startLoop()
	// Its bundle directory (the lasting file's handle) and its Sentry
	// (that directory's owner).
	var ls struct {
		Handle string `json:"handle"`
	}
	if b, err := os.ReadFile(filepath.Join(d.stateDir, "sandboxes", id, "lasting.json")); err != nil || json.Unmarshal(b, &ls) != nil || ls.Handle == "" {
		t.Fatalf("the sandbox's lasting file: %q, %v", b, err)
	}
	b, err := os.ReadFile(filepath.Join(ls.Handle, "owner"))
	if err != nil {
		t.Fatal(err)
	}
	var sentry sandboxProc
	if _, err := fmt.Sscan(string(b), &sentry.pid, &sentry.start); err != nil || !sentry.alive() {
		t.Fatalf("the bundle's owner %q is not a live process: %v", b, err)
	}
	if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", sentry.pid)); !strings.Contains(string(cmdline), "boot") {
		t.Fatalf("the bundle's owner %d is not gVisor's Sentry: %q", sentry.pid, cmdline)
	}
	t.Cleanup(sentry.kill)

	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if !sentry.alive() {
		t.Fatal("gVisor's Sentry ended with the daemon")
	}
	d.start(t)
	got, err := c.Get(ctx, id)
	if err != nil || got.State != "running" || !got.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Fatalf("after the restart: %+v, %v; want running until %v", got, err, sb.ExpiresAt)
	}
	if out := run("cat /tmp/before; kill -0 " + loop + " && echo same"); out != "written\nsame\n" {
		t.Errorf("the file and the loop after the restart: %q", out)
	}
	if !testutil.Eventually(guard, func() bool { return count() > before }) {
		t.Errorf("the loop stopped counting at %d", before)
	}
	wantEgress("after the restart", curl())
	wantKernel("after the restart")
	p.wantUpstreamTwice()

	// SIGUSR2: the daemon stops and the sandbox runs on, for the next.
	if err := d.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if !sentry.alive() {
		t.Fatal("gVisor's Sentry ended with the daemon's SIGUSR2")
	}
	d.start(t)
	if out := run("kill -0 " + loop + " && echo same"); out != "same\n" {
		t.Errorf("the loop after SIGUSR2 and a restart: %q", out)
	}
	wantEgress("after SIGUSR2", curl())

	// SIGTERM ends everything, as ever.
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	if d.waitErr != nil {
		t.Errorf("hutch serve after SIGTERM: %v\n%s", d.waitErr, d.log.String())
	}
	if !testutil.Eventually(guard, func() bool { return !sentry.alive() }) {
		t.Errorf("gVisor's Sentry %d outlived the daemon's SIGTERM", sentry.pid)
	}
	if _, err := os.Lstat(ls.Handle); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its bundle directory and runsc's state remain: %v", err)
	}
	// The last of them (runsc delete, the cleanup's) may be ending as
	// the daemon does: given the Sentry's time to go.
	var procs []string
	if !testutil.Eventually(guard, func() bool { procs = processesNaming(filepath.Base(ls.Handle)); return len(procs) == 0 }) {
		t.Errorf("processes of the sandbox left: %v", procs)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil || strings.Contains(string(mi), ls.Handle) || strings.Contains(string(mi), d.stateDir) {
		t.Errorf("mounts left (%v):\n%s", err, mi)
	}
}

// readoptProbe is what the restart tests do through a served daemon: a
// sandbox created with egress rules for a loopback upstream (allowed.test
// allowed, blocked.test not), commands in it, its egress checked, a
// counting loop started in it.
type readoptProbe struct {
	t    *testing.T
	ctx  context.Context
	c    *client.Client
	up   *upstream
	port string
	sb   *client.Sandbox
}

func newReadoptProbe(t *testing.T, d *daemonProc) *readoptProbe {
	t.Helper()
	p := &readoptProbe{t: t, ctx: context.Background(), up: startUpstream(t)}
	_, p.port, _ = net.SplitHostPort(p.up.addr)
	var err error
	if p.c, err = client.New("unix://"+d.sock, ""); err != nil {
		t.Fatal(err)
	}
	pol, _ := json.Marshal(map[string]any{"network": map[string]any{
		"allowed_domains": []string{"allowed.test:" + p.port},
		"hosts":           []string{"allowed.test:127.0.0.1", "blocked.test:127.0.0.1"},
	}})
	if p.sb, err = p.c.Create(p.ctx, client.CreateOptions{Policy: pol, Timeout: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs script with sh in sandbox id and returns its output; it must
// succeed.
func (p *readoptProbe) run(id, script string) string {
	p.t.Helper()
	res, err := p.c.Run(p.ctx, id, client.Command{Args: []string{"sh", "-c", script}})
	if err != nil {
		p.t.Fatalf("run %q in %s: %v", script, id, err)
	}
	if res.Code != 0 {
		p.t.Fatalf("run %q in %s: exit %d, stderr %s", script, id, res.Code, res.Stderr)
	}
	return string(res.Stdout)
}

// curl asks the allowed and the blocked host from sandbox id.
func (p *readoptProbe) curl(id string) string {
	p.t.Helper()
	return p.run(id, `curl -sS --max-time 10 http://allowed.test:`+p.port+`/one; echo "RC allowed $?"
curl -sS --max-time 10 -o /dev/null -D - http://blocked.test:`+p.port+`/two; echo "RC blocked $?"`)
}

// wantEgress checks curl's output: the allowed host answered, the blocked
// one was refused by the proxy.
func (p *readoptProbe) wantEgress(when, out string) {
	p.t.Helper()
	for _, want := range []string{"hello from allowed.test:" + p.port + "/one", "RC allowed 0", "403", "X-Hutch-Blocked: not in allowedDomains"} {
		if !strings.Contains(out, want) {
			p.t.Errorf("egress %s: the output lacks %q:\n%s", when, want, out)
		}
	}
}

// wantUpstreamTwice checks that the upstream got the allowed request
// twice (before and after a restart), and nothing else.
func (p *readoptProbe) wantUpstreamTwice() {
	p.t.Helper()
	if got := p.up.requests(); len(got) != 2 || got[0] != got[1] || got[0] != "allowed.test:"+p.port+"/one" {
		p.t.Errorf("the upstream got %q, want the allowed request twice", got)
	}
}

// startLoop writes /tmp/before in the probe's sandbox and starts there, in
// the background, a shell loop that counts in a variable of its own into
// /tmp/count; it returns the loop's pid and a count it reached.
func (p *readoptProbe) startLoop() (pid string, before int) {
	p.t.Helper()
	pid = strings.TrimSpace(p.run(p.sb.ID, `echo written >/tmp/before; setsid sh -c 'n=0; while :; do n=$((n+1)); echo $n >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & echo $!`))
	if !testutil.Eventually(guard, func() bool { before = p.count(p.sb.ID); return before > 2 }) {
		p.t.Fatalf("the loop does not count: %d", before)
	}
	return pid, before
}

// count is the loop's count in sandbox id. The loop renames each count
// into place: a read never meets the file truncated and not yet written.
func (p *readoptProbe) count(id string) int {
	p.t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(p.run(id, "cat /tmp/count 2>/dev/null || echo 0")))
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}
