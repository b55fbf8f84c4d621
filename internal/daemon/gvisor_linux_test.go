package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/gvisor/gvisortest"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// gvisorConfig is a daemon config whose default tier is gVisor, with the
// test's runsc (gvisortest.Runtime).
func gvisorConfig(t *testing.T) Config {
	t.Helper()
	// Its sandboxes have the host's root, and the tests pause some to disk
	// and resume them: no test may change the host root meanwhile (a
	// restore walks back to each mount point the save held).
	testutil.HostRootSteady(t)
	return Config{DefaultTier: policy.TierGVisor, Runtimes: gvisortest.Runtimes(t)}
}

// TestGVisorServed: a sandbox of hutch serve under gVisor runs the agent
// as its PID 1 inside gVisor's kernel: commands and files work as under
// namespaces, in a writable root of the sandbox's own that never reaches
// the host, the host's private directories hidden; pause and resume keep
// it; destroying it leaves nothing behind.
func TestGVisorServed(t *testing.T) {
	m := newManager(t, gvisorConfig(t))
	info := mustCreate(t, m, "a", CreateRequest{Env: map[string]string{"GREETING": "hello"}})
	if info.Tier != policy.TierGVisor {
		t.Fatalf("tier %q", info.Tier)
	}
	out := mustRun(t, m, "a", info.ID, `echo "$GREETING from $PWD"; id -u; cat /proc/1/cmdline | tr '\0' ' '; echo; dmesg | grep -c -i gvisor; echo made >made-here; cat made-here; ls -A /root | wc -l`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || lines[0] != "hello from "+info.Workspace || lines[1] != "0" || !strings.HasPrefix(lines[2], sandbox.SandboxHutch+" agent") || lines[3] == "0" || lines[4] != "made" || lines[5] != "0" {
		t.Errorf("output:\n%s\nwant: the greeting, uid 0, the agent as PID 1, gVisor's kernel messages, the file, an empty /root", out)
	}
	if _, err := os.Stat(filepath.Join(info.Workspace, "made-here")); err == nil {
		t.Error("the command's file reached the host")
	}
	c, err := m.Agent(testCtx(t), "a", info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(testCtx(t), filepath.Join(info.Workspace, "from-client"), strings.NewReader("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, m, "a", info.ID, `cat from-client`); out != "hi" {
		t.Errorf("the client's file: %q", out)
	}
	// The host pid recorded is runsc's, which holds the sandbox.
	pid := hostPID(t, m, info.ID)
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err != nil || !strings.Contains(string(b), "runsc") {
		t.Errorf("host pid %d is not runsc's: %q, %v", pid, b, err)
	}

	mustRun(t, m, "a", info.ID, `i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done >/dev/null 2>&1 &`)
	if _, err := m.Pause(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, m, "a", info.ID, `a=$(cat /tmp/count); sleep 0.5; b=$(cat /tmp/count); [ "$b" -gt "$a" ] && echo counting`); out != "counting\n" {
		t.Errorf("after resume: %q", out)
	}

	if err := m.Destroy(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("runsc (pid %d) outlived its sandbox", pid)
	}
	got, err := m.Get(testCtx(t), "a", info.ID)
	if err != nil || got.State != store.StateStopped {
		t.Errorf("get after destroy: %+v, %v", got, err)
	}
}

// TestGVisorOOM: a gVisor sandbox that outgrows its memory limit ends
// whole (gVisor has no OOM killer of its own: the host's takes the
// Sentry), and the daemon says why: an "oom" event, the metric, and the
// sandbox stopped.
func TestGVisorOOM(t *testing.T) {
	m := newManager(t, gvisorConfig(t))
	ctx := testCtx(t)
	var p policy.Spec
	p.Resources.MemoryBytes = 64 << 20
	info := mustCreate(t, m, "a", CreateRequest{Policy: p})
	ch, err := m.Events(ctx, "a", info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := OOMKills.With().Value()
	// dd's 256 MiB buffer does not fit in 64 MiB.
	_, _, _ = run(ctx, m, "a", info.ID, `dd if=/dev/zero of=/dev/null bs=256M count=1`)
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for oom := false; !oom; {
		select {
		case e := <-ch:
			if e.Type != EventOOM {
				continue
			}
			oom = true
			if r, _ := e.Data["reason"].(string); !strings.Contains(r, "out of memory") {
				t.Errorf("oom event data %v", e.Data)
			}
			if after := OOMKills.With().Value(); after < before+1 {
				t.Errorf("hutch_oom_kills_total went from %v to %v", before, after)
			}
		case <-timer.C:
			t.Fatal("no oom event")
		}
	}
	if !testutil.Eventually(30*time.Second, func() bool {
		got, err := m.Get(ctx, "a", info.ID)
		return err == nil && got.State == store.StateStopped
	}) {
		t.Error("the sandbox is not stopped after its Sentry was OOM-killed")
	}
}
