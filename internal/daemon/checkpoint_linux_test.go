package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/cgroups"
	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/secrets"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// counterScript starts a process that counts in a shell variable, in
// memory only, and answers with the count when asked (askCount).
const counterScript = `nohup sh -c 'i=0; while :; do i=$((i+1)); if [ -e /tmp/ask ]; then echo "$i $$" >/tmp/answer.new; mv /tmp/answer.new /tmp/answer; rm -f /tmp/ask; fi; sleep 0.01; done' >/dev/null 2>&1 &`

// askCount asks the counter of counterScript for its count and pid.
func askCount(t *testing.T, m *Manager, id string) (count, pid int) {
	t.Helper()
	out := mustRun(t, m, "a", id, `rm -f /tmp/answer; touch /tmp/ask; while [ -e /tmp/ask ] || [ ! -e /tmp/answer ]; do sleep 0.01; done; cat /tmp/answer`)
	if _, err := fmt.Sscanf(out, "%d %d", &count, &pid); err != nil {
		t.Fatalf("the counter's answer %q: %v", out, err)
	}
	return count, pid
}

// sandboxMemory is what the host charges to sandbox id's cgroup, and
// whether it has one.
func sandboxMemory(t *testing.T, id string) (int64, bool) {
	t.Helper()
	g, err := cgroups.Named(sandboxCgroupPrefix + id)
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	for _, dir := range g.Paths() {
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				most = max(most, n)
			}
		}
	}
	return most, len(g.Paths()) > 0
}

