package daemon

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// TestReadopt: a namespace-tier sandbox outlives its daemon twice in a
// row — crashed, then closed after LeaveRunning — and each next daemon
// takes it again: the same PID 1, a background process that runs on,
// commands, its egress proxy's rules (an allowed host through the
// sandbox's own 127.0.0.1:3128, made again each time), its timeout. A
// daemon that would refuse its egress rules ends it instead, and a
// sandbox with secrets does not outlive its daemon.
func TestReadopt(t *testing.T) {
	readopt(t, Config{})
}

// TestReadoptGVisor: TestReadopt's sandboxes under gVisor, whose host
// pid is gVisor's Sentry's; the daemon that ends the sandbox it would not
// take again leaves nothing of it in the tier's state directory
// (gvisortest.Runtime fails the test otherwise).
func TestReadoptGVisor(t *testing.T) {
	cfg := gvisorConfig(t)
	readopt(t, cfg)
}

// readopt is TestReadopt with base's runtimes and default tier.
func readopt(t *testing.T, base Config) {
	cfg := base
	cfg.StateDir, cfg.AllowPrivate = stateDir(t), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	port := upstream(t)
	m := newManager(t, cfg)
	info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Network: policy.Network{
		AllowedDomains: []string{"up.test:" + port},
		Hosts:          []string{"up.test:127.0.0.1"},
	}}})
	var sp policy.Spec
	sp.Secrets = []policy.Secret{{Name: "TOKEN", Hosts: []string{"up.test:" + port}, From: policy.SecretFromRequest}}
	withSecret := mustCreate(t, m, "a", CreateRequest{Policy: sp, Secrets: map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte("not-a-real-value"))}})
	pid := hostPID(t, m, info.ID)
	secretPID := hostPID(t, m, withSecret.ID)
	bg := strings.TrimSpace(mustRun(t, m, "a", info.ID, `setsid sleep 1000 >/dev/null 2>&1 & echo $!`))
	egress := `curl -sS --max-time 10 http://up.test:` + port + `/x; curl -sS --max-time 10 -o /dev/null -w '%{http_code}\n' http://other.test:` + port + `/y`
	want := "upstream saw up.test:" + port + "/x\n403\n"
	if out := mustRun(t, m, "a", info.ID, egress); out != want {
		t.Fatalf("egress before: %q, want %q", out, want)
	}
	for round, stop := range []func(*Manager){crash, func(m *Manager) {
		m.LeaveRunning()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}} {
		stop(m)
		if gone(pid) {
			t.Fatalf("round %d: PID 1 ended with its daemon", round)
		}
		m = newManager(t, cfg)
		got, err := m.Get(testCtx(t), "a", info.ID)
		if err != nil || got.State != store.StateRunning || !got.ExpiresAt.Equal(info.ExpiresAt) {
			t.Fatalf("round %d: %+v, %v; want running until %v", round, got, err, info.ExpiresAt)
		}
		if p := hostPID(t, m, info.ID); p != pid {
			t.Errorf("round %d: PID 1 is %d, was %d", round, p, pid)
		}
		if out := mustRun(t, m, "a", info.ID, "kill -0 "+bg+" && echo same"); out != "same\n" {
			t.Errorf("round %d: the background process: %q", round, out)
		}
		if out := mustRun(t, m, "a", info.ID, egress); out != want {
			t.Errorf("round %d: egress %q, want %q", round, out, want)
		}
		if round == 0 {
			if !gone(secretPID) {
				t.Error("the sandbox with secrets was not ended by the next daemon")
			}
			if got, err := m.st.GetSandbox(testCtx(t), "", withSecret.ID); err != nil || got.State != store.StateStopped {
				t.Errorf("the record of the sandbox with secrets: %+v, %v", got, err)
			}
		}
	}
	// A daemon that would refuse its rules (no --allow-private for the
	// loopback its host is pinned to) ends it rather than take it again.
	crash(m)
	m = newManager(t, Config{StateDir: cfg.StateDir, DefaultTier: base.DefaultTier, Runtimes: base.Runtimes})
	assertEnded(t, m, info.ID, pid, time.Minute)
}

// TestReadoptGVisorSaves: gVisor saves no sandbox whose agent listens for
// the next daemon. A snapshot of a sandbox its daemon started keeps its
// memory (its agent stops listening at the detach before the save) and
// the sandbox runs on, but no longer outlives that daemon: the next one
// ends it. A snapshot of a sandbox a daemon took again keeps its files
// only, and the sandbox runs on, still taken again after the next crash.
func TestReadoptGVisorSaves(t *testing.T) {
	cfg := gvisorConfig(t)
	cfg.StateDir = stateDir(t)
	m := newManager(t, cfg)
	saved := mustCreate(t, m, "a", CreateRequest{})
	again := mustCreate(t, m, "a", CreateRequest{})
	savedPID, againPID := hostPID(t, m, saved.ID), hostPID(t, m, again.ID)
	sn, err := m.Snapshot(testCtx(t), "a", saved.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !sn.Memory {
		t.Errorf("the snapshot of a sandbox its daemon started: %+v, want its memory", sn)
	}
	if out := mustRun(t, m, "a", saved.ID, "echo on"); out != "on\n" {
		t.Errorf("the sandbox after its snapshot: %q", out)
	}
	crash(m)
	m = newManager(t, cfg)
	assertEnded(t, m, saved.ID, savedPID, time.Minute)
	if out := mustRun(t, m, "a", again.ID, "echo taken again"); out != "taken again\n" {
		t.Fatalf("the other sandbox after the restart: %q", out)
	}
	sn, err = m.Snapshot(testCtx(t), "a", again.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sn.Memory {
		t.Errorf("the snapshot of a sandbox taken again: %+v, want its files only", sn)
	}
	if out := mustRun(t, m, "a", again.ID, "echo on"); out != "on\n" {
		t.Errorf("the sandbox taken again after its snapshot: %q", out)
	}
	crash(m)
	m = newManager(t, cfg)
	if p := hostPID(t, m, again.ID); p != againPID {
		t.Errorf("after the second restart its Sentry is %d, was %d", p, againPID)
	}
	if out := mustRun(t, m, "a", again.ID, "echo still"); out != "still\n" {
		t.Errorf("the sandbox taken again twice: %q", out)
	}
}
