package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/policy"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// bothTiers runs f in the namespace tier (in parallel) and in gVisor's,
// each with a daemon of its own.
func bothTiers(t *testing.T, f func(t *testing.T, m *Manager, tier string)) {
	for _, tier := range []string{policy.TierNamespace, policy.TierGVisor} {
		t.Run(tier, func(t *testing.T) {
			cfg := Config{}
			if tier == policy.TierGVisor {
				cfg = gvisorConfig(t)
			} else {
				t.Parallel()
			}
			cfg.StateDir = stateDir(t)
			f(t, newManager(t, cfg), tier)
		})
	}
}

// bootID is the boot ID sandbox id reads.
func bootID(t *testing.T, m *Manager, id string) string {
	t.Helper()
	out := strings.TrimSpace(mustRun(t, m, "a", id, "cat /proc/sys/kernel/random/boot_id"))
	if len(out) != 36 || strings.Count(out, "-") != 4 {
		t.Fatalf("boot id %q", out)
	}
	return out
}

// sleeping reports whether a process whose command line holds marker runs
// in sandbox id.
func sleeping(t *testing.T, m *Manager, id, marker string) bool {
	t.Helper()
	return strings.Contains(mustRun(t, m, "a", id, `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' <$f; echo; done`), marker)
}

// TestColdBoot: a sandbox has a boot ID of its own (not the host's, in
// either tier), which it can neither change nor uncover; a resume after a
// pause without memory, or with Reboot after one with memory, boots it
// again: a new boot ID, no process left but its agent, its files kept; a
// resume with memory keeps both.
func TestColdBoot(t *testing.T) {
	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	bothTiers(t, func(t *testing.T, m *Manager, tier string) {
		ctx := longCtx(t)
		info := mustCreate(t, m, "a", CreateRequest{})
		b1 := bootID(t, m, info.ID)
		if b1 == strings.TrimSpace(string(host)) {
			t.Errorf("the sandbox sees the host's boot id %s", b1)
		}
		// Root in the sandbox can neither write, remount nor unmount it.
		out, code, err := run(ctx, m, "a", info.ID, `f=/proc/sys/kernel/random/boot_id
			echo 00000000-0000-4000-8000-000000000000 2>/dev/null >$f && echo wrote
			umount $f 2>/dev/null && echo unmounted
			umount -l $f 2>/dev/null && echo detached
			mount -o remount,rw,bind $f 2>/dev/null && echo remounted
			cat $f`)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != b1 {
			t.Errorf("the sandbox changed or uncovered its boot id (exit %d):\n%s", code, out)
		}

		marker := fmt.Sprintf("hutch-cold-boot-%d-%s", os.Getpid(), info.ID)
		background := `nohup sh -c 'sleep 1000; : ` + marker + `' >/dev/null 2>&1 &`
		mustRun(t, m, "a", info.ID, "echo kept >/etc/hutch-cold-boot; "+background)
		if _, err := m.PauseWith(ctx, "a", info.ID, PauseOptions{FilesOnly: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Resume(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		b2 := bootID(t, m, info.ID)
		if b2 == b1 {
			t.Errorf("paused without memory and resumed, the boot id is still %s", b1)
		}
		if got := mustRun(t, m, "a", info.ID, "cat /etc/hutch-cold-boot"); got != "kept\n" {
			t.Errorf("the file after the cold boot: %q", got)
		}

		// Paused with memory, a resume keeps the boot and its processes;
		// with Reboot it boots again.
		mustRun(t, m, "a", info.ID, background)
		if _, err := m.Pause(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Resume(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		if b := bootID(t, m, info.ID); b != b2 || !sleeping(t, m, info.ID, marker) {
			t.Errorf("resumed with memory: boot id %s (was %s), the background process running: %v", b, b2, sleeping(t, m, info.ID, marker))
		}
		if _, err := m.Pause(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ResumeWith(ctx, "a", info.ID, ResumeOptions{Reboot: true}); err != nil {
			t.Fatal(err)
		}
		if b := bootID(t, m, info.ID); b == b2 || sleeping(t, m, info.ID, marker) {
			t.Errorf("resumed with Reboot: boot id %s (was %s), the background process running: %v", b, b2, sleeping(t, m, info.ID, marker))
		}
		if got := mustRun(t, m, "a", info.ID, "cat /etc/hutch-cold-boot"); got != "kept\n" {
			t.Errorf("the file after the reboot: %q", got)
		}
		if err := m.Destroy(ctx, "a", info.ID); err != nil {
			t.Fatal(err)
		}
	})
}

// longCtx is a context for a test that pauses and resumes gVisor
// sandboxes several times (each a checkpoint or a start of runsc).
func longCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitState waits for sandbox id to be in state.
func waitState(t *testing.T, m *Manager, id, state string) Info {
	t.Helper()
	var info Info
	if !testutil.Eventually(time.Minute, func() bool {
		var err error
		info, err = m.Get(context.Background(), "a", id)
		return err == nil && info.State == state
	}) {
		t.Fatalf("sandbox %s: %q, want %q", id, info.State, state)
	}
	return info
}

// expireSoon sets sandbox id to time out in a second.
func expireSoon(t *testing.T, ctx context.Context, m *Manager, id string) {
	t.Helper()
	if _, err := m.Extend(ctx, "a", id, time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestPauseOnTimeout: a sandbox whose Lifecycle pauses it on its timeout
// is paused then, not ended, and kept paused for the daemon's maximum
// timeout; resumed, it has the lifetime it was created with again, and
// its timeout pauses it again. Without memory, its processes are gone and
// it boots afresh.
func TestPauseOnTimeout(t *testing.T) {
	bothTiers(t, func(t *testing.T, m *Manager, tier string) {
		ctx := longCtx(t)
		for _, filesOnly := range []bool{false, true} {
			r := CreateRequest{Lifecycle: Lifecycle{PauseOnTimeout: true, FilesOnly: filesOnly}}
			r.Timeout = 2 * time.Hour
			info := mustCreate(t, m, "a", r)
			marker := fmt.Sprintf("hutch-on-timeout-%d-%s", os.Getpid(), info.ID)
			mustRun(t, m, "a", info.ID, `echo kept >/etc/hutch-on-timeout; nohup sh -c 'sleep 1000; : `+marker+`' >/dev/null 2>&1 &`)
			b1 := bootID(t, m, info.ID)
			expireSoon(t, ctx, m, info.ID)
			paused := waitState(t, m, info.ID, store.StatePaused)
			if !paused.ExpiresAt.After(time.Now().Add(time.Hour)) {
				t.Errorf("paused on its timeout, it expires at %s: want the daemon's maximum timeout from the pause", paused.ExpiresAt)
			}
			if withMem, err := m.PausedWithMemory(ctx, "a", info.ID); err != nil || withMem == filesOnly {
				t.Errorf("files only %v: paused with memory %v, %v", filesOnly, withMem, err)
			}
			resumed, err := m.Resume(ctx, "a", info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !resumed.ExpiresAt.Before(paused.ExpiresAt) || !resumed.ExpiresAt.After(time.Now().Add(time.Hour)) {
				t.Errorf("resumed, it expires at %s (paused, at %s): want its lifetime of 2h from the resume", resumed.ExpiresAt, paused.ExpiresAt)
			}
			if b, running := bootID(t, m, info.ID), sleeping(t, m, info.ID, marker); (b == b1) == filesOnly || running == filesOnly {
				t.Errorf("files only %v: after the resume boot id %s (was %s), the background process running: %v", filesOnly, b, b1, running)
			}
			if got := mustRun(t, m, "a", info.ID, "cat /etc/hutch-on-timeout"); got != "kept\n" {
				t.Errorf("the file after the resume: %q", got)
			}
			expireSoon(t, ctx, m, info.ID)
			waitState(t, m, info.ID, store.StatePaused)
			if err := m.Destroy(ctx, "a", info.ID); err != nil {
				t.Fatal(err)
			}
		}
	})
}
