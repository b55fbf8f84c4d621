package microvm

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/agent"
	"github.com/hutch-sandbox/hutch/internal/testutil"
)

// busyboxRoot is an EROFS root with the host's static busybox as its
// shell and tools, for a guest of Config.RootImage.
func busyboxRoot(t *testing.T) string {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	testutil.Need(t, err == nil, "no busybox (Debian's busybox-static; scripts/test.sh installs it)")
	_, err = exec.LookPath("mkfs.erofs")
	testutil.Need(t, err == nil, "no mkfs.erofs (Debian's erofs-utils; scripts/test.sh installs it)")
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "etc", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "sleep", "cat", "echo", "touch", "head", "od", "tr", "test"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/motd"), []byte("from the root image\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "root.erofs")
	if out, err := exec.Command("mkfs.erofs", "--quiet", img, root).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v: %s", err, out)
	}
	return img
}

// run runs sh -c script in the guest and returns its output.
func run(ctx context.Context, t *testing.T, c *agent.Client, script string) string {
	t.Helper()
	p, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"/bin/sh", "-c", script}, Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	done := make(chan struct{})
	go func() { errOut.ReadFrom(p.Stderr); close(done) }()
	out.ReadFrom(p.Stdout)
	<-done
	st, err := p.Wait()
	if err != nil || st.Code != 0 {
		t.Fatalf("%s: %+v, %v: %s", script, st, err, errOut.String())
	}
	return out.String()
}

// TestSaveRestore: a guest of a root image is saved to a file and
// restored from it by a new QEMU: a process that holds a value in its
// memory only goes on with it, the files of its writable layer are there,
// the agent attaches again, and the guest's clock is the host's again
// (not where it stood when saved), at its pace.
func TestSaveRestore(t *testing.T) {
	k := needVM(t)
	img := busyboxRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id := testutil.UnprivilegedUID
	cfg := Config{Kernel: k, AllowEmulation: true, UID: id, GID: id, Log: testLog(t), RootImage: img, Workspace: "/workspace", MemoryMiB: 256}
	vm, err := Boot(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if !vm.Savable() {
		t.Fatal("a guest of a root image is not savable")
	}
	c := agent.NewClient(vm.Conn())
	if got := run(ctx, t, c, "cat /etc/motd"); got != "from the root image\n" {
		t.Errorf("the root image's file: %q", got)
	}
	// The value lives in the process only; it writes it once told to.
	run(ctx, t, c, `v=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); echo "$v" > /workspace/before
(while ! test -e /workspace/go; do sleep 0.1; done; echo "$v" > /workspace/after) >/dev/null 2>&1 &`)
	before := run(ctx, t, c, "cat /workspace/before")

	conn, err := c.Detach(ctx)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	start := time.Now()
	if err := vm.Save(state); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("saved %d MiB of state in %v", fi.Size()>>20, time.Since(start))
	conn.Close()
	if err := vm.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the host's clock goes on without the guest

	start = time.Now()
	vm2, err := Restore(ctx, cfg, state)
	if err != nil {
		t.Fatal(err)
	}
	defer vm2.Close()
	t.Logf("restored in %v", time.Since(start))
	c2, err := agent.Attach(vm2.Conn())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	run(ctx, t, c2, "touch /workspace/go")
	if !testutil.Eventually(time.Minute, func() bool {
		_, err := c2.Stat(ctx, "/workspace/after")
		return err == nil
	}) {
		t.Fatal("the process did not go on after the restore")
	}
	if after := run(ctx, t, c2, "cat /workspace/after"); after != before || len(before) != 17 {
		t.Errorf("the value the process held: %q after the restore, %q before", after, before)
	}
	// Under emulation the guest keeps the counter as its clock (a busy
	// host's lost ticks made its watchdog fall back to jiffies).
	if cs := strings.TrimSpace(run(ctx, t, c2, "cat /sys/devices/system/clocksource/clocksource0/current_clocksource")); vm2.Emulated() && cs != "tsc" {
		t.Errorf("the guest's clock source is %q, want tsc", cs)
	}
	checkClock(ctx, t, c2)
}