// upstream serves HTTP on loopback until the test ends, answering with
// the host and path it was asked for; it returns its port.
func upstream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s%s\n", r.Host, r.URL.Path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestGVisorPauseToDisk: under gVisor, Pause saves the sandbox to disk
// and ends its processes (runsc's too: the host's memory is freed); the
// sandbox outlives the daemon — closed, or crashed — and the next daemon
// lists it paused and resumes it with its processes and their memory (a
// count kept in a shell variable goes on from where it was), its root
// layer and /tmp, commands, files and the egress proxy; destroying it
// then leaves nothing.
func TestGVisorPauseToDisk(t *testing.T) {
	testutil.HostRootSteady(t)
	for _, how := range []string{"close", "crash"} {
		t.Run(how, func(t *testing.T) {
			cfg := gvisorConfig(t)
			cfg.StateDir = stateDir(t)
			cfg.AllowPrivate = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
			port := upstream(t)
			m := newManager(t, cfg)
			info := mustCreate(t, m, "a", CreateRequest{Policy: policy.Spec{Network: policy.Network{
				AllowedDomains: []string{"up.test:" + port},
				Hosts:          []string{"up.test:127.0.0.1"},
			}}})
			mustRun(t, m, "a", info.ID, `echo layer >/etc/hutch-layer-file; echo tmp >/tmp/tmp-file; echo ws >ws-file; `+counterScript)
			var before, pid int
			for before < 100 {
				before, pid = askCount(t, m, info.ID)
			}
			runsc := hostPID(t, m, info.ID)
			mem, ok := sandboxMemory(t, info.ID)
			if !ok || mem == 0 {
				t.Errorf("the sandbox's cgroup: %d bytes, %v", mem, ok)
			}

			start := time.Now()
			got, err := m.Pause(testCtx(t), "a", info.ID)
			if err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if got.State != store.StatePaused {
				t.Errorf("state after pause: %q", got.State)
			}
			if !gone(runsc) {
				t.Errorf("runsc (pid %d) still runs after the pause to disk", runsc)
			}
			if _, ok := sandboxMemory(t, info.ID); ok {
				t.Error("the sandbox's cgroup is still there: its memory is not freed")
			}
			sb, err := m.st.GetSandbox(context.Background(), "", info.ID)
			if err != nil || sb.Checkpoint == "" || sb.PID != 0 {
				t.Fatalf("record after pause: %+v, %v", sb, err)
			}
			if fi, err := os.Stat(sb.Checkpoint); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("the checkpoint directory: %v, %v", fi, err)
			}
			t.Logf("paused to disk in %s: %d KiB on disk; the sandbox's cgroup held %d KiB", took, diskUsage(sb.Checkpoint)>>10, mem>>10)
			if _, err := m.Agent(testCtx(t), "a", info.ID); !errors.Is(err, ErrConflict) {
				t.Errorf("a command while paused to disk: %v, want a conflict", err)
			}

			if how == "close" {
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
			} else {
				crash(m)
			}
			m2 := newManager(t, cfg)
			if got, err := m2.Get(testCtx(t), "a", info.ID); err != nil || got.State != store.StatePaused {
				t.Fatalf("the next daemon's record: %+v, %v", got, err)
			}
			if list, err := m2.List(testCtx(t), "a", nil, store.StatePaused); err != nil || len(list) != 1 || list[0].ID != info.ID {
				t.Errorf("paused sandboxes listed: %+v, %v", list, err)
			}

			start = time.Now()
			if got, err = m2.Resume(testCtx(t), "a", info.ID); err != nil {
				t.Fatal(err)
			}
			t.Logf("resumed from disk in %s", time.Since(start))
			if got.State != store.StateRunning {
				t.Errorf("state after resume: %q", got.State)
			}
			after, pid2 := askCount(t, m2, info.ID)
			if pid2 != pid || after <= before {
				t.Errorf("the counter after resume: %d (pid %d), before the pause: %d (pid %d); want the same process, counting on", after, pid2, before, pid)
			}
			out := mustRun(t, m2, "a", info.ID, `cat /etc/hutch-layer-file /tmp/tmp-file ws-file; curl -sS --max-time 10 http://up.test:`+port+`/after`)
			if want := "layer\ntmp\nws\nupstream saw up.test:" + port + "/after\n"; out != want {
				t.Errorf("after resume:\n%s\nwant:\n%s", out, want)
			}
			c, err := m2.Agent(testCtx(t), "a", info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.WriteFile(testCtx(t), filepath.Join(info.Workspace, "from-client"), strings.NewReader("hi"), 0o644); err != nil {
				t.Fatal(err)
			}
			if out := mustRun(t, m2, "a", info.ID, `cat from-client`); out != "hi" {
				t.Errorf("the client's file: %q", out)
			}
			if _, err := os.Stat(sb.Checkpoint); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the checkpoint after resume: %v", err)
			}

			runsc = hostPID(t, m2, info.ID)
			if err := m2.Destroy(testCtx(t), "a", info.ID); err != nil {
				t.Fatal(err)
			}
			if !gone(runsc) {
				t.Errorf("runsc (pid %d) outlived its sandbox", runsc)
			}
			if _, err := os.Stat(sb.Dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the sandbox's directory after destroy: %v", err)
			}
		})
	}
}

// TestGVisorResumeFromDiskFails: a resume from disk whose restore fails
// (its checkpoint damaged: runsc restore ends at once) says why, in
// runsc's own words rather than only as its agent's connection closing,
// and leaves the sandbox paused; once its checkpoint is whole again, it
// resumes, its processes going on.
func TestGVisorResumeFromDiskFails(t *testing.T) {
	testutil.HostRootSteady(t)
	m := newManager(t, gvisorConfig(t))
	info := mustCreate(t, m, "a", CreateRequest{})
	mustRun(t, m, "a", info.ID, counterScript)
	before, pid := askCount(t, m, info.ID)
	if _, err := m.Pause(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	sb, err := m.st.GetSandbox(context.Background(), "", info.ID)
	if err != nil || sb.Checkpoint == "" {
		t.Fatalf("record after pause: %+v, %v", sb, err)
	}
	// gVisor's state file: the kernel and its processes.
	state := filepath.Join(sb.Checkpoint, "image", "checkpoint.img")
	whole, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, []byte(strings.Repeat("hutch", len(whole)/5+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = m.Resume(testCtx(t), "a", info.ID)
	if err == nil || !strings.Contains(err.Error(), "the sandbox ended: runsc ended with code") {
		t.Fatalf("a resume from a damaged checkpoint: %v; want why the sandbox ended (runsc's words)", err)
	}
	t.Logf("resume from a damaged checkpoint: %v", err)
	if got, err := m.Get(testCtx(t), "a", info.ID); err != nil || got.State != store.StatePaused {
		t.Fatalf("after a failed resume: %+v, %v; want paused", got, err)
	}
	if err := os.WriteFile(state, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(testCtx(t), "a", info.ID); err != nil {
		t.Fatal(err)
	}
	if after, pid2 := askCount(t, m, info.ID); pid2 != pid || after <= before {
		t.Errorf("the counter after resume: %d (pid %d), before the pause: %d (pid %d); want the same process, counting on", after, pid2, before, pid)
	}
}

// TestGVisorPauseToDiskEnds: a pause to disk that fails leaves the
// sandbox running, with its processes, and says why; a sandbox with
// secrets is paused in memory, never to disk; a sandbox paused to disk is
// destroyed (Destroy, or its timeout, which runs while it is paused) with
// its checkpoint and directory, and nothing of runsc's is left.
func TestGVisorPauseToDiskEnds(t *testing.T) {
	cfg := gvisorConfig(t)
	m := newManager(t, cfg)
	a := mustCreate(t, m, "a", CreateRequest{})
	b := mustCreate(t, m, "a", CreateRequest{})

	var p policy.Spec
	p.Secrets = []policy.Secret{{Name: "TOKEN", Hosts: []string{"example.com"}, From: policy.SecretFromRequest}}
	s := mustCreate(t, m, "a", CreateRequest{Policy: p, Secrets: map[string]secrets.Value{"TOKEN": secrets.NewValue([]byte("hutch-test-secret"))}})
	runsc := hostPID(t, m, s.ID)
	if _, err := m.Pause(testCtx(t), "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if sb, err := m.st.GetSandbox(context.Background(), "", s.ID); err != nil || sb.State != store.StatePaused || sb.Checkpoint != "" || gone(runsc) {
		t.Errorf("a sandbox with secrets, paused: %+v, %v, runsc gone %v; want paused in memory", sb, err, gone(runsc))
	}
	if _, err := m.Resume(testCtx(t), "a", s.ID); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, m, "a", s.ID, "echo back"); out != "back\n" {
		t.Errorf("after resume: %q", out)
	}
	mustRun(t, m, "a", a.ID, counterScript)
	before, pid := askCount(t, m, a.ID)

	// The sandbox's directory read-only: the checkpoint cannot be made.
	dir := filepath.Join(m.sbRoot, a.ID)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		t.Fatal(err)
	}
	_, err := m.Pause(testCtx(t), "a", a.ID)
	_ = unix.Unmount(dir, unix.MNT_DETACH)
	if err == nil || !strings.Contains(err.Error(), "read-only") || !strings.Contains(err.Error(), "runs on") {
		t.Errorf("a pause that cannot write: %v", err)
	}
	if got, err := m.Get(testCtx(t), "a", a.ID); err != nil || got.State != store.StateRunning {
		t.Errorf("after a failed pause: %+v, %v", got, err)
	}
	if after, pid2 := askCount(t, m, a.ID); pid2 != pid || after <= before {
		t.Errorf("the counter after a failed pause: %d (pid %d), before: %d (pid %d)", after, pid2, before, pid)
	}

	for _, id := range []string{a.ID, b.ID} {
		if _, err := m.Pause(testCtx(t), "a", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Destroy(testCtx(t), "a", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Extend(testCtx(t), "a", b.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(30*time.Second, func() bool {
		got, err := m.Get(context.Background(), "a", b.ID)
		return err == nil && got.State == store.StateStopped
	}) {
		t.Error("a sandbox paused to disk outlived its timeout")
	}
	for _, id := range []string{a.ID, b.ID} {
		if got, err := m.Get(testCtx(t), "a", id); err != nil || got.State != store.StateStopped {
			t.Errorf("%s: %+v, %v; want stopped", id, got, err)
		}
		if _, err := os.Stat(filepath.Join(m.sbRoot, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: its directory: %v", id, err)
		}
		if _, err := m.Resume(testCtx(t), "a", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: resume after its end: %v, want not found", id, err)
		}
	}
}
